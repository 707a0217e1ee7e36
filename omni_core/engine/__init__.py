"""The batched engine: one scheduler per Pipeline advances every running request in one step.

scheduler.py  Engine: the thread, the loop, `step()`
sequence.py   Sequence: one request's state (caches, generators, reply, codec stream, events)
predictors.py Predictors: the code predictor's fast path (CUDA graph / compiled / eager), one call per step
parts.py      Parts: the read-only pieces a request needs from its pipeline
stream.py     Stream: a request's events, as the caller reads them
"""

from .parts import Parts
from .predictors import Predictors
from .scheduler import Engine
from .sequence import Sequence
from .stream import Stream

__all__ = ["Engine", "Parts", "Predictors", "Sequence", "Stream"]
