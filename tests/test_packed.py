"""The codec's convolutions with packed weights (omni_core/codec/packed.py). The tiny codecs' weights are
below PACK_NUMEL, so these tests lower it: every convolution of the tiny codec then runs packed, and must
match HF's within float32 rounding, stream each row bit for bit as alone, and follow a changed weight."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn

from omni_core.codec import packed
from omni_core.codec.streaming import StreamingDecoder, push_together
from omni_core.engine.output import chunk_frames

from .codec_models import NUM_FRAMES, models, random_codes


@pytest.fixture
def pack_all(monkeypatch):
    monkeypatch.setattr(packed, "PACK_NUMEL", 0)


def spread(module: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return module.eval()


CONVS = [nn.Conv1d(16, 24, 7), nn.Conv1d(16, 16, 7, dilation=3), nn.Conv1d(16, 16, 7, groups=16),
         nn.ConvTranspose1d(24, 12, 16, stride=8), nn.ConvTranspose1d(24, 12, 4, stride=4)]


@torch.no_grad()
@pytest.mark.parametrize("index", range(len(CONVS)))
@pytest.mark.parametrize("T", [1, 5, 300])
def test_a_packed_conv_is_the_conv_within_rounding(pack_all, index, T):
    module = spread(CONVS[index], index)
    x = torch.randn(1, module.in_channels, T + 18, generator=torch.Generator().manual_seed(T))
    got = packed.conv(module, x)
    assert module in packed._packed  # it ran packed
    torch.testing.assert_close(got, module(x), atol=1e-5, rtol=1e-5)


def test_small_weights_gradients_and_other_dtypes_take_the_plain_conv(monkeypatch):
    module = spread(nn.Conv1d(8, 8, 7), 0)
    x = torch.randn(1, 8, 40)
    with torch.no_grad():
        assert torch.equal(packed.conv(module, x), module(x)) and module not in packed._packed  # below PACK_NUMEL
    monkeypatch.setattr(packed, "PACK_NUMEL", 0)
    assert torch.equal(packed.conv(module, x), module(x)) and module not in packed._packed  # autograd wants it plain
    half = spread(nn.Conv1d(8, 8, 7), 1).to(torch.float16)
    with torch.no_grad():
        assert torch.equal(packed.conv(half, x.half()), half(x.half())) and half not in packed._packed
        packed.conv(module, x)
    assert module in packed._packed  # the same float32 module, without autograd: packed


@torch.no_grad()
@pytest.mark.parametrize("index", range(len(CONVS)))
def test_a_packed_bfloat16_conv_is_the_conv_within_bfloat16_rounding(pack_all, index):
    """bfloat16 where oneDNN has it (the plain bfloat16 transposed conv is the codec's slowest call there)."""
    if torch.bfloat16 not in packed.packable_dtypes():
        pytest.skip("no bfloat16 convolutions in oneDNN on this CPU")
    module = spread(CONVS[index], 10 + index).to(torch.bfloat16)
    x = torch.randn(1, module.in_channels, 40, generator=torch.Generator().manual_seed(index)).bfloat16()
    got = packed.conv(module, x)
    assert module in packed._packed and got.dtype == torch.bfloat16
    want = module.float()(x.float())  # the exact sums, in float32
    module.bfloat16()
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(module(x).float(), want, atol=2e-2, rtol=2e-2)  # the plain conv: as close


@torch.no_grad()
def test_a_changed_weight_is_packed_again(pack_all):
    module = spread(nn.Conv1d(16, 16, 7), 0)
    x = torch.randn(1, 16, 50)
    first = packed.conv(module, x)
    spread(module, 1)  # new values in the same storage: its version moves
    again = packed.conv(module, x)
    torch.testing.assert_close(again, module(x), atol=1e-5, rtol=1e-5)
    assert (again - first).abs().max() > 0.1
    assert len(packed._packed[module]) == 1  # the old weight's copy went


@torch.no_grad()
def test_the_last_keep_lengths_are_kept_and_a_length_packed_again_gives_its_bits_again(pack_all):
    module = spread(nn.ConvTranspose1d(32, 16, 16, stride=8), 2)
    x = torch.randn(1, 32, 40)
    lengths = [2, 3, 5, 9, 17, 33, 20, 27, 38]  # more than KEEP
    first = {T: packed.conv(module, x[..., :T]) for T in lengths}
    assert [k[1][1] for k in packed._packed[module]] == lengths[-packed.KEEP:]
    for T in lengths:  # kept, or packed again: the same bits
        assert torch.equal(packed.conv(module, x[..., :T]), first[T])


@torch.no_grad()
def test_the_tiny_codec_all_packed_matches_hf_and_streams_each_row_as_alone(pack_all):
    hf, ours = models("tiny")
    codes = random_codes(batch=3, num_frames=NUM_FRAMES, seed=4)
    want = hf(codes)
    torch.testing.assert_close(ours(codes), want, atol=1e-5, rtol=0)
    convs = [m for m in ours.modules() if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)) and m.kernel_size[0] > 1]
    assert len(convs) > 20 and all(m in packed._packed for m in convs)  # all ran packed (kernel 1 is a matmul)
    together = [StreamingDecoder(ours) for _ in range(3)]
    alone = [StreamingDecoder(ours) for _ in range(3)]
    for start, n in ((0, 1), (1, 2), (3, 4), (7, 8)):
        chunks = [codes[b:b + 1, :, start:start + n] for b in range(3)]
        pushed = push_together(together, chunks)
        for b in range(3):
            assert torch.equal(pushed[b], alone[b].push(chunks[b]))


def held_copies() -> set[tuple[int, tuple, int]]:
    """Every packed copy now held: (conv, its key, the copy's identity)."""
    return {(id(conv), key, id(copy)) for conv, held in packed._packed.items() for key, copy in held.items()}


@torch.no_grad()
@pytest.mark.parametrize("preset", ["tiny", "tiny-b"])
def test_streams_one_after_another_pack_only_their_last_chunks_length_again(pack_all, preset):
    """A long-running engine decodes stream after stream, each in the engine's chunks (output.py: 1, 2, 4, 8, 8, ...
    frames, then the rest). Each conv meets a stream's five lengths (a transposed conv's first chunk has no past);
    once met, a later stream finds them packed and only its last chunk's length, when new, is packed again. With
    fewer copies than that, each length evicted the next one needed and every chunk of every stream packed again."""
    _, ours = models(preset)
    sizes = [chunk_frames(sent) for sent in range(5)]  # 1, 2, 4, 8, 8: then a last, shorter chunk
    codes = random_codes(num_frames=sum(sizes) + 5)
    for stream, last in enumerate([3, 5, 3, 5, 1]):
        before = held_copies()
        decoder = StreamingDecoder(ours)
        start = 0
        for n in sizes + [last]:
            decoder.push(codes[:, :, start:start + n])
            start += n
        new = held_copies() - before
        per_conv = collections.Counter(conv for conv, _, _ in new)
        if stream >= 2:  # the first two met every length
            assert max(per_conv.values(), default=0) <= 1, f"stream {stream}: a conv packed {max(per_conv.values())}"
