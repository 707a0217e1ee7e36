"""Code predictor (seed M05): re-prefill == HF `code_predictor.generate(do_sample=False)` == KV."""

from __future__ import annotations

import pytest
import torch

from omni_core.models.code_predictor import GREEDY, PREDICTOR_SAMPLING, predict_kv, predict_reprefill


def inputs(pipe, batch=3, seed=0):
    C = pipe.config.predictor.hidden_size
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, C, generator=g)  # stands in for the talker's last hidden state
    cb0 = torch.randint(0, 2048, (batch,), generator=g)
    return h, pipe.talker.model.codec_embedding(cb0)


def test_reprefill_equals_hf_generate_equals_kv(hf, pipe):
    cp = pipe.talker.code_predictor
    h, e0 = inputs(pipe)
    want = hf.talker.code_predictor.generate(inputs_embeds=torch.stack([h, e0], 1), max_new_tokens=15,
                                             do_sample=False)
    codes, probs, embeds = predict_reprefill(cp, h, e0)
    kv_codes, kv_probs, kv_embeds = predict_kv(cp, h, e0)
    assert codes.shape == (3, 15)
    torch.testing.assert_close(codes, want)
    torch.testing.assert_close(kv_codes, codes, rtol=0, atol=0)
    torch.testing.assert_close(kv_probs, probs)
    torch.testing.assert_close(kv_embeds, embeds)
    assert len(set(codes[0].tolist())) > 5  # not one code repeated


def test_each_step_uses_its_own_head_and_table(pipe):
    cp = pipe.talker.code_predictor
    h, e0 = inputs(pipe)
    codes, _, embeds = predict_reprefill(cp, h, e0)
    for j in range(15):
        torch.testing.assert_close(embeds[:, j], cp.model.codec_embedding[j](codes[:, j]))


def test_kv_cache_grows_by_one_per_step(pipe):
    lengths = []
    predict_kv(pipe.talker.code_predictor, *inputs(pipe), on_step=lambda cache: lengths.append(cache.length))
    assert lengths == list(range(2, 17))


@pytest.mark.parametrize("threads", [1, 2])
def test_row_alone_equals_row_in_batch(preset, threads):
    """Every output of every row, floats included, bit for bit; on 2 threads too (ATen's attention splits a
    query's keys across them by the call's batch: the predictor's attention runs on one thread). The default
    mode's pipeline: batch invariance is its promise (exact mode runs one request at a time on plain kernels)."""
    from .conftest import our_pipeline

    pipe = our_pipeline(preset)
    cp = pipe.talker.code_predictor
    h, e0 = inputs(pipe, batch=4)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for predict in (predict_reprefill, predict_kv):
            batch = predict(cp, h, e0, alternatives=5)  # codes, probs, embeds, top codes, top probs
            for row in range(4):
                alone = predict(cp, h[row:row + 1], e0[row:row + 1], alternatives=5)
                for got, want in zip(alone, batch):
                    torch.testing.assert_close(got[0], want[row], rtol=0, atol=0)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("T,L,given", [(1, 12, False), (2, 2, False), (3, 7, False), (2, 5, True)])
def test_attention_in_loops_is_the_attention(T, L, given):
    """What a compiled predictor frame runs on a CPU (its own loops instead of ATen's kernel): the same
    attention within float32 rounding, grouped heads, causal new positions and a given mask included."""
    from torch.nn.functional import scaled_dot_product_attention

    from omni_core.models.layers import attention_in_loops, causal_mask

    g = torch.Generator().manual_seed(T * 100 + L)
    q = torch.randn(3, 4, T, 16, generator=g)
    k, v = torch.randn(3, 2, L, 16, generator=g), torch.randn(3, 2, L, 16, generator=g)
    mask = causal_mask(T, L, "cpu") if T > 1 else None  # new positions after a past, as `Attention.attend` has it
    if given:
        mask = torch.rand(T, L, generator=g) > 0.3
        mask[:, 0] = True  # every query sees a key
    causal = mask is not None and L == T and not given  # ATen's own causal flag where it applies
    want = scaled_dot_product_attention(q, k, v, attn_mask=None if causal else mask, is_causal=causal, scale=0.25,
                                        enable_gqa=True)
    torch.testing.assert_close(attention_in_loops(q, k, v, mask, 0.25), want)


def test_inputs_are_not_modified(pipe):
    h, e0 = inputs(pipe)
    h0, e00 = h.clone(), e0.clone()
    predict_kv(pipe.talker.code_predictor, h, e0)
    predict_reprefill(pipe.talker.code_predictor, h, e0)
    assert torch.equal(h, h0) and torch.equal(e0, e00)


def test_sampling_is_seeded_and_both_predictors_agree(pipe):
    cp = pipe.talker.code_predictor
    h, e0 = inputs(pipe)

    def run(predict, seed):
        return predict(cp, h, e0, PREDICTOR_SAMPLING, torch.Generator().manual_seed(seed))[0]

    a = run(predict_reprefill, 7)
    torch.testing.assert_close(a, run(predict_reprefill, 7), rtol=0, atol=0)
    torch.testing.assert_close(a, run(predict_kv, 7), rtol=0, atol=0)  # same noise, same logits
    assert not torch.equal(a, run(predict_reprefill, 8))
    greedy = predict_reprefill(cp, h, e0)[0]
    assert not torch.equal(a, greedy)


def _projected(dtype: str):
    """A predictor narrower than its talker (as Qwen3-TTS 1.7B's): its inputs go through small_to_mtp_projection."""
    from omni_core.models.code_predictor import CodePredictor

    from .conftest import our_pipeline

    cfg = our_pipeline("tiny").config.predictor
    torch.manual_seed(0)
    return CodePredictor(cfg, 16, embedding_dim=cfg.hidden_size + 32).to(getattr(torch, dtype)).eval()


@pytest.mark.parametrize("model,dtype,threads", [("tiny", "float32", 1), ("tiny", "float32", 2),
                                                 ("tiny-tts", "bfloat16", 2), ("projected", "float32", 1),
                                                 ("projected", "bfloat16", 1)])
@pytest.mark.parametrize("sampled", [(), (1, 3, 4), tuple(range(7))])
def test_both_kinds_in_one_pass_give_each_row_its_own_kinds_floats(model, dtype, threads, sampled):
    """`predict_both` against each kind's own batched call (KV rows with predict_kv, the others with
    predict_reprefill, each with its rows' noise): every output of every row bit for bit, greedy and sampled rows
    mixed, all greedy and all sampled."""
    from omni_core.models.code_predictor import predict_both

    from .conftest import our_pipeline

    cp = _projected(dtype) if model == "projected" else our_pipeline(model, dtype).talker.code_predictor
    C, V, B = cp.embedding_dim, cp.lm_head[0].out_features, 7
    g = torch.Generator().manual_seed(3)
    h, e0 = torch.randn(B, C, generator=g).to(getattr(torch, dtype)), torch.randn(B, C, generator=g).to(getattr(torch, dtype))
    kv = torch.tensor([True, False, False, True, True, False, True])
    greedy = torch.tensor([b not in sampled for b in range(B)])
    noise = torch.cat([cp.frame_noise(1, cp.sampling, torch.Generator().manual_seed(b), "cpu") if b in sampled
                       else torch.ones(15, 1, V) for b in range(B)], dim=1)
    sampling, greedy_rows = (cp.sampling, greedy if not greedy.all() and greedy.any() else None) if sampled \
        else (GREEDY, None)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        both = predict_both(cp, kv, h, e0, sampling, noise if sampled else None, greedy_rows, alternatives=5)
        for rows, predict in ((kv, predict_kv), (~kv, predict_reprefill)):
            some = rows & ~greedy
            want = predict(cp, h[rows], e0[rows], sampling if some.any() else GREEDY,
                           noise=noise[:, rows] if some.any() else None,
                           greedy_rows=greedy[rows] if some.any() and not some[rows].all() else None, alternatives=5)
            for got, expected in zip(both, want):
                torch.testing.assert_close(got[rows], expected, rtol=0, atol=0)
    finally:
        torch.set_num_threads(before)
    assert len(set(both[0][:, 0].tolist())) > 1  # the rows differ
