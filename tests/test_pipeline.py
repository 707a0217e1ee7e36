"""End to end against HF `Qwen3OmniMoeForConditionalGeneration.generate` (the oracle):
same weights, greedy → identical codes, allclose audio."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omni_core import AudioChunk, Done, Frame, SpeechRequest, TextDelta

from .conftest import our_pipeline


def hf_generate(hf, pipe, text: str, max_text_tokens: int, max_frames: int, speaker: str = "ethan"):
    """HF's codes [T, 16], waveform and thinker sequence for a chat request."""
    captured = {}
    original = hf.code2wav.chunked_decode

    def capture(codes, **kw):  # observe the codes HF decodes; decoding itself is HF's
        captured["codes"] = codes.clone()
        return original(codes, **kw)

    hf.code2wav.chunked_decode = capture
    try:
        ids = torch.tensor([pipe.chat_prompt(text)])
        sequences, wav = hf.generate(
            input_ids=ids, speaker=speaker, thinker_max_new_tokens=max_text_tokens,
            thinker_eos_token_id=pipe.config.token_ids["im_end"], thinker_do_sample=False,
            talker_max_new_tokens=max_frames + 1, talker_do_sample=False)
    finally:
        hf.code2wav.chunked_decode = original
    return captured["codes"][0].T.numpy(), wav.reshape(-1).numpy(), sequences[0].tolist()


@pytest.mark.parametrize("predictor", ["reprefill", "kv"])
def test_chat_codes_and_audio_equal_hf(hf, pipe, predictor):
    text, max_text_tokens, max_frames = "Hello there, how are you?", 12, 24
    want_codes, want_wav, sequence = hf_generate(hf, pipe, text, max_text_tokens, max_frames)
    got = pipe.generate(SpeechRequest(text, mode="chat", predictor=predictor,
                                      max_text_tokens=max_text_tokens, max_frames=max_frames))
    reply = sequence[len(got.prompt_ids):]
    assert sequence[:len(got.prompt_ids)] == got.prompt_ids
    assert got.text_ids == reply[:-1]  # HF never feeds back (so never speaks) the reply's last token
    assert got.codes.shape == want_codes.shape == (max_frames, 16)
    np.testing.assert_array_equal(got.codes, want_codes)
    assert len(got.audio) == len(want_wav)
    np.testing.assert_allclose(got.audio, want_wav, atol=1e-4, rtol=0)


def test_speaker_changes_codes_like_hf(hf, pipe):
    text = "Speakers differ."
    want, _, _ = hf_generate(hf, pipe, text, 6, 8, speaker="chelsie")
    got = pipe.generate(SpeechRequest(text, mode="chat", speaker="chelsie", max_text_tokens=6, max_frames=8))
    np.testing.assert_array_equal(got.codes, want)
    other = pipe.generate(SpeechRequest(text, mode="chat", speaker="aiden", max_text_tokens=6, max_frames=8))
    assert not np.array_equal(other.codes, got.codes)


@pytest.mark.parametrize("exact", [True, False])
def test_compare_mode_reports_no_mismatch_in_float32_greedy(preset, exact):
    """Where re-prefill and KV agree in exact mode, they agree in the default mode too: a mismatch comes from
    the predictors, never from a kernel choice."""
    pipe = our_pipeline(preset, exact=exact)
    result = pipe.generate(SpeechRequest("Compare both predictors.", predictor="compare", max_frames=10))
    assert result.stats.mismatches == 0
    alone = pipe.generate(SpeechRequest("Compare both predictors.", predictor="kv", max_frames=10))
    np.testing.assert_array_equal(result.codes, alone.codes)


def test_stream_events_in_order(pipe):
    events = list(pipe.stream(SpeechRequest("Stream me.", max_frames=9)))
    kinds = [type(e) for e in events]
    assert kinds[0] is TextDelta and kinds[-1] is Done
    frames = [e for e in events if isinstance(e, Frame)]
    chunks = [e for e in events if isinstance(e, AudioChunk)]
    assert [f.index for f in frames] == list(range(9))
    assert len(chunks) >= 3
    # The first audio arrives right after the first frame, long before the last one.
    assert kinds.index(AudioChunk) < kinds.index(Frame) + 2
    result = events[-1].result
    np.testing.assert_array_equal(np.stack([f.codes for f in frames]), result.codes)
    np.testing.assert_array_equal(np.concatenate([c.audio for c in chunks]), result.audio)
    np.testing.assert_allclose(result.audio, pipe.decode(result.codes), atol=1e-4, rtol=0)
    assert ((result.probs > 0) & (result.probs <= 1)).all()


@pytest.mark.parametrize("mode", ["speak", "chat"])
def test_overlap_gives_the_sequential_codes(pipe, mode):
    request = SpeechRequest("Overlap the thinker and the talker.", mode=mode, max_frames=40, max_text_tokens=10)
    overlapped = pipe.generate(request, overlap=True)
    sequential = pipe.generate(request, overlap=False)
    np.testing.assert_array_equal(overlapped.codes, sequential.codes)
    np.testing.assert_array_equal(overlapped.audio, sequential.audio)


def test_sampling_is_seeded(pipe):
    def run(seed):
        return pipe.generate(SpeechRequest("Sample me.", do_sample=True, seed=seed, max_frames=8)).codes

    np.testing.assert_array_equal(run(3), run(3))
    assert not np.array_equal(run(3), run(4))


def test_default_lengths_scale_with_text(pipe):
    """Without max_frames the limit is 8 + 4 per text token. This relies on the tiny model's random
    weights never choosing codec EOS in these few frames (tests/test_eos.py covers the EOS path)."""
    short = pipe.generate(SpeechRequest("Hi."))
    longer = pipe.generate(SpeechRequest("Hi, this is a longer sentence."))
    assert short.stats.stopped == longer.stats.stopped == "max_frames"
    assert short.stats.frames == 8 + 4 * len(short.text_ids) + 4  # + the EOS, never spoken
    assert 0 < short.stats.frames < longer.stats.frames


def test_bfloat16_runs():
    pipe = our_pipeline("tiny", "bfloat16")
    result = pipe.generate(SpeechRequest("Brain float.", max_frames=6))
    assert result.codes.shape == (6, 16) and result.stats.dtype == "bfloat16"
    assert np.isfinite(result.audio).all() and len(result.audio) > 0
