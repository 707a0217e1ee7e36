"""Top-5 alternatives per code (Frame.top_codes / top_probs, Result.top_codes / top_probs):
the processed distribution that chose each code, held to HF's scores at the same step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omni_core import Frame, SpeechRequest
from omni_core.models.code_predictor import PREDICTOR_SAMPLING, predict_kv, predict_reprefill
from omni_core.models.sampling import SamplingConfig, choose, choose_with_alternatives

from .test_code_predictor import inputs
from .test_talker import ForceTokens


def hf_top5(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """HF's processed scores [B, V] → (ids, probs) [B, 5] of softmax(scores)."""
    probs, ids = scores.float().softmax(-1).topk(5, dim=-1)
    return ids, probs


def test_choose_with_alternatives_keeps_chooses_answer():
    logits = torch.randn(4, 300, generator=torch.Generator().manual_seed(0))
    for cfg in (SamplingConfig(), SamplingConfig(do_sample=True, temperature=0.7, top_k=20, top_p=0.9)):
        noise = torch.empty(4, 300).exponential_(generator=torch.Generator().manual_seed(1))
        ids, prob = choose(logits, cfg, noise=noise)
        ids2, prob2, top, top_probs = choose_with_alternatives(logits, cfg, noise=noise)
        assert torch.equal(ids, ids2) and torch.equal(prob, prob2)
        assert top.shape == top_probs.shape == (4, 5) and top.dtype == torch.int64
        assert (top_probs[:, :-1] >= top_probs[:, 1:]).all()  # most probable first
        if not cfg.do_sample:
            assert torch.equal(top[:, 0], ids) and torch.equal(top_probs[:, 0], prob)
        else:  # the warped distribution (temperature, top-k, top-p), not the raw softmax
            assert (top_probs > (logits / 0.7).softmax(-1).topk(5).values).all()


@pytest.mark.parametrize("top_p_of_top_k", [False, True])
def test_mixed_rows_get_what_they_get_alone(top_p_of_top_k):
    """Greedy and sampled rows in one call (eager, the sampled rows warped on their own): every output of a row
    equals its own call's, bit for bit."""
    cfg = SamplingConfig(do_sample=True, temperature=0.9, top_k=50, top_p=0.8, top_p_of_top_k=top_p_of_top_k)
    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(2))
    noise = torch.empty(5, 300).exponential_(generator=torch.Generator().manual_seed(3))
    greedy_rows = torch.tensor([True, False, True, False, False])
    mixed = choose_with_alternatives(logits, cfg, noise=noise, greedy_rows=greedy_rows)
    for b, greedy in enumerate(greedy_rows.tolist()):
        alone = choose_with_alternatives(logits[b:b + 1], SamplingConfig() if greedy else cfg,
                                         noise=None if greedy else noise[b:b + 1])
        for m, a in zip(mixed, alone):
            assert torch.equal(m[b:b + 1], a)


def test_predictor_alternatives_equal_hf_scores(hf, pipe):
    cp = pipe.talker.code_predictor
    h, e0 = inputs(pipe)
    want = hf.talker.code_predictor.generate(inputs_embeds=torch.stack([h, e0], 1), max_new_tokens=15,
                                             do_sample=False, output_scores=True, return_dict_in_generate=True)
    for predict in (predict_reprefill, predict_kv):
        codes, probs, _, top, top_probs = predict(cp, h, e0, alternatives=5)
        assert top.shape == top_probs.shape == (3, 15, 5)
        for j, scores in enumerate(want.scores):
            ids, p = hf_top5(scores)
            torch.testing.assert_close(top[:, j], ids, rtol=0, atol=0)
            torch.testing.assert_close(top_probs[:, j], p, rtol=1e-5, atol=1e-7)
        assert torch.equal(top[..., 0], codes) and torch.equal(top_probs[..., 0], probs)
        assert torch.equal(predict(cp, h, e0)[0], codes)  # asking for alternatives changes nothing


def hf_scores(hf, pipe, text: str, frames: int):
    """HF's whole-model generate (speak: its thinker forced to write `text`), greedy: the talker's
    processed scores per frame [V] and each frame's 15 predictor scores [15, V]."""
    prompt = pipe.chat_prompt(text)
    reply = pipe.tokenizer(text, add_special_tokens=False)["input_ids"] + [pipe.config.token_ids["im_end"]]
    talker, predictor, seen = hf.talker.generate, hf.talker.code_predictor.generate, {"cp": []}

    def talker_generate(**kw):
        seen["talker"] = out = talker(**kw, output_scores=True)
        return out

    def predictor_generate(**kw):
        out = predictor(**kw, output_scores=True)
        seen["cp"].append(torch.stack(out.scores, 1)[0])  # [15, V]
        return out

    hf.talker.generate, hf.talker.code_predictor.generate = talker_generate, predictor_generate
    try:
        hf.generate(input_ids=torch.tensor([prompt]), speaker="ethan", thinker_do_sample=False,
                    thinker_max_new_tokens=len(reply), thinker_eos_token_id=reply[-1],
                    thinker_logits_processor=[ForceTokens(len(prompt), reply)],
                    talker_max_new_tokens=frames + 1, talker_do_sample=False)
    finally:
        hf.talker.generate, hf.talker.code_predictor.generate = talker, predictor
    return [s[0] for s in seen["talker"].scores], seen["cp"]


@pytest.mark.parametrize("predictor", ["reprefill", "kv"])
def test_frame_alternatives_equal_hf_at_every_step(hf, pipe, predictor):
    text, T = "Say exactly this.", 6
    talker_scores, cp_scores = hf_scores(hf, pipe, text, T)
    frames = [e for e in pipe.stream(SpeechRequest(text, predictor=predictor, max_frames=T)) if isinstance(e, Frame)]
    assert len(frames) == T
    for t, frame in enumerate(frames):
        assert frame.top_codes.shape == (16, 5) and frame.top_codes.dtype == np.int64
        assert frame.top_probs.shape == (16, 5) and frame.top_probs.dtype == np.float32
        ids, p = hf_top5(talker_scores[t][None])  # CB0: after repetition penalty and suppression
        np.testing.assert_array_equal(frame.top_codes[0], ids[0].numpy())
        np.testing.assert_allclose(frame.top_probs[0], p[0].numpy(), rtol=1e-5, atol=1e-7)
        ids, p = hf_top5(cp_scores[t])  # CB1..CB15
        np.testing.assert_array_equal(frame.top_codes[1:], ids.numpy())
        np.testing.assert_allclose(frame.top_probs[1:], p.numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(frame.top_codes[:, 0], frame.codes)  # greedy: the chosen code is first
        np.testing.assert_array_equal(frame.top_probs[:, 0], frame.probs)


def test_result_carries_alternatives_sampled_and_compare():
    from .conftest import our_pipeline

    pipe = our_pipeline("tiny")
    for req in (SpeechRequest("Sampled.", do_sample=True, seed=4, top_k=30, max_frames=5),
                SpeechRequest("Compare.", predictor="compare", max_frames=5)):
        result = pipe.generate(req)
        assert result.top_codes.shape == result.top_probs.shape == (5, 16, 5)
        top, top_probs, codes, probs = result.top_codes, result.top_probs, result.codes, result.probs
        assert ((top >= 0) & (top < 2048)).all() and (top_probs[..., :-1] >= top_probs[..., 1:]).all()
        listed = top == codes[..., None]
        # The chosen code's recorded probability is its listed one, or (sampled) at most the fifth's.
        np.testing.assert_array_equal(np.where(listed, top_probs, 0).sum(-1)[listed.any(-1)],
                                      probs[listed.any(-1)])
        assert (probs[~listed.any(-1)] <= top_probs[..., -1][~listed.any(-1)]).all()
        if not req.do_sample:
            assert listed[..., 0].all()
    assert result.top_codes.shape[0] == len(pipe.generate(SpeechRequest("x", max_frames=5)).codes)
