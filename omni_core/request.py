"""What a caller asks for: `SpeechRequest`, checked once into a clean request.

Every bad value gets a `RequestError` whose message says what to change; values
that are merely too large are clamped, with a warning the caller can show.
"""

from __future__ import annotations

import dataclasses
import math
import unicodedata
from dataclasses import dataclass

MODES = ("speak", "chat")
PREDICTORS = ("reprefill", "kv", "compare")
MAX_TEXT_CHARS = 2000  # longer text is truncated, with a warning
MAX_FRAMES = 1500  # 120 s of audio at 12.5 frames/s: the per-request budget
MAX_TEXT_TOKENS = 512
MAX_SEED = 2**63 - 1


class RequestError(ValueError):
    """A request that cannot run; the message says what to change."""


@dataclass(frozen=True)
class SpeechRequest:
    text: str
    mode: str = "speak"  # "speak": say `text`; "chat": the thinker replies to `text`
    speaker: str | None = None  # None: the checkpoint's default speaker
    predictor: str = "reprefill"  # "reprefill" | "kv" | "compare"
    cuda_graph: bool | None = None  # None: on when CUDA is there
    do_sample: bool = False
    temperature: float = 0.9  # talker (CB0) sampling; HF defaults
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05  # applied in greedy mode too, as HF does
    seed: int = 0
    max_frames: int | None = None  # None: scales with the text
    max_text_tokens: int | None = None  # chat mode: reply length; None: scales with the text

    def checked(self, speakers: list[str]) -> tuple["SpeechRequest", list[str]]:
        """The request with clean values, and the warnings to show; raises RequestError."""
        warnings: list[str] = []
        text = _clean_text(self.text, warnings)
        mode = _choice("mode", self.mode, MODES)
        predictor = _choice("predictor", self.predictor, PREDICTORS)
        speaker = self.speaker.strip().lower() if isinstance(self.speaker, str) and self.speaker.strip() else None
        if speaker is not None and speaker not in speakers:
            raise RequestError(f"unknown speaker {self.speaker!r}: choose one of {', '.join(speakers)}")
        temperature = _number("temperature", self.temperature, 0.05, 5.0)
        top_p = _number("top_p", self.top_p, 0.01, 1.0)
        penalty = _number("repetition_penalty", self.repetition_penalty, 1.0, 2.0)
        top_k = _integer("top_k", self.top_k, 0, 2048)  # 0: no top-k filter
        seed = _integer("seed", self.seed, 0, MAX_SEED)
        max_frames = _limit("max_frames", self.max_frames, MAX_FRAMES, warnings)
        max_text_tokens = _limit("max_text_tokens", self.max_text_tokens, MAX_TEXT_TOKENS, warnings)
        clean = dataclasses.replace(
            self, text=text, mode=mode, predictor=predictor, speaker=speaker, temperature=temperature,
            top_p=top_p, top_k=top_k, repetition_penalty=penalty, seed=seed, max_frames=max_frames,
            max_text_tokens=max_text_tokens, do_sample=bool(self.do_sample),
            cuda_graph=None if self.cuda_graph is None else bool(self.cuda_graph))
        return clean, warnings


def _clean_text(text, warnings: list[str]) -> str:
    if not isinstance(text, str):
        raise RequestError(f"text must be a string, not {type(text).__name__}")
    # Lone surrogates cannot be encoded; replace them rather than fail deep in the tokenizer.
    text = text.encode("utf-8", "replace").decode("utf-8")
    # Control characters (other than newline and tab) become spaces.
    text = "".join(" " if unicodedata.category(c) == "Cc" and c not in "\n\t" else c for c in text)
    if not text.strip():
        raise RequestError("text is empty: type something to say")
    text = text.strip()
    if len(text) > MAX_TEXT_CHARS:
        warnings.append(f"text is {len(text)} characters; only the first {MAX_TEXT_CHARS} are used")
        text = text[:MAX_TEXT_CHARS]
    return text


def _choice(name: str, value, options: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.strip().lower() not in options:
        raise RequestError(f"unknown {name} {value!r}: choose one of {', '.join(options)}")
    return value.strip().lower()


def _number(name: str, value, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError(f"{name} must be a number between {low} and {high}, got {value!r}")
    if not low <= value <= high:
        raise RequestError(f"{name} must be between {low} and {high}, got {value}")
    return float(value)


def _integer(name: str, value, low: int, high: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name} must be a whole number between {low} and {high}, got {value!r}")
    if not low <= value <= high:
        raise RequestError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _limit(name: str, value, maximum: int, warnings: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name} must be a whole number, got {value!r}")
    if value <= 0:
        raise RequestError(f"{name} must be at least 1, got {value}")
    if value > maximum:
        warnings.append(f"{name} {value} is above the limit; using {maximum}")
        return maximum
    return value
