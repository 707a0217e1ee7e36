"""`Stream` (omni_core/engine/stream.py): reads the events of a request already handed to the engine
until Done (keeping the Result), counts the frames read (a reader far behind is paused), raises a
failed request's error, never waits on a dead engine, and stops the request on close or drop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omni_core import Done, Frame, Result, SpeechRequest, Stats, TextDelta
from omni_core.engine.output import EngineError, Failed
from omni_core.engine.sequence import Sequence
from omni_core.engine.stream import Stream


class FakeEngine:
    def __init__(self):
        self.error = None

    def check_alive(self):
        if self.error is not None:
            raise self.error


def make() -> tuple[FakeEngine, Sequence, Stream]:
    engine = FakeEngine()
    seq = Sequence(SpeechRequest("hi"), [], torch.device("cpu"), torch.float32)
    return engine, seq, Stream(engine, seq)


def result() -> Result:
    return Result(np.zeros((0, 16), np.int64), np.zeros(0, np.float32), "hi", [], [], Stats(stopped="eos"))


def test_reads_until_done_counting_frames_and_keeps_the_result():
    _, seq, stream = make()
    delta, frame, done = TextDelta("hi", [1]), Frame(0, np.zeros(16, np.int64), np.ones(16, np.float32), 1.0, 2.0), Done(result())
    for event in (delta, frame, done):
        seq.emit(event)
    assert stream.result is None
    assert list(stream) == [delta, frame, done]
    assert seq.frames_read == 1 and stream.ended and stream.result is done.result
    with pytest.raises(StopIteration):
        next(stream)


def test_a_failed_request_raises_its_error_and_ends():
    _, seq, stream = make()
    seq.emit(Failed(KeyError("nobody")))
    with pytest.raises(KeyError, match="nobody"):
        next(stream)
    assert stream.ended and list(stream) == []


def test_a_dead_engine_ends_the_wait_with_its_error_after_what_it_sent():
    engine, seq, stream = make()
    seq.emit(TextDelta("hi", [1]))
    engine.error = EngineError("the engine thread died")
    assert isinstance(next(stream), TextDelta)  # what it put there before it went down
    with pytest.raises(EngineError, match="died"):
        next(stream)
    assert stream.ended


def test_what_the_engine_made_and_why_it_stopped():
    _, seq, stream = make()
    seq.codes = [0, 1, 2]
    assert stream.frames_made == 3 and not stream.released and stream.stopped is None
    seq.stats.stopped = "cancelled"
    seq.release()
    assert stream.released and stream.stopped == "cancelled"


def test_close_and_the_context_manager_cancel_the_request():
    _, seq, stream = make()
    with stream:
        assert not seq.cancel.is_set()
    assert seq.cancel.is_set() and stream.ended


def test_dropping_a_submitted_unfinished_stream_cancels_it():
    _, seq, stream = make()
    seq.emit(TextDelta("hi", [1]))
    next(stream)
    del stream  # no reference cycle: CPython runs __del__ here
    assert seq.cancel.is_set()
    _, finished, stream = make()
    finished.release()
    del stream
    assert not finished.cancel.is_set()  # already released by the engine: nothing to stop
