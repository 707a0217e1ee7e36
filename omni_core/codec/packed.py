"""The codec's largest convolutions on a CPU, with their weights packed for oneDNN, per input length.

F.conv1d and F.conv_transpose1d hand oneDNN a plain weight, which it reorders into its blocked layout on
every call, and for a short input it may take a slow algorithm too. A stream decodes a few frames a call,
so for the decoder's first convolutions (tens of MB of weights over a few dozen time steps) that is most
of the call: packed for the input length, these convolutions run several times faster (the figures:
BENCHMARKS.md, "Code2Wav (the codec)", and docs/benchmarks-history.md (q)).

A weight of PACK_NUMEL elements or more, float32 or bfloat16 (and, in a codec that runs batched, one of at most
SMALL_NUMEL elements, whose call costs its setup more than its sums), is packed
(`torch.ops.mkldnn._reorder_convolution_weight`, what inductor's frozen graphs use) for the input length it
meets, the first time it meets it (~0.1 s for 75 MB), and the copies of the KEEP lengths it met last are kept
(a copy packed for another length can be 100x slower). A stream meets five lengths: its chunks of 1, 2, 4 and
8 frames (a transposed conv's first chunk has no past inputs before it, its later chunks do) and its last,
shorter chunk; a clone's reference codes add their own (and its first chunk then has a past). With fewer
copies than a stream's lengths, the least recently used length is always the next one a stream needs, and a
long-running engine packed every chunk of every stream again (BENCHMARKS.md, "Code2Wav (the codec)"). In
bfloat16 the plain transposed convolution is slower still: about 30 ms a call for Qwen3-TTS's first
upsampling at any chunk length, against 0.7-3.5 ms packed (BENCHMARKS.md, "Code2Wav (the codec)"). The
packed kernel sums in another order than F.conv1d does: the audio is within the dtype's rounding of HF's,
not bit for bit. A batch of streams runs row by row or as one call (backend.py); either way each row gets its
solo bits (codec/batching.py checks the batched call at load).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict

import torch
from torch import nn

PACK_NUMEL = 8 * 2**20  # weights of this many elements are packed: the real codecs' first conv and transposed conv
# (11M and 19M elements: 60 MB a length in bfloat16, 120 MB in float32; 360 and 720 MB for KEEP lengths); the
# smaller ones gained nothing measurable; none of the tiny ones
SMALL_NUMEL = 2**16  # a batched codec's weights of at most this many elements are packed too: their call costs its
# setup more than its sums, and oneDNN's call with the plain weight reorders it each time (the tiny codec's
# convolutions: a lone stream's 1-frame push 3.7 -> 3.3 ms); at most KEEP x 256 KB a weight
KEEP = 6  # packed copies kept per weight, of the most recently used lengths: a stream's five, one to spare
_packed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # conv → {(weight key, length): packed}: not on the
# module, so a deepcopy or pickle of the codec never meets an opaque oneDNN tensor
_lock = threading.Lock()  # the engine's thread and a page's redecode may decode at once


def conv(module: nn.Conv1d | nn.ConvTranspose1d, x: torch.Tensor, plain=None, small: bool = False) -> torch.Tensor:
    """module(x) for x [B, C, T], through the packed weight where it applies; elsewhere plain(x) (module(x)
    unless given). small: weights of at most SMALL_NUMEL elements packed too (a batched codec's: backend.py)."""
    packed = _weight(module, x, small)
    if packed is None:
        return (plain or module)(x)
    padding, output_padding, stride, dilation = _dims(module)
    x2 = x[:, :, None]  # [B, C, 1, T]: oneDNN's packed convolutions are 2-d
    if isinstance(module, nn.ConvTranspose1d):
        y = torch.ops.mkldnn._convolution_transpose_pointwise(x2, packed, module.bias, padding, output_padding, stride,
                                                              dilation, module.groups, "none", [], "")
    else:
        y = torch.ops.mkldnn._convolution_pointwise(x2, packed, module.bias, padding, stride, dilation, module.groups,
                                                    "none", [], "")
    # oneDNN hands back channels-last [B, T, C] memory: made [B, C, T] contiguous, as the plain conv's, so the
    # layers after it (MKL's matmuls round a transposed row otherwise) see one layout alone and in a batch
    return y[:, :, 0].contiguous()


def _weight(module: nn.Conv1d | nn.ConvTranspose1d, x: torch.Tensor, small: bool = False) -> torch.Tensor | None:
    """The module's packed weight (packed now if it is new or changed), or None where the plain call applies."""
    w = module.weight
    sized = w.numel() >= PACK_NUMEL or small and w.numel() <= SMALL_NUMEL
    if not (sized and w.dtype == x.dtype and w.dtype in packable_dtypes()
            and w.device.type == x.device.type == "cpu" and module.padding_mode == "zeros"
            and not (torch.is_grad_enabled() and w.requires_grad) and torch.backends.mkldnn.is_available()):
        return None
    weight_key = (w.data_ptr(), w._version, tuple(w.shape))
    with _lock:
        held = _packed.setdefault(module, OrderedDict())
        if held and next(iter(held))[0] != weight_key:  # the weight changed: its old copies go
            held.clear()
        if (weight_key, x.shape[1:]) in held:
            held.move_to_end((weight_key, x.shape[1:]))
            return held[weight_key, x.shape[1:]]
    padding, output_padding, stride, dilation = _dims(module)
    w2, hint = w.detach()[:, :, None], [1, x.shape[1], 1, x.shape[2]]  # [out or in, in or out, 1, k]
    if isinstance(module, nn.ConvTranspose1d):
        packed = torch.ops.mkldnn._reorder_convolution_transpose_weight(w2, padding, output_padding, stride, dilation,
                                                                        module.groups, hint)
    else:
        packed = torch.ops.mkldnn._reorder_convolution_weight(w2, padding, stride, dilation, module.groups, hint)
    with _lock:
        held[weight_key, x.shape[1:]] = packed
        while len(held) > KEEP:
            held.popitem(last=False)
    return packed


@functools.cache
def packable_dtypes() -> tuple[torch.dtype, ...]:
    """float32, and bfloat16 where oneDNN has bfloat16 convolutions on this CPU."""
    return (torch.float32, torch.bfloat16) if torch.ops.mkldnn._is_mkldnn_bf16_supported() else (torch.float32,)


def _dims(module: nn.Conv1d | nn.ConvTranspose1d) -> tuple[list[int], ...]:
    """The 1-d module's padding, output padding, stride and dilation as 2-d ones over a height of 1."""
    return ([0, module.padding[0]], [0, module.output_padding[0]], [1, module.stride[0]], [1, module.dilation[0]])
