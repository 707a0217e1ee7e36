"""A batch of streams batched (codec/backend.py, codec/batching.py): every stream's audio is its own decode's bit
for bit, in batches of 1 to 8 streams; the audio is within rounding of the row-by-row decode and of HF's; a
transposed convolution over its stride's phases is the transposed convolution; the load checks it and keeps the
answer per machine, and a codec whose batched rows would differ stays row by row; exact mode stays row by row."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from omni_core import load_pipeline
from omni_core.codec import backend, batching
from omni_core.codec.backend import CausalTransConvNet
from omni_core.codec.streaming import StreamingDecoder, push_together

from .codec_models import PRESETS, models, random_codes

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="batched runs on oneDNN")


@pytest.fixture(scope="module", params=PRESETS)
def pair(request):
    """(HF's code2wav, a batched copy of ours)."""
    hf, ours = models(request.param)
    ours = copy.deepcopy(ours)
    backend.use_batched(ours, True)
    return hf, ours


def stream(codec, codes: list[torch.Tensor], chunks) -> list[torch.Tensor]:
    """Streams of codes [1, Q, T] each, pushed together chunk by chunk → each one's audio."""
    decoders, heard, at = [StreamingDecoder(codec) for _ in codes], [[] for _ in codes], 0
    for n in chunks:
        for h, wav in zip(heard, push_together(decoders, [c[..., at:at + n] for c in codes])):
            h.append(wav)
        at += n
    return [torch.cat(h, dim=-1) for h in heard]


@torch.no_grad()
def test_every_stream_of_a_batch_gets_its_own_bits(pair):
    """1 to 8 streams pushed together in the engine's chunks: each row equal to its stream alone."""
    _, ours = pair
    codes = [random_codes(seed=20 + i, num_frames=18) for i in range(8)]
    chunks = (1, 2, 4, 8, 3)
    alone = [stream(ours, [c], chunks)[0] for c in codes]
    for rows in (2, 3, 5, 8):
        for got, want in zip(stream(ours, codes[:rows], chunks), alone):
            assert torch.equal(got, want), rows


@torch.no_grad()
def test_batched_audio_is_within_rounding_of_row_by_row_and_hf(pair):
    hf, ours = pair
    codes = random_codes()
    rows = copy.deepcopy(ours)
    backend.use_batched(rows, False)
    got = ours(codes)
    assert backend.runs_batched(ours) and not backend.runs_batched(rows)
    assert not torch.equal(got, rows(codes))  # another kernel, so other last bits: the batched path did run
    torch.testing.assert_close(got, rows(codes), atol=1e-5, rtol=0)
    torch.testing.assert_close(got, hf(codes), atol=1e-5, rtol=0)
    streamed = torch.cat(stream(ours, [codes], (1, 2, 4, 8, 8, 7)), dim=-1)
    torch.testing.assert_close(streamed, got, atol=1e-4, rtol=0)


@pytest.mark.parametrize("kernel, stride", [(2, 2), (16, 8), (10, 5), (6, 3)])
@pytest.mark.parametrize("trim_left", [True, False])
@torch.no_grad()
def test_a_transposed_conv_over_its_stride_phases_is_the_transposed_conv(kernel, stride, trim_left):
    """The phases' regular convolution, interleaved, gives F.conv_transpose1d's outputs: float64 to 1e-12
    (the sums are the same products), and batched in float32 within rounding, whole and streamed."""
    gen = torch.Generator().manual_seed(kernel)
    module = CausalTransConvNet(6, 4, kernel, stride, trim_left)
    for p in module.parameters():
        p.copy_(torch.randn(p.shape, generator=gen))
    x = torch.randn(3, 6, 11, generator=gen)
    want = module(x)  # row by row, F.conv_transpose1d
    wide, phases = copy.deepcopy(module).double(), module.phases()
    z = F.conv1d(F.pad(x.double(), (module.overlap, 0)), wide.phases().weight, wide.phases().bias)
    y = z.view(3, stride, 4, 11).permute(0, 2, 3, 1).reshape(3, 4, 11 * stride)[..., module.trim if trim_left else 0:]
    torch.testing.assert_close(y, wide(x.double()), atol=1e-12, rtol=0)
    assert phases.weight.shape == (stride * 4, 6, kernel // stride)
    module.batched = True
    torch.testing.assert_close(module(x), want, atol=1e-5, rtol=0)


@torch.no_grad()
def test_the_load_checks_it_keeps_the_answer_and_a_codec_whose_rows_differ_stays_row_by_row(monkeypatch, tmp_path):
    monkeypatch.setenv("OMNI_CORE_CACHE", str(tmp_path))
    _, ours = models("tiny")
    codec = copy.deepcopy(ours)
    assert batching.holds(codec) and not backend.runs_batched(codec)  # here it holds; the check leaves it as it was
    assert batching.decide(codec) and backend.runs_batched(codec)
    kept, = (tmp_path / "codec").glob("*.json")
    plain = backend.convolve
    # A kernel that rounds by the batch: each row nudged by how many rows share its call
    monkeypatch.setattr(backend, "convolve", lambda conv, x, on: plain(conv, x, on) * (1 + 1e-6 * (x.shape[0] - 1)))
    assert not batching.holds(codec)
    assert batching.decide(codec)  # this machine's answer, kept: not checked again
    kept.unlink()
    assert not batching.decide(codec) and not backend.runs_batched(codec)
    assert not batching.decide(copy.deepcopy(ours).double())  # oneDNN has no float64: row by row


@torch.no_grad()
def test_a_check_that_fails_at_two_rows_decodes_only_those_two_alone(monkeypatch):
    """Each row is decoded alone when a comparison first reads it: where 2 streams together already differ from
    their lone decodes, the check decodes 2 streams alone and 2 together, not all 8 alone first."""
    _, ours = models("tiny")
    made = []

    class Counted(batching.StreamingDecoder):
        def __init__(self, codec):
            super().__init__(codec)
            made.append(self)

    monkeypatch.setattr(batching, "StreamingDecoder", Counted)
    assert batching.holds(copy.deepcopy(ours))
    assert len(made) == max(batching.ROWS) + sum(batching.ROWS)  # holding: every row alone, every batch together
    made.clear()
    plain = backend.convolve
    monkeypatch.setattr(backend, "convolve", lambda conv, x, on: plain(conv, x, on) * (1 + 1e-6 * (x.shape[0] - 1)))
    assert not batching.holds(copy.deepcopy(ours))
    assert len(made) == 2 * batching.ROWS[0] == 4


def test_a_codec_with_an_encoder_shares_the_answer_of_the_same_codec_without_one():
    """The answer is kept per decoder: a checkpoint's codec with Mimi's encoder and a random preset's without it
    (the real-width 0.6B's, float32: a 47-58 s check on a Zen 3) are one line; other decoder shapes are another."""
    import dataclasses

    from omni_core.loading import recipe

    codec = recipe.load_model("tiny-tts", device="cpu", dtype="float32", batch_invariant=False).modules["code2wav"]
    assert codec.cfg.encoder is not None
    bare, wider = copy.deepcopy(codec), copy.deepcopy(codec)
    bare.cfg = dataclasses.replace(codec.cfg, encoder=None)
    wider.cfg = dataclasses.replace(codec.cfg, latent_dim=2 * codec.cfg.latent_dim)
    assert batching._name(bare) == batching._name(codec) != batching._name(wider)


def test_the_default_mode_batches_the_codec_and_exact_mode_does_not():
    with load_pipeline("tiny", device="cpu") as default, load_pipeline("tiny", device="cpu", exact=True) as exact:
        assert backend.runs_batched(default.code2wav) == batching.holds(default.code2wav)
        assert backend.runs_batched(default.code2wav)  # it holds on every CPU measured
        assert not backend.runs_batched(exact.code2wav)
