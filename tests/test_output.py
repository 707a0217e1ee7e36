"""What a request gives back (omni_core/engine/output.py): a Frame per frame, audio chunks of 1, 2, 4,
8, 8, ... frames, and the Result (zero frames too); rows due at the same stream position and chunk
length decode in one codec call, newcomers first, each bit for bit as alone; compare mode counts
mismatches; a failure is handed to the stream. Driven by hand with made-up codes on the tiny model's codec."""

from __future__ import annotations

import numpy as np
import torch

from omni_core import AudioChunk, Done, Frame, SpeechRequest
from omni_core.engine.codec_stream import LocalStream
from omni_core.engine import output
from omni_core.engine.sequence import Sequence
from omni_core.models.qwen3_omni.prompt import TextSteps

from .conftest import our_pipeline


def ready(request: SpeechRequest, reply: list[int]):
    """A Sequence as admission leaves it (the reply known, a codec stream), and the tiny model."""
    model = our_pipeline("tiny").model
    seq = Sequence(request, [], model.device, model.dtype)
    seq.admitted_at = seq.submitted_at  # as the scheduler admits it
    seq.reply, seq.decoder = TextSteps(None, reply, done=True), LocalStream(model.code2wav)
    return seq, model


def add(seq, model, i: int, other=None, batch: int = 1) -> None:
    """Frame i: CB0 = i, CB1..15 = i + 1 .. i + 15, probabilities 0.5."""
    C = model.config.talker.hidden_size
    codes = torch.arange(i + 1, i + 16)[None]
    predicted = (codes, torch.full((1, 15), 0.5), torch.zeros(1, 15, C), codes[..., None].repeat(1, 1, 5),
                 torch.full((1, 15, 5), 0.1))
    output.add_frame(seq, torch.tensor([i]), torch.tensor([0.5]), torch.full((1, 5), i), torch.full((1, 5), 0.1),
                     predicted, other, 1.0, 2.0, batch, model)
    if output.audio_due(seq):  # as the engine's step does (for a group of one)
        output.decode([seq], model)


def drain(seq) -> list:
    events = []
    while not seq.events.empty():
        events.append(seq.events.get())
    return events


def test_audio_comes_in_chunks_of_1_2_4_8_8_frames_and_the_result_has_everything():
    seq, model = ready(SpeechRequest("Hello.", max_frames=23), [72, 105, model_im_end()])
    for i in range(23):
        add(seq, model, i, batch=1 + i % 2)
    events = drain(seq)
    frames = [e for e in events if isinstance(e, Frame)]
    chunks = [e for e in events if isinstance(e, AudioChunk)]
    assert [f.index for f in frames] == list(range(23)) and frames[4].codes.tolist() == list(range(4, 20))
    assert frames[4].top_codes.shape == (16, 5) and frames[4].batch == 1 and frames[5].batch == 2
    assert [c.first_frame for c in chunks] == [0, 1, 3, 7, 15]
    assert [len(c.audio) for c in chunks] == [1920 - 555, 2 * 1920, 4 * 1920, 8 * 1920, 8 * 1920]
    output.finish(seq, "max_frames", model)
    done = drain(seq)
    assert len(done) == 1 and isinstance(done[0], Done) and seq.finished and seq.decoder is None
    r = done[0].result
    assert r.codes.shape == (23, 16) and r.codes.dtype == np.int64 and r.probs.shape == (23, 16)
    assert r.top_codes.shape == (23, 16, 5) and r.top_probs.dtype == np.float32
    np.testing.assert_array_equal(r.audio, np.concatenate([c.audio for c in chunks]))
    s = r.stats
    assert (s.frames, s.stopped, s.batch_max, s.batch_mean) == (23, "max_frames", 2, np.mean([1 + i % 2 for i in range(23)]))
    assert s.audio_s == len(r.audio) / 24000 and s.rtf == s.total_s / s.audio_s and s.mismatches is None
    assert r.text == "Hello." and r.text_ids == [72, 105] and s.text_tokens == 2


def record(seq, model, frames: range, offset: int = 0) -> None:
    """Frames without decoding them (the engine decodes after every row's frame is in)."""
    C = model.config.talker.hidden_size
    for i in frames:
        codes = (torch.arange(i + 1, i + 16)[None] + offset) % 2048
        output.add_frame(seq, torch.tensor([i]), torch.tensor([0.5]), torch.full((1, 5), i),
                         torch.full((1, 5), 0.1), (codes, torch.full((1, 15), 0.5), torch.zeros(1, 15, C),
                                                   codes[..., None].repeat(1, 1, 5), torch.full((1, 15, 5), 0.1)),
                         None, 1.0, 2.0, 1, model)


def test_rows_at_one_position_decode_together_newcomers_first_each_as_alone():
    old = [ready(SpeechRequest("Hello.", max_frames=9), [72, model_im_end()])[0] for _ in range(2)]
    new, model = ready(SpeechRequest("Hi.", max_frames=9), [72, model_im_end()])
    solo, _ = ready(SpeechRequest("Hello.", max_frames=9), [72, model_im_end()])
    offsets = (0, 500, 0)  # the second old row has codes of its own; solo is the first's twin
    for seq, offset in zip((*old, solo), offsets):  # the old rows have heard frame 0 (one chunk)
        record(seq, model, range(1), offset)
        output.decode([seq], model)
    for seq, offset in zip((*old, solo), offsets):
        record(seq, model, range(1, 3), offset)  # frames 1, 2: their second chunk (2 frames) is due
    record(new, model, range(1))  # the newcomer's first frame: its first chunk is due
    assert all(output.audio_due(s) for s in (*old, new))
    groups = output.codec_groups([*old, new])
    assert groups == [[new], old]  # the newcomer's first audio first; the others in one call
    for group in groups:
        output.decode(group, model)
    output.decode([solo], model)
    chunks = [[e.audio for e in drain(s) if isinstance(e, AudioChunk)] for s in (*old, solo)]
    assert [len(c) for c in chunks] == [2, 2, 2]
    assert all(np.array_equal(a, b) for a, b in zip(chunks[0], chunks[2]))  # batched = alone, bit for bit
    assert not np.array_equal(chunks[0][1], chunks[1][1])  # and each row got its own audio


def test_finish_decodes_what_is_pending():
    seq, model = ready(SpeechRequest("Hi."), [72, model_im_end()])
    for i in range(2):  # frame 0 is decoded at once, frame 1 waits for frame 2
        add(seq, model, i)
    assert len(seq.pending) == 1
    output.finish(seq, "eos", model)
    chunks = [e for e in drain(seq) if isinstance(e, AudioChunk)]
    assert [c.first_frame for c in chunks] == [0, 1] and len(chunks[1].audio) == 1920


def test_zero_frames_give_an_empty_result():
    seq, model = ready(SpeechRequest("Nothing."), [model_im_end()])
    output.finish(seq, "eos", model)
    events = drain(seq)
    assert len(events) == 1 and isinstance(events[0], Done)
    r = events[0].result
    assert r.codes.shape == (0, 16) and r.probs.shape == (0, 16) and r.top_codes.shape == (0, 16, 5)
    assert r.audio.shape == (0,) and r.audio.dtype == np.float32
    s = r.stats
    assert (s.frames, s.rtf, s.predictor_ms_per_frame, s.batch_max, s.batch_mean, s.first_audio_s) == \
        (0, None, None, 0, None, None)


def test_compare_mode_marks_and_counts_where_the_kv_predictor_differs():
    seq, model = ready(SpeechRequest("Hi.", predictor="compare"), [72, model_im_end()])
    other = torch.arange(1, 16)[None].clone()
    other[0, 3] = 999  # differs from CB4 = 4
    add(seq, model, 0, other=other)
    frame = next(e for e in drain(seq) if isinstance(e, Frame))
    assert np.flatnonzero(frame.mismatch).tolist() == [4] and frame.other_codes[4] == 999
    assert frame.other_codes[0] == 0  # CB0 is the talker's, shared
    output.finish(seq, "max_frames", model)
    assert next(e for e in drain(seq) if isinstance(e, Done)).result.stats.mismatches == 1


def test_chat_text_is_the_decoded_reply_and_a_failure_goes_to_the_stream():
    pipe = our_pipeline("tiny")
    ids = pipe.tokenizer("ok", add_special_tokens=False)["input_ids"]
    seq, model = ready(SpeechRequest("Say ok.", mode="chat"), ids + [model_im_end()])
    assert output.result(seq, model).text == "ok"
    error = RuntimeError("boom")
    output.fail(seq, error)
    (event,) = drain(seq)
    assert isinstance(event, output.Failed) and event.error is error and seq.finished


def model_im_end() -> int:
    return our_pipeline("tiny").model.im_end
