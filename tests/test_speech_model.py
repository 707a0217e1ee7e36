"""`SpeechModel` (omni_core/engine/speech_model.py): the chat prompt is the tokenizer's chat template
with a generation prompt; speakers by name, the default when none is given; the named ids."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from omni_core.synthetic.tiny import CODEC_IDS, SPEAKERS, TOKEN_IDS

from .conftest import our_pipeline


def test_chat_prompt_is_the_chat_template_with_the_assistant_turn_open():
    model = our_pipeline("tiny").model
    ids = model.chat_prompt("Hi!")
    im_start, im_end, user, assistant = (TOKEN_IDS[k] for k in ("<|im_start|>", "<|im_end|>", "user", "assistant"))
    newline = ord("\n")
    assert ids == [im_start, user, newline, *b"Hi!", im_end, newline, im_start, assistant, newline]
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)


def test_speaker_ids_and_the_default():
    model = our_pipeline("tiny").model
    assert model.default_speaker == "ethan"
    assert model.speaker_id(None) == model.speaker_id("") == SPEAKERS["ethan"]
    assert model.speaker_id("chelsie") == SPEAKERS["chelsie"]
    family = copy.copy(model.family)
    family.default_speaker = "aiden"
    assert dataclasses.replace(model, family=family).speaker_id(None) == SPEAKERS["aiden"]
    with pytest.raises(KeyError):
        model.speaker_id("nobody")  # requests are checked before they get here (request.py)


def test_named_ids_come_from_the_config():
    model = our_pipeline("tiny").model
    assert model.im_end == TOKEN_IDS["<|im_end|>"] and model.codec_eos == CODEC_IDS["codec_eos_token_id"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.family = None  # read-only after loading
