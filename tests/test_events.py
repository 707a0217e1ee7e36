"""The events and the Result (omni_core/events.py): what a stream yields, their defaults, and
Stats.to_dict (what the app and the API send)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from omni_core import AudioChunk, Done, Frame, Result, Stats, TextDelta


def test_stats_defaults_and_to_dict():
    s = Stats()
    assert (s.frames, s.rtf, s.first_audio_s, s.stopped, s.predictor, s.device, s.dtype) == \
        (0, None, None, "max_frames", "reprefill", "cpu", "float32")
    d = Stats(frames=3, warnings=["w"]).to_dict()
    assert d["frames"] == 3 and d["warnings"] == ["w"] and set(d) == {f.name for f in dataclasses.fields(Stats)}
    json.dumps(d)  # the API sends it as JSON
    d["warnings"].append("x")
    assert Stats(warnings=["w"]).warnings == ["w"] and Stats().warnings is not Stats().warnings  # no shared list


def test_result_fields_and_defaults():
    r = Result(np.zeros((2, 16), np.int64), np.zeros(10, np.float32), "hi", [1, 2], [3], Stats())
    assert r.sample_rate == 24000 and r.probs is None and r.top_codes is None and r.top_probs is None
    assert [f.name for f in dataclasses.fields(Result)][:6] == ["codes", "audio", "text", "prompt_ids", "text_ids",
                                                                 "stats"]
    assert Done(r).result is r


def test_frame_and_other_events():
    f = Frame(2, np.zeros(16, np.int64), np.ones(16, np.float32), 1.5, 2.5)
    assert f.batch == 1 and f.mismatch is None and f.other_codes is None and f.top_codes is None
    assert AudioChunk(np.zeros(3), 24000, 4).first_frame == 4
    assert TextDelta("hi", [104, 105]).token_ids == [104, 105]
