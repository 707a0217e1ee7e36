"""The official implementations' per-frame log-probabilities of a greedy take, captured while they generate it
(teacher-forced scoring of the official codes is the official generation itself): for tests/test_fidelity.py
(tiny widths) and the real-width tests (tests/test_real_width.py, tests/test_tts_real_width.py).

`processed_logprobs(logits0, logits, codes, pipe, penalty)`: the raw logits the official code computed (CB0
[T, V0], CB1..15 [T, 15, V]) → log-probabilities of the distributions our engine draws from in greedy mode (CB0
after the repetition penalty and the suppressed ids, HF's processors, as omni_core.models.sampling applies them);
`official_scores(...)`: the same, of the given codes only [T, 16], to compare with `Pipeline.score`."""

from __future__ import annotations

import numpy as np
import torch

from omni_core.models.sampling import repetition_penalty, suppress


def processed_logprobs(logits0: np.ndarray, logits: np.ndarray, codes: np.ndarray, pipe, penalty: float):
    """→ (CB0 log-probabilities [T, V0], CB1..15 log-probabilities [T, 15, V]), float64."""
    out0 = []
    for t in range(len(codes)):
        row = torch.from_numpy(logits0[t]).float()[None]
        history = torch.from_numpy(codes[:t, 0]).long()[None]
        row = suppress(repetition_penalty(row, history, penalty), pipe.model.cb0_mask(t))
        out0.append(row.double().log_softmax(-1)[0].numpy())
    return np.stack(out0), torch.from_numpy(logits).double().log_softmax(-1).numpy()


def capture_hf(hf, run):
    """Run `run()` (an HF generate) with the talker's codec head and the code predictor's heads watched → (its
    result, CB0 logits [calls, V0], CB1..15 logits [calls, 15, V]) of each call's last position, in order."""
    got0, got = [], [[] for _ in hf.talker.code_predictor.lm_head]
    hooks = [hf.talker.codec_head.register_forward_hook(lambda m, i, o: got0.append(o[0, -1].float().clone()))]
    for j, head in enumerate(hf.talker.code_predictor.lm_head):
        hooks.append(head.register_forward_hook(lambda m, i, o, j=j: got[j].append(o[0, -1].float().clone())))
    try:
        result = run()
    finally:
        for h in hooks:
            h.remove()
    n = min(len(g) for g in got)
    return result, torch.stack(got0).numpy(), torch.stack([torch.stack(g[:n]) for g in got], 1).numpy()


def given_logprobs(lp0: np.ndarray, lp: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Log-probabilities [T, V0], [T, 15, V] → those of the given codes [T, 16]."""
    first = lp0[np.arange(len(codes)), codes[:, 0]][:, None]
    return np.concatenate([first, np.take_along_axis(lp, codes[:, 1:, None], 2)[..., 0]], 1)


def assert_audio_close(ours: np.ndarray, official: np.ndarray, dtype: str) -> None:
    assert len(ours) == len(official)
    if dtype == "float32":
        np.testing.assert_allclose(ours, official, atol=1e-4, rtol=0)
    else:  # bfloat16's rounding through the codec's deep stack (tests/test_tts_talker.py): measured 0.04-0.05
        assert np.abs(ours - official).mean() < 0.1 * np.abs(official).mean()


def official_scores(logits0: np.ndarray, logits: np.ndarray, codes: np.ndarray, pipe, penalty: float) -> np.ndarray:
    """The official log-probability of each given code [T, 16] (float64), from the official raw logits."""
    return given_logprobs(*processed_logprobs(logits0[:len(codes)], logits[:len(codes)], codes, pipe, penalty), codes)
