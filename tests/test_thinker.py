"""The thinker against HF: prefill logits, and KV-cache greedy = HF full-recompute greedy (seed M08)."""

from __future__ import annotations

import torch


def prompt(pipe, text="The quick brown fox."):
    return torch.tensor([pipe.chat_prompt(text)])


def test_prefill_logits_match_hf(hf, pipe):
    ids = prompt(pipe)
    want = hf.thinker(input_ids=ids).logits
    got = pipe.thinker(ids)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def kv_greedy(pipe, ids, steps: int) -> list[int]:
    """Prefill, then one token at a time through `decode_rows` (the engine's batched step, batch 1)."""
    cache = pipe.thinker.model.new_cache(1, ids.shape[1] + steps, like=pipe.thinker.lm_head.weight)
    token = pipe.thinker(ids, cache)[:, -1].argmax(-1)
    got = [int(token)]
    for _ in range(steps - 1):
        token = pipe.thinker.decode_rows(token, [cache]).argmax(-1)
        got.append(int(token))
    return got


def test_kv_greedy_equals_hf_full_recompute(hf, pipe):
    ids = prompt(pipe)
    got = kv_greedy(pipe, ids, 12)
    seq, want = ids, []
    for _ in range(12):  # HF, recomputing the whole sequence every step (no cache)
        nxt = hf.thinker(input_ids=seq, use_cache=False).logits[:, -1].argmax(-1)
        want.append(int(nxt))
        seq = torch.cat([seq, nxt[:, None]], dim=1)
    assert got == want
    assert len(set(got)) > 1  # the test would notice a stuck decoder


def test_cache_positions_follow_cache_length(pipe):
    ids = prompt(pipe)
    cache = pipe.thinker.model.new_cache(1, 4, like=pipe.thinker.lm_head.weight)  # grows past 4
    full = pipe.thinker(torch.cat([ids, ids[:, :3]], dim=1))
    pipe.thinker(ids, cache)
    assert cache.length == ids.shape[1]
    step = pipe.thinker(ids[:, :3], cache)  # 3 new positions against the cache
    assert cache.length == ids.shape[1] + 3
    torch.testing.assert_close(step, full[:, -3:], atol=1e-4, rtol=1e-4)
