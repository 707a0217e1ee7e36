"""Compiled decoding on the second preset's shapes, in a file of its own so that the suite's two workers share
the compiling (pytest-xdist gives each file to one worker; conftest's SLOW_FIRST)."""

from __future__ import annotations

import numpy as np

from tests.conftest import our_pipeline
from tests.test_compiled import compiled_pipeline, request


def test_compiled_second_preset():
    """Other shapes: top-1 routing, a dense first thinker layer, one KV head in the talker."""
    req = request("kv")
    got, want = compiled_pipeline("tiny-b").generate(req), our_pipeline("tiny-b").generate(req)
    np.testing.assert_array_equal(got.codes, want.codes)
