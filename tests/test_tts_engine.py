"""Qwen3-TTS in the batched engine: requests taken in together equal their solo runs (codes, audio);
the first audio comes with the first frame; EOS waits for two frames."""

from __future__ import annotations

import numpy as np
import pytest

from omni_core import AudioChunk, Frame, SpeechRequest
from tests.test_engine import assert_same, collect, staggered
from tests.tts_oracle import our_tts, tone

CUSTOM = [
    SpeechRequest("Hello world, this is a test.", speaker="vivian", language="english", max_frames=9),
    SpeechRequest("Good morning", speaker="dylan", text_input="streaming", predictor="kv", max_frames=12),
    SpeechRequest("Sampled voice.", speaker="ryan", do_sample=True, seed=3, top_k=20, max_frames=7),
    SpeechRequest("Speak slowly here.", speaker="ryan", instruct="Slowly.", predictor="compare", max_frames=10),
    SpeechRequest("A penalty.", speaker="vivian", repetition_penalty=1.3, do_sample=True, seed=4, max_frames=8),
]
CLIP = tone(1.2)
CLONES = [
    SpeechRequest("Good morning world", reference_audio=(24000, CLIP), reference_text="Hello the voice", max_frames=6),
    SpeechRequest("Is a test", reference_audio=(24000, CLIP), max_frames=8, predictor="kv"),
    SpeechRequest("Good morning", reference_audio=(24000, tone(0.8, seed=2)), reference_text="Hello",
                  text_input="whole", do_sample=True, seed=7, max_frames=5),
]


@pytest.mark.parametrize("kind, requests", [("custom_voice", CUSTOM), ("base", CLONES)])
def test_requests_together_equal_their_solo_runs(kind, requests):
    pipe = our_tts(kind, exact=False)
    solo = [pipe.generate(r) for r in requests]
    together = [collect(s) for s in pipe.stream_together(requests)]
    for got, want in zip(together, solo):
        assert_same(got, want)
    assert max(r.stats.batch_max for r in together) == len(requests)
    for got, want in zip(staggered(pipe, requests), solo):  # joining while others are mid-utterance
        assert_same(got, want)


def test_first_audio_comes_with_the_first_frame():
    events = list(our_tts("custom_voice", exact=False).stream(SpeechRequest("Hello there", speaker="vivian", max_frames=5)))
    kinds = [type(e).__name__ for e in events if isinstance(e, (Frame, AudioChunk))]
    assert kinds[:2] == ["Frame", "AudioChunk"]  # nothing held back: 1920 samples after frame 0
    first = next(e for e in events if isinstance(e, AudioChunk))
    assert len(first.audio) == 1920 and first.first_frame == 0


def test_codec_eos_is_blocked_for_the_first_two_frames():
    pipe = our_tts("custom_voice", exact=False)
    mask0, mask2 = pipe.model.cb0_mask(0), pipe.model.cb0_mask(2)
    eos = pipe.model.codec_eos
    assert mask0[eos] and pipe.model.cb0_mask(1)[eos] and not mask2[eos]
    assert np.array_equal(mask0.numpy(), mask2.numpy() | (np.arange(len(mask0)) == eos))


@pytest.mark.parametrize("batched", [True, False])
def test_short_chunks_decode_together_and_long_ones_stream_by_stream(monkeypatch, batched):
    """Chunks of up to TTSCodec.TOGETHER_FRAMES frames of rows at one stream position decode in one codec call
    (faster at the real widths), longer ones one stream at a time (faster there too); each row as alone. The
    codec batched (the default mode's, codec/backend.py) or row by row."""
    from omni_core.codec import backend
    from omni_core.engine import codec_stream

    calls, real = [], codec_stream.push_together
    monkeypatch.setattr(codec_stream, "push_together",
                        lambda decoders, chunks: calls.append((len(decoders), chunks[0].shape[2])) or real(decoders, chunks))
    pipe = our_tts("custom_voice", exact=False)
    assert backend.runs_batched(pipe.code2wav)  # the default mode's where it holds, as here
    backend.use_batched(pipe.code2wav, batched)
    try:
        requests = [SpeechRequest(text, speaker="vivian", max_frames=15) for text in ("One.", "Two words.", "Three more.")]
        solo = [pipe.generate(r) for r in requests]
        calls.clear()
        together = [collect(s) for s in pipe.stream_together(requests)]
    finally:
        backend.use_batched(pipe.code2wav, True)
    for got, want in zip(together, solo):
        assert_same(got, want)
    lengths = [r.codes.shape[0] for r in together]
    assert min(lengths) >= 7, lengths  # the rows reached their 4-frame chunks together
    assert (3, 1) in calls and (3, 2) in calls and (1, 4) in calls
    assert all(rows == 1 for rows, frames in calls if frames > pipe.model.code2wav.TOGETHER_FRAMES)
