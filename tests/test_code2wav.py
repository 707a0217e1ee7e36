"""Code2Wav (omni_core/codec/code2wav.py) against the HF reference: the checkpoint layout, the
whole-utterance decode, coarser decodes from the first k codebooks, dropped cells, batch rows.
The reference weights are spread (tests/codec_models.py) so that the tolerances bite."""

from __future__ import annotations

import copy

import pytest
import torch

from omni_core.codec.code2wav import Code2Wav
from omni_core.loading.checkpoint import checkpoint_names

from .codec_models import NUM_FRAMES, PRESETS, models, random_codes


@pytest.fixture(scope="module", params=PRESETS)
def pair(request):
    return models(request.param)


def test_state_dict_is_the_checkpoint_layout(pair):
    hf, ours = pair
    names = checkpoint_names(ours)  # every checkpoint tensor has exactly one place in ours (q/k/v fused)
    assert set(names) == set(hf.state_dict())
    for name, (param, rows) in names.items():
        assert (param if rows is None else param[rows]).shape == hf.state_dict()[name].shape
    with torch.device("meta"):
        meta = Code2Wav(ours.cfg)
    assert all(p.is_meta for p in meta.parameters()) and not list(meta.buffers())


@torch.no_grad()
def test_forward_matches_hf(pair):
    hf, ours = pair
    codes = random_codes(num_frames=NUM_FRAMES + 7)
    want = hf(codes)
    assert want.std() > 0.05 and (want.abs() < 1).float().mean() > 0.9  # audible, mostly unclamped
    got = ours(codes)
    assert got.shape == want.shape == (1, 1, ours.num_samples(codes.shape[-1]))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(got, hf.chunked_decode(codes, chunk_size=300, left_context_size=25), atol=1e-5, rtol=0)


def test_num_samples_is_1920_per_frame_less_the_held_back_tail():
    _, ours = models("tiny")
    assert ours.cfg.samples_per_frame == 1920
    assert [ours.num_samples(T) for T in (1, 2, 10)] == [1920 * T - 555 for T in (1, 2, 10)]
    assert ours.num_samples(0) <= 0  # no frames, no audio


@torch.no_grad()
@pytest.mark.parametrize("k", [1, 5])
def test_fewer_codebooks_drop_the_residual_levels(pair, k):
    hf, ours = pair
    codes = random_codes()
    torch.testing.assert_close(ours(codes, num_codebooks=16), ours(codes), atol=0, rtol=0)
    # Reference: HF on a copy whose embedding rows for codebooks >= k are zero.
    coarse = copy.deepcopy(hf)
    coarse.code_embedding.weight[k * 2048:] = 0
    want = coarse(codes)
    got = ours(codes, num_codebooks=k)
    assert (want - ours(codes)).abs().max() > 1e-2  # the levels left out do matter
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours(codes[:, :k], num_codebooks=k), got, atol=0, rtol=0)


@torch.no_grad()
def test_keep_drops_single_cells_as_num_codebooks_drops_levels():
    _, ours = models("tiny")
    codes = random_codes(num_frames=6)
    keep = torch.ones(1, 16, 6, dtype=torch.bool)
    torch.testing.assert_close(ours(codes, keep=keep), ours(codes), atol=0, rtol=0)
    keep[:, 4:] = False  # codebooks 4..15 contribute nothing
    torch.testing.assert_close(ours(codes, keep=keep), ours(codes, num_codebooks=4), atol=0, rtol=0)
    one = torch.ones(1, 16, 6, dtype=torch.bool)
    one[0, 3, 2] = False  # a single cell
    assert (ours(codes, keep=one) - ours(codes)).abs().max() > 1e-4


@torch.no_grad()
def test_batch_rows_are_independent(pair):
    _, ours = pair
    codes = random_codes(batch=3, seed=2)
    batch = ours(codes)
    for row in range(3):
        alone = ours(codes[row:row + 1])
        torch.testing.assert_close(batch[row:row + 1], alone, atol=1e-5, rtol=0)
    assert (batch[0] - batch[1]).abs().max() > 1e-2


@torch.no_grad()
def test_bfloat16_smoke():
    _, ours = models("tiny")
    half = copy.deepcopy(ours).to(torch.bfloat16)
    codes = random_codes(num_frames=5)
    wav = half(codes)
    assert wav.dtype == torch.bfloat16 and wav.shape == (1, 1, ours.num_samples(5))
    assert torch.isfinite(wav).all() and wav.float().std() > 0.01


def test_bad_inputs_are_refused():
    _, ours = models("tiny")
    with pytest.raises(ValueError, match="num_codebooks"):
        ours(random_codes()[:, :15])
    with pytest.raises(ValueError, match="num_codebooks"):
        ours(random_codes(), num_codebooks=0)


@torch.no_grad()
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape, transposed", [((1, 3, 40_000), False), ((2, 48, 15_360), False),
                                               ((3, 96, 700), True), ((1, 4, 5), False)])
def test_snake_is_hf_bit_for_bit(shape, transposed, dtype):
    """SnakeBeta computes in one buffer, in place: HF's floats exactly, for any layout of its input."""
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeSnakeBeta

    from omni_core.codec.backend import SnakeBeta

    g = torch.Generator().manual_seed(sum(shape))
    B, C, T = shape
    x = (3 * torch.randn(B, T, C, generator=g)).transpose(1, 2) if transposed else 3 * torch.randn(shape, generator=g)
    ours, hf = SnakeBeta(C), Qwen3OmniMoeSnakeBeta(C)
    for p in (ours.alpha, ours.beta):
        p.copy_(torch.randn(C, generator=g))
    hf.load_state_dict(ours.state_dict())
    ours, hf, x = ours.to(dtype), hf.to(dtype), x.to(dtype)
    torch.testing.assert_close(ours(x), hf(x), atol=0, rtol=0)
