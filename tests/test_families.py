"""The family adapters (omni_core/families/): each source's family is found once; each adapter admits a
request as its family's official implementation builds it, gives the talker's prompt and text inputs, the
CB0 rules, the abilities a request is checked against and the default speaker."""

from __future__ import annotations

import json

import pytest
import torch

from omni_core import SpeechRequest, load_pipeline
from omni_core.engine.sequence import Sequence
from omni_core.families import registry
from omni_core.families.qwen3_omni import Qwen3Omni
from omni_core.families.qwen3_tts import Qwen3TTS
from omni_core.loading import qwen3_omni, qwen3_tts
from omni_core.models.qwen3_tts import voices
from omni_core.synthetic.qwen3_tts import ensure_tiny_tts
from omni_core.synthetic.tiny import ensure_tiny

from .conftest import our_pipeline


@pytest.fixture(scope="module")
def omni():
    return our_pipeline("tiny").model


@pytest.fixture(scope="module")
def tts():
    return load_pipeline("tiny-tts", device="cpu", dtype="float32").model


def sequence(model, **fields) -> Sequence:
    return Sequence(SpeechRequest(fields.pop("text", "Hello there."), **fields), [], model.device, model.dtype)


class Opened:
    """An `open_stream` that records its prefixes and hands out a marker stream."""

    def __init__(self):
        self.prefixes = []

    def __call__(self, prefix):
        self.prefixes.append(prefix)
        return self


def test_a_source_s_family_is_found_once_from_its_config_or_its_name(tmp_path):
    assert registry.of_checkpoint(ensure_tiny("tiny")) is Qwen3Omni
    assert registry.of_checkpoint(ensure_tiny_tts()) is Qwen3TTS
    assert registry.of_checkpoint(tmp_path) is Qwen3Omni  # no config.json: Qwen3-Omni's checks say what is missing
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_tts"}))
    assert registry.of_checkpoint(tmp_path) is Qwen3TTS
    assert registry.of_model_type("qwen3_omni_moe") is Qwen3Omni and registry.of_model_type("llama") is None
    assert registry.of_random("qwen3-tts-1.7b") is Qwen3TTS and registry.of_random("qwen3-omni-30b-a3b") is Qwen3Omni
    assert Qwen3Omni.loading is qwen3_omni and Qwen3TTS.loading is qwen3_tts
    assert qwen3_omni.HUB_FILES is None and "speech_tokenizer/*" in qwen3_tts.HUB_FILES


def test_each_pipeline_holds_its_family_s_adapter(omni, tts):
    assert type(omni.family) is Qwen3Omni and type(tts.family) is Qwen3TTS
    assert registry.of_config(omni.config) is Qwen3Omni and registry.of_config(tts.config) is Qwen3TTS


@pytest.mark.parametrize("name", ["omni", "tts"])
def test_cb0_never_takes_the_special_band_but_codec_eos(name, request):
    model = request.getfixturevalue(name)
    mask, vocab, eos = model.family.suppress_mask, model.config.talker.vocab_size, model.codec_eos
    assert mask.shape == (vocab,) and mask[vocab - 1024:].sum() == 1023 and not mask[:vocab - 1024].any()
    assert not mask[eos]
    first = model.family.min_new_tokens  # Qwen3-TTS: no codec EOS in the first two frames (the package's)
    assert first == (0 if name == "omni" else 2)
    assert all(bool(model.cb0_mask(t)[eos]) == (t < first) for t in range(4))


def test_omni_abilities_and_default_speaker(omni):
    can = omni.family.abilities()
    assert can["family"] == "qwen3_omni" and can["chat"] and can["strip_text"] and can["title"] == "Qwen3-Omni"
    assert can["speakers"] == sorted(omni.config.speakers) and omni.family.default_speaker == "ethan"


def test_tts_abilities_and_default_speaker(tts):
    can = tts.family.abilities()
    assert can["family"] == "qwen3_tts" and not can["chat"] and not can["strip_text"]
    assert can["title"] == "Qwen3-TTS custom_voice"
    assert can["repetition_penalty"] == tts.config.generation["repetition_penalty"]
    assert tts.family.default_speaker == "dylan"  # the first speaker by name (the package names none)
    clean, _ = SpeechRequest("  Spaces stay. ").checked(can["speakers"], can)
    assert clean.text == "  Spaces stay. "  # tokenized as given, as the package does


def test_omni_speak_admission_is_the_text_as_the_reply(omni):
    seq, opened = sequence(omni), Opened()
    with torch.no_grad():
        omni.family.admit(omni, seq, opened)
    ids = omni.tokenizer("Hello there.", add_special_tokens=False)["input_ids"]
    assert seq.decoder is opened and opened.prefixes == [None]
    assert seq.prompt_ids == omni.chat_prompt("Hello there.") and seq.reply.ids == ids + [omni.im_end]
    assert seq.thinker_todo is None and seq.talker_prompt is None and seq.can_talk


def test_omni_chat_admission_leaves_the_prompt_to_the_thinker(omni):
    seq = sequence(omni, mode="chat", max_text_tokens=4)
    with torch.no_grad():
        omni.family.admit(omni, seq, lambda prefix: None)  # no audio: no stream
    assert seq.decoder is None and seq.reply.ids == [] and seq.max_text_tokens == 4
    assert seq.thinker_todo.tolist() == [omni.chat_prompt("Hello there.")] and seq.thinker_cache is not None


def test_omni_text_inputs_project_reply_tokens_in_one_call_each_row_as_alone(omni):
    """Rows reading reply tokens and rows past the reply (tts_eos, tts_pad) in one call: each row's input
    is its own text step (TextSteps[k])."""
    rows = []
    with torch.no_grad():
        for text, frames in (("One two three four.", 1), ("Hi.", 3), ("Hi.", 5), ("Five six seven.", 3)):
            seq = sequence(omni, text=text)
            omni.family.admit(omni, seq, lambda prefix: None)
            seq.codes = [None] * frames
            rows.append(seq)
        got = omni.family.text_inputs(rows)
        want = torch.cat([s.reply[len(s.codes) - 1] for s in rows])
    assert got.shape == (4, 1, omni.config.talker.hidden_size) and torch.equal(got, want)
    with torch.no_grad():
        prompt = omni.family.talker_prompt(omni, rows[0])
    assert torch.equal(prompt, rows[0].builder.prompt(rows[0].prompt_ids, rows[0].reply.first_spoken,
                                                      omni.speaker_id(None)))


def test_tts_admission_builds_the_talker_s_prompt_and_its_text_steps(tts):
    seq, opened = sequence(tts, speaker="vivian", language="english"), Opened()
    with torch.no_grad():
        tts.family.admit(tts, seq, opened)
        voice = voices.resolve(tts.config, "vivian", "english")
        voice_prompt = tts.family.prompts.build(seq.req.text, voice, seq.req.text_input == "whole")
    assert seq.decoder is opened and opened.prefixes == [None]  # no clone: nothing decoded first
    assert torch.equal(seq.talker_prompt, voice_prompt.embeds) and seq.prompt_ids == voice_prompt.ids
    assert seq.thinker_todo is None and seq.thinker_cache is None
    assert tts.family.talker_prompt(tts, seq) is seq.talker_prompt
    seq.codes = [None] * 2
    with torch.no_grad():
        assert torch.equal(tts.family.text_inputs([seq, seq]), torch.cat([seq.reply.step(1)] * 2))
