"""`PipelineConfig` (omni_core/pipeline_config.py): load_pipeline's options, checked once, before
anything loads, with the words the engine's own checks use; the options in force and their summary."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from omni_core import load_pipeline
from omni_core.pipeline_config import PipelineConfig


def test_load_pipeline_takes_every_field_with_the_same_default():
    params = inspect.signature(load_pipeline).parameters
    fields = {f.name: f.default for f in dataclasses.fields(PipelineConfig) if f.init}
    assert {name: p.default for name, p in params.items() if name != "source"} == fields
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for name, p in params.items() if name != "source")


@pytest.mark.parametrize("options, words", [
    (dict(max_batch=0), "max_batch must be a whole number of at least 1, got 0"),
    (dict(max_waiting=-1), "max_waiting must be a whole number of at least 0, got -1"),
    (dict(max_unread=True), "max_unread must be a whole number of at least 1, got True"),
    (dict(time_budget_s="soon"), "time_budget_s must be a positive number of seconds, got 'soon'"),
    (dict(stall_s=float("inf")), "stall_s must be a positive number of seconds, got inf"),
    (dict(codec_threads=0), r"codec_threads must be a positive number of CPU threads \(got 0\)"),
    (dict(codec_processes=0), r"codec_processes must be a positive number of processes \(got 0\)"),
    (dict(quantize="int2"), r"quantize must be None or one of int8, int4, mixed \(got 'int2'\)"),
    (dict(quantize="int8", exact=True), "exact=True gives the official implementation's bits, which int8 weights "
                                        "cannot: choose one of the two"),
    (dict(max_batch=0, codec_threads=0), "max_batch"),  # the engine's options are checked first
])
def test_a_bad_option_fails_with_words_that_say_what_to_change(options, words):
    with pytest.raises(ValueError, match=words):
        PipelineConfig(**options)


def test_the_options_in_force():
    assert PipelineConfig().num_threads == torch.get_num_threads() and PipelineConfig(threads=0).num_threads == 1
    exact = PipelineConfig(exact=1, max_batch=8)
    assert (exact.max_batch, exact.batch_invariant, exact.exact) == (1, False, True)
    assert PipelineConfig(batch_invariant=False).batch_invariant is False
    assert PipelineConfig(codec_processes=2).codec_threads == 1 and PipelineConfig(codec_processes="2").codec_processes == 2
    assert PipelineConfig(codec_processes=2, codec_threads=3).codec_threads == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        PipelineConfig().max_batch = 4


def test_the_summary_names_only_what_is_not_the_default():
    assert PipelineConfig(device="cpu", dtype="bfloat16", threads=None).summary() == ""
    assert PipelineConfig(max_batch=4, compile=True).summary() == "compile=True, max_batch=4"
    assert PipelineConfig(exact=True).summary() == "max_batch=1, batch_invariant=False, exact=True"
