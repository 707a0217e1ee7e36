"""The talker's prompt and text steps (omni_core/models/qwen3_omni/prompt.py): equal to what HF builds
from the same reply; user turns found by role; text steps r1'.., tts_eos once, then tts_pad."""

from __future__ import annotations

import pytest
import torch

from omni_core import SpeechRequest

from omni_core.models.qwen3_omni.prompt import TalkerPromptBuilder, TextSteps, assistant_start, user_positions

from .conftest import our_pipeline
from .test_talker import hf_talker_inputs

IM_START, USER, ASSISTANT, SYSTEM = 1, 2, 3, 4


def test_speak_mode_prompt_equals_hf(hf, pipe):
    text = "Say exactly this."
    prompt, reply, want, _ = hf_talker_inputs(hf, pipe, text, 4)
    builder = TalkerPromptBuilder(pipe.config, pipe.thinker, pipe.talker)
    steps = TextSteps(builder, reply, done=True)
    got = builder.prompt(prompt, steps.first_spoken, pipe.speaker_id("ethan"))
    torch.testing.assert_close(got, want["inputs_embeds"], atol=1e-5, rtol=1e-5)
    trailing = want["trailing_text_hidden"]
    got_steps = torch.cat([steps[k] for k in range(trailing.shape[1] + 2)], dim=1)
    torch.testing.assert_close(got_steps[:, :trailing.shape[1]], trailing, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_steps[:, -2:], want["tts_pad_embed"].expand(1, 2, -1))


def test_user_positions_are_the_user_turns_and_the_assistant_turn_is_the_last():
    ids = [IM_START, SYSTEM, 10, IM_START, USER, 11, 12, IM_START, ASSISTANT, 13, IM_START, USER, 14,
           IM_START, ASSISTANT, 15]
    assert user_positions(ids, IM_START, USER) == [3, 4, 5, 6, 10, 11, 12]
    assert assistant_start(ids, IM_START, ASSISTANT) == 13
    with pytest.raises(ValueError, match="no '<|im_start|>assistant' turn"):
        assistant_start(ids[:7], IM_START, ASSISTANT)


def builder_and_prompt():
    pipe = our_pipeline("tiny")
    prompt = pipe.chat_prompt("Hi")
    U = len(user_positions(prompt, pipe.config.token_ids["im_start"], pipe.config.token_ids["user"]))
    return pipe, TalkerPromptBuilder(pipe.config, pipe.thinker, pipe.talker), prompt, U


def test_prompt_is_the_user_part_plus_nine_positions_with_the_speaker_in_it():
    pipe, builder, prompt, U = builder_and_prompt()
    assert builder.prompt(prompt, 72, pipe.speaker_id(None)).shape == (1, U + 9, pipe.config.talker.hidden_size)
    other = builder.prompt(prompt, 72, pipe.speaker_id("chelsie"))
    assert not torch.equal(other, builder.prompt(prompt, 72, pipe.speaker_id(None)))  # the speaker is in it


def test_a_reply_without_a_spoken_token_is_refused_by_the_builder():
    pipe, builder, prompt, U = builder_and_prompt()
    with pytest.raises(ValueError, match="first spoken token"):
        builder.prompt(prompt, None, pipe.speaker_id(None))


def test_a_one_token_chat_reply_ends_with_no_frames_and_says_why():
    """max_text_tokens=1: the reply's only token is never spoken (as in HF), so nothing is said."""
    pipe = builder_and_prompt()[0]
    result = pipe.generate(SpeechRequest("Hi", mode="chat", max_text_tokens=1, max_frames=5))
    assert result.codes.shape == (0, 16) and result.stats.stopped == "eos"
    assert any("nothing to speak" in w for w in result.stats.warnings)
    assert pipe.generate(SpeechRequest("Hi", mode="chat", max_text_tokens=2, max_frames=3)).codes.shape == (3, 16)


class Projector:
    """Stands in for TalkerPromptBuilder: project(id) is the id itself, tts_eos -1, tts_pad -2."""
    device = torch.device("cpu")
    tts_eos, tts_pad = torch.tensor([[[-1.0]]]), torch.tensor([[[-2.0]]])

    def project(self, ids):
        return ids[..., None].float()


def test_text_steps_read_the_next_token_then_eos_once_then_pad():
    steps = TextSteps(Projector(), [10, 11, 12, 13], done=True)  # 13: the reply's last (never spoken)
    assert [float(steps[k]) for k in range(5)] == [11, 12, -1, -2, -2]
    assert steps.first_spoken == 10 and steps.spoken == [10, 11, 12]
    assert float(TextSteps(Projector(), [10], done=True)[0]) == -1  # one token: eos at once


def test_text_steps_as_the_thinker_writes():
    steps = TextSteps(Projector())
    steps.add(10)
    assert not steps.can_prompt and steps.first_spoken is None and steps.spoken == []
    steps.add(11)
    assert steps.can_prompt and steps.first_spoken == 10 and not steps.ready(0)  # is 11 the last?
    steps.add(12)
    assert steps.ready(0) and float(steps[0]) == 11 and not steps.ready(1)
    with pytest.raises(AssertionError, match="text step 1 is not known yet"):
        steps[1]
    steps.finish()
    assert steps.ready(1) and float(steps[1]) == -1
