"""`Stream` (omni_core/engine/stream.py): submits its request on the first next(), yields events
until Done (keeping the Result), raises a failed request's error, and stops the request on close."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from omni_core import Done, Result, SpeechRequest, Stats, TextDelta
from omni_core.engine.output import Failed
from omni_core.engine.sequence import Sequence
from omni_core.engine.stream import Stream


class FakeEngine:
    def __init__(self):
        self.submitted = []

    def submit(self, *seqs):
        self.submitted.extend(seqs)


def make() -> tuple[FakeEngine, Sequence, Stream]:
    engine = FakeEngine()
    seq = Sequence(SpeechRequest("hi"), [], torch.device("cpu"), torch.float32)
    return engine, seq, Stream(engine, seq)


def result() -> Result:
    return Result(np.zeros((0, 16), np.int64), np.zeros(0, np.float32), "hi", [], [], Stats(stopped="eos"))


def test_submits_once_on_first_next_and_ends_after_done():
    engine, seq, stream = make()
    delta, done = TextDelta("hi", [1]), Done(result())
    seq.emit(delta), seq.emit(done)
    assert engine.submitted == [] and stream.result is None
    assert list(stream) == [delta, done]
    assert engine.submitted == [seq] and stream.ended and stream.result is done.result
    with pytest.raises(StopIteration):
        next(stream)


def test_a_failed_request_raises_its_error_and_ends():
    _, seq, stream = make()
    seq.emit(Failed(KeyError("nobody")))
    with pytest.raises(KeyError, match="nobody"):
        next(stream)
    assert stream.ended and list(stream) == []


def test_marked_submitted_is_not_submitted_again():
    engine, seq, stream = make()
    stream.mark_submitted()
    seq.emit(Done(result()))
    next(stream)
    assert engine.submitted == []


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
    _, unsubmitted, stream = make()
    del stream
    assert not unsubmitted.cancel.is_set()  # never handed to the engine: nothing to stop
