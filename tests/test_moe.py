"""moe.py: the two ways of summing the routed experts give the same floats, and decoding the GPU's way
(`Experts.rows`) never reads the routed ids on the host, in the thinker's and the talker's decode step."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from omni_core.models import moe
from omni_core.models.moe import row_sigmoid
from omni_core.models.config import DecoderConfig
from tests.conftest import our_pipeline

# Ops whose result the host must read (on a GPU each one waits for the queue to drain): a tensor's value
# as a Python number, and ops whose output shape depends on the values.
HOST_READ_OPS = {"_local_scalar_dense", "nonzero", "_unique2", "unique_dim", "unique_consecutive", "masked_select",
                 "equal", "is_nonzero"}


class HostReads(TorchDispatchMode):
    """Records every host read of tensor values while active: the ops above, and `Tensor.tolist` (which a
    CPU tensor serves without dispatching, so it is wrapped)."""

    def __init__(self, monkeypatch):
        super().__init__()
        self.seen: list[str] = []
        self.active = False
        tolist = torch.Tensor.tolist

        def recorded(t):
            if self.active:
                self.seen.append("tolist")
            return tolist(t)

        monkeypatch.setattr(torch.Tensor, "tolist", recorded)

    def __enter__(self):
        self.active = True
        return super().__enter__()

    def __exit__(self, *exc):
        self.active = False
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in HOST_READ_OPS:
            self.seen.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def moe_layers(pipe) -> list[moe.SparseMoe]:
    return [layer.mlp for stack in (pipe.thinker.model, pipe.talker.model) for layer in stack.layers
            if isinstance(layer.mlp, moe.SparseMoe)]


def top_4_of_8() -> moe.SparseMoe:
    """A layer that routes a token to 4 of 8 experts: with 3 or more, the order of a token's sum shows in
    its floats (the presets route to 1 or 2, and a + b == b + a)."""
    cfg = DecoderConfig.from_hf(dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_experts=8,
                                     num_experts_per_tok=4, moe_intermediate_size=16, norm_topk_prob=True))
    torch.manual_seed(1)
    layer = moe.SparseMoe(cfg)
    for p in layer.parameters():
        p.data.normal_(0, 0.3)
    return layer


@pytest.mark.parametrize("rows", [1, 3, 8, 16])
@pytest.mark.parametrize("where", ["tiny", "tiny-b", "top-4 of 8"])
def test_rows_give_the_floats_forward_gives_and_each_row_its_own(where, rows):
    """tiny: top-2 of 8 experts; tiny-b: top-1 routing, and top-2 of 4 in the talker; top-4 of 8: where the
    order of a token's sum shows."""
    torch.manual_seed(rows)
    for layer in [top_4_of_8()] if where == "top-4 of 8" else moe_layers(our_pipeline(where)):
        x = torch.randn(rows, layer.gate.weight.shape[1])
        weights, ids = layer.gate(x)
        with torch.no_grad():
            want = layer.experts(x, weights, ids)
            got = layer.experts.rows(x, weights, ids)
            alone = torch.cat([layer.experts.rows(x[b:b + 1], weights[b:b + 1], ids[b:b + 1]) for b in range(rows)])
        assert torch.equal(got, want) and torch.equal(alone, want)


def decode_step(stack, rows: int, dtype=torch.float32) -> tuple[torch.Tensor, list]:
    """(h [rows, 1, C], caches): `rows` requests whose prompts have other lengths, each prefilled alone."""
    torch.manual_seed(0)
    C, caches = stack.cfg.hidden_size, []
    for b in range(rows):
        cache = stack.new_cache(1, 32, like=stack.norm.weight)
        stack(torch.randn(1, 3 + 2 * b, C, dtype=dtype), cache, 0)
        caches.append(cache)
    return torch.randn(rows, 1, C, dtype=dtype), caches


@pytest.mark.parametrize("part", ["thinker", "talker"])
def test_the_decode_step_the_gpu_way_reads_nothing_on_the_host(preset, part, monkeypatch):
    """#21: no host sync in the decode step. On a CPU the step reads the routed ids (free there); taken the
    GPU's way (HOST_READS_ON without the CPU), the whole one-token step of 4 requests reads nothing on the
    host, and gives the same floats."""
    stack = getattr(our_pipeline(preset), part).model
    with torch.no_grad():
        h, caches = decode_step(stack, 4)
        with HostReads(monkeypatch) as reads:
            want = stack.decode_rows(h, caches)
        assert reads.seen  # the CPU's way reads the ids: the counter sees host reads
        h, caches = decode_step(stack, 4)
        monkeypatch.setattr(moe, "HOST_READS_ON", ())
        with HostReads(monkeypatch) as reads:
            got = stack.decode_rows(h, caches)
    assert reads.seen == []
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_shared_gates_sigmoid_gives_a_row_its_lone_bits_in_any_call(dtype):
    """row_sigmoid: a row's gate alone and in a call of 2..80 rows, at any place. (torch.sigmoid over the same
    [N, 1] gates fails it from 64 rows on an AVX2 Zen 3: vector code for some rows, scalar for others.)"""
    gate = (torch.randn(83, 1, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    alone = torch.cat([row_sigmoid(gate[r:r + 1]) for r in range(83)])
    for rows in range(2, 81):
        for at in (0, 3):
            assert torch.equal(row_sigmoid(gate[at:at + rows]), alone[at:at + rows]), (rows, at)
