"""Qwen3-Omni's sparse MoE blocks: the router (softmax in float32, top-k), all experts of a layer
stacked, and the block that sums the routed experts and (talker) a sigmoid-gated shared expert.
A token's experts are summed in ascending expert order, as HF sums them."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from omni_core.models.config import DecoderConfig
from omni_core.models.invariant import PLAIN, SAFE, Linear, linear
from omni_core.models.layers import MLP

# Devices whose decoding reads the routed ids on the host (`Experts.forward`); elsewhere several rows, and
# compiled graphs, decode with `Experts.rows`, which never does. A host read costs a CPU nothing (it has no queue).
HOST_READS_ON = ("cpu",)


# A multiple of every CPU's vector loop (ATen's pointwise loops take two vectors at a time, 16 floats with AVX2,
# 32 with AVX-512, and leave the remainder to scalar code).
SIGMOID_WIDTH = 64


def row_sigmoid(gate: torch.Tensor) -> torch.Tensor:
    """sigmoid of an [N, 1] gate with the same code for every row, whatever N. Over [N, 1] ATen computes some
    rows with vector code and the others with scalar code, whose exp rounds otherwise, by the call's size: on an
    AVX2 CPU (Zen 3) a standalone call differs from its rows alone from 64 rows, and the talker's gates in the
    engine's 24-row decode steps gave 6 to 9 of 24 requests other bits than alone (test_engine's 17..32 rows).
    Over [N, 64] every element is vector code, a lone row's too (tests/test_moe.py)."""
    return torch.sigmoid(gate.expand(-1, SIGMOID_WIDTH).contiguous())[:, :1]


class Router(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cfg.num_experts, cfg.hidden_size))
        self.top_k, self.norm_topk_prob = cfg.num_experts_per_tok, cfg.norm_topk_prob
        self.plans = [SAFE]  # chosen at load (planner/choose.py)

    def plan_weights(self) -> list[torch.Tensor]:
        return [self.weight]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [N, C] → weights [N, k], expert ids [N, k]."""
        logits = linear(x, self.weight, plan=self.plans[0])
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(logits.dtype), ids


class Experts(nn.Module):
    """All experts of a layer, stacked: gate_up_proj [E, 2I, C], down_proj [E, C, I].
    The checkpoint stores them per expert; the loader writes each into its slot."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        E, I, C = cfg.num_experts, cfg.moe_intermediate_size, cfg.hidden_size
        self.gate_up_proj = nn.Parameter(torch.empty(E, 2 * I, C))
        self.down_proj = nn.Parameter(torch.empty(E, C, I))
        self.plans = [SAFE, SAFE]  # gate_up, down: chosen at load (planner/choose.py)

    def plan_weights(self) -> list[torch.Tensor]:
        """One expert's weights: every expert has the same shapes."""
        return [self.gate_up_proj[0], self.down_proj[0]]

    def _expert(self, x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
        """One expert's SwiGLU MLP on rows x [n, C]: gate_up [2I, C], down [C, I] → [n, C]."""
        gate, up = linear(x, gate_up, plan=self.plans[0]).chunk(2, dim=-1)
        return linear(F.silu(gate) * up, down, plan=self.plans[1])

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """x: [N, C]; weights, ids: [N, k]. Each expert once, over the rows routed to it (batch-invariant
        matmuls: a row gets the floats it gets alone); a row's experts land in ascending order, as HF sums them.
        The ids are read by the host: free on a CPU, which has no queue to wait for (`rows` is the other way)."""
        if x.shape[0] == 1:
            return self._one_token(x, weights, ids)
        out = torch.zeros_like(x)
        for e in torch.unique(ids).tolist():
            token, slot = torch.where(ids == e)
            y = self._expert(x[token], self.gate_up_proj[e], self.down_proj[e]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out

    def _one_token(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """One token, k experts, summed in ascending expert order (the same floats as `forward`: 0 + y = y)."""
        out = None
        for e, slot in sorted(zip(ids[0].tolist(), range(ids.shape[1]))):
            y = self._expert(x, self.gate_up_proj[e], self.down_proj[e]) * weights[:, slot, None]
            out = y if out is None else out + y
        return out.to(x.dtype)

    def rows(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """`forward`'s floats, with the ids never read by the host: sorted and used on the device, in fixed
        shapes (B x k expert calls of one row). For decoding on a GPU, where each host read of `forward`
        (two per expert present: ~1.3k per talker step at 16 rows, top-6 of 128) waits for the queue to
        drain and no CUDA graph can hold the step, and inside compiled graphs (one graph, no break).
        The price: each row's experts are copied out of the stack (index_select; one expert at a time, so
        the copies never pile up), about 3x the weight traffic of reading them in place, and an expert
        two rows share is read twice. On a CPU `forward` is quicker (docs/benchmarks-history.md (o))."""
        order = ids.argsort(dim=-1)  # a row's ids are distinct (top-k), so ascending order is unique
        ids, weights = ids.gather(-1, order), weights.gather(-1, order)
        out = []
        for b in range(x.shape[0]):
            row = None
            for s in range(ids.shape[1]):
                e = ids[b, s:s + 1]  # [1] on the device: index_select reads it there (an int would be a host read)
                gate_up, down = self.gate_up_proj.index_select(0, e)[0], self.down_proj.index_select(0, e)[0]
                y = self._expert(x[b:b + 1], gate_up, down) * weights[b:b + 1, s, None]
                row = y if row is None else row + y
            out.append(row)
        return torch.cat(out).to(x.dtype)


class SparseMoe(nn.Module):
    """Routed experts, plus (talker) a sigmoid-gated shared expert."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.gate = Router(cfg)
        self.experts = Experts(cfg)
        if cfg.shared_expert_intermediate_size:
            self.shared_expert = MLP(cfg.hidden_size, cfg.shared_expert_intermediate_size)
            self.shared_expert_gate = Linear(cfg.hidden_size, 1, bias=False)
        else:
            self.shared_expert = None

    def forward(self, x: torch.Tensor, sizes: list[int] | None = None) -> torch.Tensor:
        """x [B, T, C] → [B, T, C]. sizes: x [1, ΣT, C] packs several requests' prompt pieces of these lengths
        (`DecoderStack.prefill_rows`); in exact mode each piece's gate sigmoid is then its own call, as alone."""
        B, T, C = x.shape
        flat = x.reshape(-1, C)
        # Decoding (a token per row) in a compiled graph, or several rows on a GPU: no host reads
        # (`Experts.rows`). A lone row on a GPU keeps `forward`'s one read of its k ids per layer and reads
        # its experts in place: a third of `rows`' weight traffic (a GPU run has not weighed the two yet).
        on_device = T == 1 and (torch.compiler.is_compiling() or (x.device.type not in HOST_READS_ON and B > 1))
        out = (self.experts.rows if on_device else self.experts)(flat, *self.gate(flat))
        if self.shared_expert is not None:
            gate = self.shared_expert_gate(flat)  # [N, 1]
            if torch.compiler.is_compiling():
                # Inductor computes a [1, 1] tensor's sigmoid with scalar code and an [N, 1] one's with vector
                # code, whose exp rounds otherwise: a row would get other bits alone than beside others. Over
                # [N, C] every row's sigmoid is the same vector code.
                gate = torch.sigmoid(gate.expand(-1, C))
            elif self.shared_expert_gate.plan != PLAIN:  # batch-invariant: a row's bits are its own (row_sigmoid)
                gate = row_sigmoid(gate)
            elif sizes is not None:  # exact mode, as the official call of each piece
                gate = torch.cat([torch.sigmoid(g) for g in gate.split(sizes)])
            else:
                gate = torch.sigmoid(gate)
            out = out + gate * self.shared_expert(flat)
        return out.view(B, T, C)
