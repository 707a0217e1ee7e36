"""The batched engine: one thread per Pipeline advances every running request in one step.

loop.py          Engine: the thread, the loop, `step()`, time charged per stage
scheduler.py     Scheduler: waiting and running requests; admit, stop, remove
runner.py        Runner: the only place that calls the models (prefills, batched steps)
sequence.py      Sequence: one request's state (caches, generators, reply, codec stream, events)
output.py        Frame events, audio chunks and the Result, from a Sequence's state
speech_model.py  SpeechModel: the read-only pieces a request needs from its pipeline
stream.py        Stream: a request's events, as the caller reads them (TextStream: and its text, still being written)
text_feed.py     TextFeed: text a caller sends while its request runs
codec_stream.py  one codec-stream interface: decoded in the engine's thread or in codec processes
"""

from omni_core.engine.loop import Engine
from omni_core.engine.sequence import Sequence
from omni_core.engine.speech_model import SpeechModel
from omni_core.engine.stream import Stream

__all__ = ["Engine", "Sequence", "SpeechModel", "Stream"]
