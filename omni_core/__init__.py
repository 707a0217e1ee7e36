"""omni_core: a compact PyTorch implementation of the Qwen3-Omni speech path.

thinker (MoE LLM) → talker (MoE, CB0 per 80 ms frame) → code predictor (CB1..CB15)
→ Code2Wav (16 codes per frame → 24 kHz audio). The contract (what a request
takes, the events it yields and their order, determinism, the parity oracle) is
docs/ENGINE.md in the repository.
"""

from omni_core.codes_io import check_codes, codes_to_json, load_codes
from omni_core.models.config import CheckpointError
from omni_core.engine.output import EngineError
from omni_core.events import AudioChunk, Done, Frame, Result, Stats, TextDelta
from omni_core.pipeline import Pipeline, load_pipeline
from omni_core.errors import EngineBusy, RequestError
from omni_core.request import MAX_FRAMES, MAX_TEXT_CHARS, SpeechRequest

__all__ = [
    "load_pipeline", "Pipeline", "SpeechRequest", "RequestError", "EngineBusy", "CheckpointError", "EngineError",
    "TextDelta", "Frame", "AudioChunk", "Done", "Result", "Stats",
    "load_codes", "check_codes", "codes_to_json", "MAX_FRAMES", "MAX_TEXT_CHARS",
]
