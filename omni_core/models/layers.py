"""Transformer blocks shared by the thinker, talker, code predictor and codec.

Parameter names follow the checkpoint, with two fusions serving engines use:
`qkv_proj` holds q_proj, k_proj, v_proj stacked by rows and `gate_up_proj` holds
gate_proj, up_proj (one matmul instead of three or two: decoding small models is
bound by per-op overhead). The loader (loading/checkpoint.py) maps the names. Numerics
follow the HF reference: norms in float32, RoPE tables in float32 then cast,
router softmax in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from omni_core.models.config import DecoderConfig
from omni_core.models.invariant import Linear, on_one_thread


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's RMSNorm over the last dim: normalise in float32, cast back, then scale by `weight`
    ([D], or [heads, D] for per-head weights)."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32 and weight.dim() == 1:
        return F.rms_norm(x, weight.shape, weight, eps=eps)  # the same maths in one call (on CPU, ATen's ops in turn)
    return weight * F.rms_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


class Rope:
    """Rotary tables. With `mrope_section`, Qwen3-Omni's interleaved MRoPE: frequency
    i takes its position from axis (i mod 3) within the section sizes; for text the
    three axes hold the same position, which makes it equal to 1-D RoPE."""

    def __init__(self, head_dim: int, theta: float, mrope_section: tuple[int, ...] | None = None):
        self.head_dim, self.theta, self.mrope_section = head_dim, theta, mrope_section
        self._inv_freq: dict[torch.device, torch.Tensor] = {}
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def table(self, start: int, length: int, device: torch.device, dtype: torch.dtype):
        """cos, sin [length, D] for positions start.. (text: one position per token), from a cached
        table that grows by doubling; equal to `self(arange(...))` element for element."""
        key = (device, dtype)
        cos, sin = self._tables.get(key, (None, None))
        if cos is None or cos.shape[0] < start + length:
            size = max(64, 2 * (start + length))
            cos, sin = self(torch.arange(size, device=device), dtype)
            self._tables[key] = (cos, sin)
        return cos[start:start + length], sin[start:start + length]

    def inv_freq(self, device: torch.device) -> torch.Tensor:
        if device not in self._inv_freq:  # computed on the CPU, as HF does, then moved
            exps = torch.arange(0, self.head_dim, 2, dtype=torch.float, device="cpu") / self.head_dim
            self._inv_freq[device] = (1.0 / (self.theta ** exps)).to(device)
        return self._inv_freq[device]

    def __call__(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: [T] (or [3, T] for MRoPE axes t, h, w) → cos, sin: [T, head_dim]."""
        inv_freq = self.inv_freq(positions.device)
        if self.mrope_section is None:
            freqs = positions[..., None].float() * inv_freq  # [T, D/2]
        else:
            axes = positions.expand(3, -1) if positions.dim() == 1 else positions
            per_axis = axes[..., None].float() * inv_freq  # [3, T, D/2]
            freqs = per_axis[0].clone()
            for axis in (1, 2):  # interleave: h takes 1, 4, 7, ...; w takes 2, 5, 8, ...
                idx = slice(axis, self.mrope_section[axis] * 3, 3)
                freqs[..., idx] = per_axis[axis, ..., idx]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, H, T, D]; cos, sin: [T, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class KVCache:
    """Preallocated K/V for every layer: k[l], v[l]: [B, KVH, capacity, D].

    `length` positions are filled; a forward of T new positions writes
    [length, length+T) in every layer, then `advance(T)`. Grows by doubling.
    """

    def __init__(self, num_layers: int, batch: int, kv_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype, device: torch.device):
        shape = (batch, kv_heads, max(capacity, 1), head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.length = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + k.shape[2]
        if end > self.k[layer].shape[2]:
            self._grow(layer, end)
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def reserve(self, end: int) -> None:
        """Room for `end` positions in every layer (grown here, so that a compiled step never meets
        the growing branch of `update`: that would compile it again)."""
        for layer in range(len(self.k)):
            if end > self.k[layer].shape[2]:
                self._grow(layer, end)

    def _grow(self, layer: int, needed: int) -> None:
        size = max(needed, 2 * self.k[layer].shape[2])
        for buf in (self.k, self.v):
            old = buf[layer]
            buf[layer] = torch.zeros((*old.shape[:2], size, old.shape[3]), dtype=old.dtype, device=old.device)
            buf[layer][:, :, :old.shape[2]] = old

    def advance(self, n: int) -> None:
        self.length += n

    def layer_view(self, layer: int) -> "KVCache":
        """A cache of layer `layer` alone, sharing its tensors and length (a compiled layer's: writes land
        here; room is reserved first, as a growth would replace the view's tensors, not these)."""
        view = KVCache.__new__(KVCache)
        view.k, view.v, view.length = [self.k[layer]], [self.v[layer]], self.length
        return view


def causal_mask(T: int, L: int, device) -> torch.Tensor:
    """[T, L] bool: the last T of L positions each see the past and themselves, not what follows."""
    return torch.ones(T, L, dtype=torch.bool, device=device).tril(L - T)


def attention_in_loops(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                       scale: float) -> torch.Tensor:
    """Attention written as products, sums and a softmax, for a compiled graph on a CPU: inductor writes them
    as loops of its own, in which each row's and head's sums run whole, in one order, whatever the batch
    (its kernels run on one thread: packages.CPU_KERNELS). q [B, H, T, D] over k, v [B, KVH, L, D], mask [T, L]
    bool or None → [B, H, T, D]."""
    B, H, T, D = q.shape
    KVH = k.shape[1]
    q = q.view(B, KVH, H // KVH, T, 1, D)  # each key head's query heads
    k, v = k[:, :, None, None], v[:, :, None, None]  # [B, KVH, 1, 1, L, D]
    scores = (q * k).sum(-1) * scale  # [B, KVH, H / KVH, T, L]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1).unsqueeze(-1) * v).sum(-2).view(B, H, T, D)


class Attention(nn.Module):
    # Rows of several requests share this module's calls (the code predictor's: `CodePredictorModel`): its
    # attention runs on one thread. At 2 threads ATen's CPU kernel splits a query's keys across the threads
    # by the call's batch and heads, so a row got other bits beside others than alone (torch 2.13, one query
    # over 9 or more keys); on one thread every row's bits are its own. A compiled graph cannot switch
    # threads, so there it is written out (`attention_in_loops`). The talker's and thinker's decode gives each
    # row a call of its own (`decode_rows`) and keeps every thread.
    serial = False

    def __init__(self, cfg: DecoderConfig, qk_norm: bool = True):
        super().__init__()
        H, KVH, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.head_dim, self.sizes = D, [H * D, KVH * D, KVH * D]
        self.qkv_proj = Linear(cfg.hidden_size, (H + 2 * KVH) * D, bias=False)  # q_proj; k_proj; v_proj
        self.o_proj = Linear(H * D, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(D, cfg.rms_norm_eps) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(D, cfg.rms_norm_eps) if qk_norm else nn.Identity()

    def _qk_norm(self, qk: torch.Tensor) -> torch.Tensor:
        """qk: [B, T, H + KVH, D] → q heads normed with q_norm, k heads with k_norm."""
        if isinstance(self.q_norm, nn.Identity):
            return qk
        H, KVH = self.sizes[0] // self.head_dim, self.sizes[1] // self.head_dim
        weight = torch.cat([self.q_norm.weight.expand(H, -1), self.k_norm.weight.expand(KVH, -1)])
        return rms_norm(qk, weight, self.q_norm.eps)

    def heads(self, x: torch.Tensor):
        """x [B, T, C] → the q and k heads side by side [B, T, H + KVH, D], normed (one norm for both, and
        one rotation after it), and v [B, T, KVH, D]."""
        B, T, _ = x.shape
        qk, v = self.qkv_proj(x).split([self.sizes[0] + self.sizes[1], self.sizes[2]], dim=-1)
        return self._qk_norm(qk.view(B, T, -1, self.head_dim)), v.view(B, T, -1, self.head_dim)

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x [B, T, C] → q [B, H, T, D], k, v [B, KVH, T, D], normed and rotated."""
        qk, v = self.heads(x)
        qk = apply_rope(qk.transpose(1, 2), cos, sin)
        H = self.sizes[0] // self.head_dim
        return qk[:, :H], qk[:, H:], v.transpose(1, 2)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None):
        """q [B, H, T, D] over k, v [B, KVH, L, D] (the new positions are the last T of L) → [B, H, T, D]."""
        T, L = q.shape[2], k.shape[2]
        # Causal within the new positions, full over the past.
        causal = mask is None and T > 1
        if causal and L != T:
            mask, causal = causal_mask(T, L, q.device), False
        if self.serial and q.device.type == "cpu":  # (a GPU's kernel has no CPU threads to split)
            if torch.compiler.is_compiling():  # a graph cannot switch threads; it calls ATen's kernel as it is
                return attention_in_loops(q, k, v, causal_mask(T, L, q.device) if causal else mask,
                                          self.head_dim ** -0.5)
            return on_one_thread(self._sdpa, q, k, v, mask, causal)
        return self._sdpa(q, k, v, mask, causal)

    def _sdpa(self, q, k, v, mask, causal):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                              scale=self.head_dim ** -0.5, enable_gqa=True)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None = None,
                layer: int = 0, mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = self.project(x, cos, sin)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # [B, KVH, L, D]: past and new positions
        return self.o_proj(self.attend(q, k, v, mask).transpose(1, 2).reshape(B, T, -1))

    def decode_rows(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, caches: list[KVCache],
                    layer: int) -> torch.Tensor:
        """One new token for each of B requests, each with its own cache (ragged lengths):
        x [B, 1, C], cos/sin [B, 1, 1, D]. Projections run batched; each row attends over
        exactly its own past, so its floats are those of a batch of one."""
        B = x.shape[0]
        q, k, v = self.project(x, cos, sin)
        rows = []
        for b, cache in enumerate(caches):
            kb, vb = cache.update(layer, k[b:b + 1], v[b:b + 1])
            rows.append(self.attend(q[b:b + 1], kb, vb))
        return self.o_proj(torch.cat(rows).transpose(1, 2).reshape(B, 1, -1))

    def grouped(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, groups: list[tuple],
                layer: int) -> torch.Tensor:
        """Groups of rows packed into one sequence, each group's rows alike (B_g rows of T_g positions at the
        same positions, one batched cache or none): x [1, N, C] (N = Σ B_g T_g, group by group, row by row);
        cos, sin [N, 1, D]: each packed position's rotation; groups: (B_g, T_g, cache or None). The projections,
        the q/k norm and the rotation run over all N rows at once (per row, per element); each group attends
        as a batch of its own: the floats of the group's own `forward`."""
        H, D = self.sizes[0] // self.head_dim, self.head_dim
        qk, v = self.heads(x)
        qk = apply_rope(qk, cos, sin)  # [1, N, H + KVH, D]
        out, at = [], 0
        for B, T, cache in groups:
            qk_g = qk[0, at:at + B * T].view(B, T, -1, D).transpose(1, 2)  # [B, H + KVH, T, D]
            q, k, v_g = qk_g[:, :H], qk_g[:, H:], v[0, at:at + B * T].view(B, T, -1, D).transpose(1, 2)
            if cache is not None:
                k, v_g = cache.update(layer, k, v_g)
            out.append(self.attend(q, k, v_g).transpose(1, 2).reshape(1, B * T, -1))
            at += B * T
        return self.o_proj(torch.cat(out, dim=1))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_up_proj = Linear(hidden, 2 * intermediate, bias=False)  # gate_proj; up_proj
        self.down_proj = Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class ResizeMLP(nn.Module):
    """One space into another (text_projection, hidden_projection): fc1, SiLU, fc2, with biases."""

    def __init__(self, in_dim: int, intermediate: int, out_dim: int):
        super().__init__()
        self.linear_fc1 = Linear(in_dim, intermediate, bias=True)
        self.linear_fc2 = Linear(intermediate, out_dim, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))
