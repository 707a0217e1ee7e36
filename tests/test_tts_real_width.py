"""Qwen3-TTS 0.6B at its real widths (the talker cut to 2 of its 28 layers; the predictor, the codec
decoder and the text embedding whole), random weights written once in the hub layout: greedy codes
equal the official package's in float32 and in bfloat16, where the kernels decide the bits (the
engine's batch-invariant plans must not change a lone request's codes). Slow: ~1.3 GB checkpoint."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from omni_core import SpeechRequest, load_pipeline
from omni_core.synthetic.qwen3_tts import ensure_random_tts

from .tts_oracle import oracle, require_oracle

pytestmark = pytest.mark.slow

REQUEST = dict(text="Hello there, this is a sentence at the real widths.", speaker="vivian", language="english",
               text_input="whole", max_frames=6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_greedy_codes_equal_the_package_at_real_widths(dtype):
    require_oracle()
    folder = ensure_random_tts("qwen3-tts-0.6b", 2)
    want = oracle("run", folder, [REQUEST], dtype=dtype)["codes_0"]
    threads = torch.get_num_threads()  # the package runs with torch's default: all cores; bfloat16 kernels
    pipe = load_pipeline(str(folder), device="cpu", dtype=dtype, threads=os.cpu_count(), exact=True)  # split work by threads
    try:
        got = pipe.generate(SpeechRequest(REQUEST["text"], speaker="vivian", language="english", text_input="whole",
                                          predictor="kv", max_frames=REQUEST["max_frames"])).codes
    finally:
        pipe.close()
        torch.set_num_threads(threads)
    np.testing.assert_array_equal(got, want)
