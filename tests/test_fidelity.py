"""The default (batch-invariant, fastest-kernels) mode against the official implementations, teacher-forced,
as HF tests its own ports: given the official greedy take, our per-frame log-probability of every code of
every codebook (`Pipeline.score`) equals the official one (the distribution the official code computed while
generating that take: tests/fidelity.py) within a measured tolerance; our decode of the same codes is allclose
to the official audio. Tiny widths, both families, float32 and bfloat16 (the real widths: tests/test_real_width.py,
tests/test_tts_real_width.py).

Measured on the AMD EPYC (family 25, 1 thread), worst |Δ log p| over every cell:
  Qwen3-Omni tiny / tiny-b (HF transformers)  float32 3.4e-6 / 2.1e-6    bfloat16 0.031 / 0.016
  Qwen3-TTS custom_voice (qwen-tts package)   float32 2.6e-6            bfloat16 0.016
Exact mode measures the same at float32's floor (1.9-3.0e-6: the official side is a float64 log-softmax of its
float32 logits, ours the log of a float32 softmax) and the same in bfloat16 (0.031, 0.016): at tiny widths the
default mode's kernels cost nothing measurable; bfloat16's figure is its rounding of the logits and of our
repetition penalty. Tolerances: float32 2e-5, bfloat16 0.1.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from omni_core import SpeechRequest

from .conftest import our_pipeline
from .fidelity import assert_audio_close, capture_hf, given_logprobs, processed_logprobs
from .tts_oracle import SCORES, oracle, our_tts

TOLERANCE = {"float32": 2e-5, "bfloat16": 0.1}  # |Δ log p| per cell, about 6x the worst measured


@functools.lru_cache(maxsize=None)
def hf_in(preset: str, dtype: str):
    from transformers import Qwen3OmniMoeForConditionalGeneration

    from omni_core.synthetic.tiny import ensure_tiny

    torch.manual_seed(0)
    return Qwen3OmniMoeForConditionalGeneration.from_pretrained(ensure_tiny(preset), dtype=getattr(torch, dtype)).eval()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("preset", ["tiny", "tiny-b"])
def test_qwen3_omni_default_mode_scores_the_official_take_as_hf_does(preset, dtype):
    from .test_pipeline import hf_generate

    hf, pipe = hf_in(preset, dtype), our_pipeline(preset, dtype)
    assert pipe.info["exact"] is False
    text, text_tokens, frames = "Hello there, how are you?", 12, 16
    (codes, wav, sequence), logits0, logits = capture_hf(hf, lambda: hf_generate(hf, pipe, text, text_tokens, frames))
    lp0, lp = processed_logprobs(logits0[:frames], logits[:frames], codes, pipe, 1.05)
    score = pipe.score(codes, SpeechRequest(text, mode="chat", max_text_tokens=text_tokens, max_frames=frames))
    assert score.text_ids == sequence[len(score.prompt_ids):-1]  # the same reply is spoken
    diff = np.abs(score.logprobs - given_logprobs(lp0, lp, codes))
    assert diff.max() < TOLERANCE[dtype], diff.max()
    assert_audio_close(pipe.decode(codes), wav, dtype)


TTS_REQUESTS = [
    dict(text="Hello world, this is a test.", speaker="Vivian", language="English", max_frames=8),
    dict(text="HelloWorld speech", speaker="dylan", language="Auto", text_input="streaming", max_frames=6),
    dict(text="Good morning", speaker="ryan", language="chinese", instruct="Speak slowly.", max_frames=5),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_qwen3_tts_default_mode_scores_the_official_take_as_the_package_does(dtype):
    want = oracle("run", "custom_voice", TTS_REQUESTS, dtype=dtype, script=SCORES)
    pipe = our_tts("custom_voice", dtype, exact=False)
    for i, req in enumerate(TTS_REQUESTS):
        codes = want[f"codes_{i}"]
        lp0, lp = processed_logprobs(want[f"logits0_{i}"], want[f"logits_{i}"], codes, pipe,
                                     pipe.config.generation["repetition_penalty"])
        score = pipe.score(codes, SpeechRequest(**req))
        diff = np.abs(score.logprobs - given_logprobs(lp0, lp, codes))
        assert diff.max() < TOLERANCE[dtype], (i, diff.max())
        assert_audio_close(pipe.decode(codes), want[f"audio_{i}"], dtype)
