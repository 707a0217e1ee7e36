"""The Qwen3-TTS codec (omni_core/codec/qwen3_tts.py) against the official package's tokenizer, and
its streaming decode against its whole decode."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from omni_core import RequestError, SpeechRequest
from omni_core.codec.streaming import StreamingDecoder, push_together
from tests.tts_oracle import oracle, our_tts, tone

CODES = np.random.default_rng(1).integers(0, 2048, (40, 16))  # crosses the 6-frame attention window


def test_decode_equals_the_package():
    want = oracle("decode", "custom_voice", {"codes": CODES})["audio"]
    got = our_tts("custom_voice").decode(CODES)
    assert got.shape == want.shape == (40 * 1920,)
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert np.abs(want).max() > 0.1


@pytest.mark.parametrize("seconds, rate", [(1.3, 24000), (0.93, 24000)])
def test_encode_equals_the_package(seconds, rate):
    clip = tone(seconds, rate)
    want = oracle("encode", "base", {"audio": clip, "sample_rate": np.array(rate)})["codes"]
    got = our_tts("base").encode(clip, rate)
    assert got.dtype == np.int64 and got.shape == (int(np.ceil(len(clip) / 1920)), 16)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got[:, 0])) > 1  # the codes vary over time


# The encoder transformer's `sliding_window` (encoder_config, in its own steps: two per frame) on the
# oracle's checkpoints: custom_voice 16 steps (8 frames), base 32 (16 frames). The package's transformers
# (4.57.3) attends over the whole clip, window or not; transformers 5 applied the window, so from the
# window on the codes differed (#41).
WINDOW_FRAMES = {"custom_voice": 8, "base": 16}


def window_clip(kind: str, times: float) -> np.ndarray:
    return tone(times * WINDOW_FRAMES[kind] * 1920 / 24000, seed=3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind, times", [("base", 0.5), ("base", 1), ("base", 3), ("custom_voice", 3)])
def test_encode_past_the_encoder_window_equals_the_package(kind, times, dtype):
    clip = window_clip(kind, times)
    want = oracle("encode", kind, {"audio": clip, "sample_rate": np.array(24000)}, dtype=dtype)["codes"]
    got = our_tts(kind, dtype).encode(clip, 24000)
    assert got.shape == want.shape == (round(times * WINDOW_FRAMES[kind]), 16)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("times", [0.5, 1, 3])
def test_a_clone_from_a_clip_past_the_encoder_window_equals_the_package(times):
    """The Base model's reference codes come from the same encoder (ICL clone, both text modes)."""
    clip = window_clip("base", times)
    reqs = [dict(text="Good morning world", language="English", ref_text="Hello the voice", ref_audio=clip,
                 ref_sample_rate=24000, max_frames=4, text_input=mode) for mode in ("streaming", "whole")]
    want = oracle("run", "base", reqs)
    for i, req in enumerate(reqs):
        got = our_tts("base").generate(SpeechRequest(
            req["text"], language=req["language"], reference_audio=(24000, clip), reference_text=req["ref_text"],
            max_frames=req["max_frames"], text_input=req["text_input"]))
        np.testing.assert_array_equal(got.codes, want[f"codes_{i}"], err_msg=f"request {i}")
        audio = want[f"audio_{i}"]  # the package's cut may keep the reference's last sample (test_tts_talker)
        assert 0 <= len(audio) - len(got.audio) <= 1
        np.testing.assert_allclose(got.audio, audio[len(audio) - len(got.audio):], atol=1e-4)


def test_xvector_equals_the_package():
    clip = tone(1.1)
    want = oracle("xvector", "base", {"audio": clip, "sample_rate": np.array(24000)})["xvector"]
    got = our_tts("base").speaker_encoder.embed(torch.from_numpy(clip)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def decode_whole_and_streamed(codec, codes: torch.Tensor, chunks: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(the whole decode, the pushes of `chunks` frames concatenated); every push's audio at once."""
    with torch.no_grad():
        whole = codec(codes)[0, 0]
    stream, start, parts = StreamingDecoder(codec), 0, []
    assert stream.holdback == 0
    for n in chunks:
        parts.append(stream.push(codes[..., start:start + n])[0, 0])
        assert parts[-1].shape[0] == 1920 * n
        start += n
    return whole, torch.cat(parts)


@pytest.mark.parametrize("chunks", [[1] * 12, [3, 1, 7, 1], [12]])
def test_streaming_decode_equals_whole_decode(chunks):
    """Every frame's 1920 samples come out as soon as the frame does (nothing held back), and the
    pushes together are the whole decode: in float64 to 1e-12 (the streaming state is exact); in
    float32, where a push's convolutions and attention run over other lengths and so sum in other
    orders, the pushes are about as close to the float64 decode as float32's whole decode is (measured on
    the AMD EPYC, 1-frame pushes: 9e-15 in float64; in float32 1.3e-5 against the whole decode's 7.1e-6)."""
    codec = our_tts("custom_voice").code2wav
    codes = torch.from_numpy(CODES[:sum(chunks)].T)[None]  # [1, 16, T]
    whole64, streamed64 = decode_whole_and_streamed(copy.deepcopy(codec).double(), codes, chunks)
    assert whole64.dtype == torch.float64 and whole64.abs().max() > 0.1
    torch.testing.assert_close(streamed64, whole64, atol=1e-12, rtol=0)
    whole, streamed = decode_whole_and_streamed(codec, codes, chunks)
    whole_error = (whole.double() - whole64).abs().max().item()
    streamed_error = (streamed.double() - whole64).abs().max().item()
    assert 0 < whole_error < 1e-4 and streamed_error <= 3 * whole_error, (streamed_error, whole_error)


@pytest.mark.parametrize("threads", [1, 2])
def test_streams_pushed_together_give_each_its_audio_alone(threads):
    """Three streams' chunks of 1, 2, 4 and 8 frames in one codec call each: every stream's audio is
    bit for bit its own decode's. Before, the 1x1 projection after the codebooks ran the batch through
    one convolution and the transformer's input projection read a lone stream's transposed view, so
    streams decoded otherwise together than alone (also at the real 0.6B widths, measured). The engine
    decodes chunks of more than two frames one by one, for speed (`TTSCodec.decodes_together`)."""
    codec, before = our_tts("custom_voice", exact=False).code2wav, torch.get_num_threads()  # batch-invariant
    codes = [torch.from_numpy(np.roll(CODES, 7 * i, axis=0)[:15].T)[None] for i in range(3)]  # [1, 16, 15]
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            together, alone = [StreamingDecoder(codec) for _ in codes], [StreamingDecoder(codec) for _ in codes]
            start = 0
            for n in (1, 2, 4, 8):
                chunks = [c[..., start:start + n] for c in codes]
                for got, stream, chunk in zip(push_together(together, chunks), alone, chunks):
                    assert torch.equal(got, stream.push(chunk)), (threads, n)
                start += n
    finally:
        torch.set_num_threads(before)


def test_fewer_codebooks_and_dropped_cells():
    pipe = our_tts("custom_voice")
    full = pipe.decode(CODES[:8])
    coarse = pipe.decode(CODES[:8], num_codebooks=1)
    assert coarse.shape == full.shape and not np.allclose(coarse, full)
    drop = np.zeros((8, 16), bool)
    drop[:, 1:] = True  # dropping codebooks 1..15 everywhere is the 1-codebook decode
    np.testing.assert_allclose(pipe.decode(CODES[:8], drop=drop), coarse, atol=1e-6)


@pytest.mark.parametrize("audio, rate, message", [
    (np.zeros(24000, np.float32), 24000, "silent"),
    (np.ones(61 * 8000, np.float32) * 0.1, 8000, "the limit is 60 s"),
    (np.array(["not", "audio"]), 24000, "samples must be numbers"),
    (tone(0.5), 123, "not audio this model can take"),
    (tone(0.5), 24000.5, "whole number of Hz"),
    (np.full(24000, np.nan, np.float32), 24000, "NaN"),
])
def test_encode_refuses_bad_audio(audio, rate, message):
    with pytest.raises(RequestError, match=message):
        our_tts("base").encode(audio, rate)


def test_encode_takes_other_rates_and_stereo():
    clip = tone(1.0, 16000)
    codes = our_tts("base").encode(np.stack([clip, clip], axis=1), 16000)  # [N, 2] at 16 kHz
    assert codes.shape == (13, 16)  # 1 s at 24 kHz: ceil(24000 / 1920)
    pcm = (tone(1.0) * 32767).astype(np.int16)
    np.testing.assert_array_equal(our_tts("base").encode(pcm, 24000), our_tts("base").encode(pcm / 32768, 24000))
