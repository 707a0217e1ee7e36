"""`Sequence` (omni_core/engine/sequence.py): one request's plain state; when it wants a reply token,
when its talker can start, its frame limit, its stop reasons, and what release lets go of."""

from __future__ import annotations

import threading

import torch

from omni_core import MAX_FRAMES, SpeechRequest
from omni_core.engine.sequence import Sequence, default_frames, default_text_tokens
from omni_core.models.qwen3_omni.prompt import TextSteps


def seq(overlap: bool = True, **fields) -> Sequence:
    return Sequence(SpeechRequest("hi", **fields), ["a warning"], torch.device("cpu"), torch.float32,
                    overlap=overlap)


def test_a_new_sequence_has_its_stats_and_its_own_seeded_generators():
    s = seq(seed=7, predictor="kv")
    assert (s.stats.device, s.stats.dtype, s.stats.predictor, s.stats.warnings) == ("cpu", "float32", "kv",
                                                                                   ["a warning"])
    assert isinstance(s.cancel, threading.Event) and not s.finished and s.spent == dict.fromkeys(s.spent, 0.0)
    draws = [torch.rand(1, generator=g).item() for g in (s.gen_talker, s.gen_thinker, s.gen_predictor["kv"])]
    assert len(set(draws)) == 3  # each stage its own stream
    assert torch.rand(1, generator=seq(seed=7).gen_talker).item() == draws[0]  # the same seed, the same stream
    assert torch.rand(1, generator=s.gen_predictor["reprefill"]).item() == draws[2]  # compare: like with like


def test_wants_a_token_while_the_talker_would_catch_up():
    s = seq()
    assert not s.wants_token()  # no thinker cache: speak mode
    s.thinker_cache, s.reply = object(), TextSteps(None, [1, 2])
    assert not s.wants_token()  # 2 tokens, 0 frames: r0..r1 known
    s.reply.add(3)
    s.codes = [None]  # 1 frame made: needs r0..r2
    assert not s.wants_token()
    s.codes = [None, None]
    assert s.wants_token()
    assert seq(overlap=False).wants_token() is False  # no cache yet
    sequential = seq(overlap=False)
    sequential.thinker_cache, sequential.reply = object(), TextSteps(None, [1, 2, 3, 4])
    assert sequential.wants_token()  # the whole reply first
    sequential.reply.finish()
    assert not sequential.wants_token()


def test_can_talk_needs_two_tokens_or_the_end_and_without_overlap_the_end():
    s = seq()
    s.reply = TextSteps(None, [1])
    assert not s.can_talk
    s.reply.add(2)
    assert s.can_talk and not s.talking
    sequential = seq(overlap=False)
    sequential.reply = TextSteps(None, [1, 2, 3])
    assert not sequential.can_talk
    sequential.reply.finish()
    assert sequential.can_talk


def test_frame_limit_is_the_requests_or_scales_with_the_finished_reply():
    assert seq(max_frames=9).max_frames() == 9
    s = seq()
    s.reply = TextSteps(None, [1, 2, 3])
    assert s.max_frames() == MAX_FRAMES  # the reply is not finished yet
    s.reply.finish()
    assert s.max_frames() == default_frames(3) == 8 + 12
    assert default_frames(10_000) == MAX_FRAMES
    assert [default_text_tokens(n) for n in (3, 100, 1000)] == [16, 100, 256]


def test_unread_and_paused_follow_the_reader_and_release_lets_go():
    s = seq()
    assert s.admitted_at is None and not s.paused  # the clock starts at admission (the scheduler's)
    s.codes = [None] * 4
    s.frames_read = 1
    assert s.unread == 3
    s.paused_since = 5.0
    assert s.paused
    s.thinker_cache = s.talker_cache = s.decoder = object()
    s.hidden, s.last_embeds = torch.zeros(1, 4), torch.zeros(1, 15, 4)
    s.emit("event")
    s.release()
    assert s.finished and s.events.get_nowait() == "event"
    assert (s.thinker_cache, s.talker_cache, s.decoder, s.hidden, s.last_embeds) == (None,) * 5
