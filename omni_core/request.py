"""What a caller asks for: `SpeechRequest`, checked once into a clean request.

Every bad value gets a `RequestError` whose message says what to change; values
that are merely too large are clamped, with a warning the caller can show.
"""

from __future__ import annotations

import dataclasses
import math
import unicodedata
from dataclasses import dataclass

from omni_core.audio import SAMPLE_RATE, clean_audio
from omni_core.errors import RequestError

MODES = ("speak", "chat")
PREDICTORS = ("reprefill", "kv", "compare")
MAX_TEXT_CHARS = 2000  # longer text is truncated, with a warning
MAX_FRAMES = 1500  # 120 s of audio at 12.5 frames/s: the per-request budget
MAX_TEXT_TOKENS = 512
MAX_SEED = 2**63 - 1


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
    repetition_penalty: float | None = None  # None: the model's (HF's 1.05; a Qwen3-TTS checkpoint's
    # generation_config.json); applied in greedy mode too, as HF does
    seed: int = 0
    max_frames: int | None = None  # None: scales with the text
    max_text_tokens: int | None = None  # chat mode: reply length; None: scales with the text
    # Qwen3-TTS (refused, with a message, by a model that cannot use them; `pipe.info` lists what it can):
    language: str | None = None  # one of the model's languages; None: auto
    instruct: str | None = None  # how to speak (VoiceDesign; a 1.7B CustomVoice)
    text_input: str | None = None  # "whole" (all text in the prompt) | "streaming" (a token per frame); None: the model's
    reference_audio: tuple | None = None  # (sample_rate, samples): the voice a Base model clones
    reference_text: str | None = None  # the clip's transcript (an in-context clone); None: the voice alone

    def checked(self, speakers: list[str], abilities: dict | None = None,
                live: bool = False) -> tuple["SpeechRequest", list[str]]:
        """The request with clean values, and the warnings to show; raises RequestError.
        abilities: what the model can do (pass `Pipeline.info`); None: a Qwen3-Omni model's, with the
        model-dependent defaults (text_input, repetition_penalty) left for the pipeline's own check.
        live: the text is the first piece of text still being written (`Pipeline.stream_text`): it may be
        empty, and the talker reads it as it comes (streaming text input)."""
        can = {**OMNI_ABILITIES, "speakers": list(speakers), **(abilities or {})}
        if abilities is None:
            can.update(default_text_input=None, repetition_penalty=None)
        warnings: list[str] = []
        # strip_text False (Qwen3-TTS): the text is tokenized as given (its spaces are tokens), as the package does.
        text = clean_piece(self.text) if live else _clean_text(self.text, warnings, strip=can["strip_text"])
        mode = _choice("mode", self.mode, MODES)
        if live:
            _live(self, mode, can)
        if mode == "chat" and not can["chat"]:
            raise RequestError("chat mode needs a thinker to write a reply; this model speaks the text it is "
                               "given: use mode='speak'")
        predictor = _choice("predictor", self.predictor, PREDICTORS)
        speaker = _speaker(self.speaker, can)
        temperature = _number("temperature", self.temperature, 0.05, 5.0)
        top_p = _number("top_p", self.top_p, 0.01, 1.0)
        penalty = self.repetition_penalty if self.repetition_penalty is not None else can["repetition_penalty"]
        penalty = None if penalty is None else _number("repetition_penalty", penalty, 1.0, 2.0)
        top_k = _integer("top_k", self.top_k, 0, 2048)  # 0: no top-k filter
        seed = _integer("seed", self.seed, 0, MAX_SEED)
        max_frames = _limit("max_frames", self.max_frames, MAX_FRAMES, warnings)
        max_text_tokens = _limit("max_text_tokens", self.max_text_tokens, MAX_TEXT_TOKENS, warnings)
        clean = dataclasses.replace(
            self, text=text, mode=mode, predictor=predictor, speaker=speaker, temperature=temperature,
            top_p=top_p, top_k=top_k, repetition_penalty=penalty, seed=seed, max_frames=max_frames,
            max_text_tokens=max_text_tokens, do_sample=bool(self.do_sample),
            cuda_graph=None if self.cuda_graph is None else bool(self.cuda_graph),
            language=_language(self.language, can), instruct=_instruct(self.instruct, can),
            text_input="streaming" if live else _text_input(self.text_input, can), **_reference(self, can))
        return clean, warnings


# What a Qwen3-Omni model can do (Pipeline.info lists a model's own: families/). title: the model as the
# messages name it; strip_text: whether the text's outer spaces go before tokenizing; live_text: whether it can
# speak text still being written (Pipeline.stream_text).
OMNI_ABILITIES = dict(family="qwen3_omni", kind="qwen3_omni", title="Qwen3-Omni", speakers=[], languages=[],
                      instruct=False, clone=False, chat=True, text_input=["streaming"], default_text_input="streaming",
                      repetition_penalty=1.05, strip_text=True, live_text=False)


def _speaker(value, can: dict) -> str | None:
    speaker = value.strip().lower() if isinstance(value, str) and value.strip() else None
    if speaker is None:
        return None
    if not can["speakers"]:
        also = " (it clones the voice of reference_audio)" if can["clone"] else \
            " (describe the voice with instruct)" if can["instruct"] else ""
        raise RequestError(f"this {can['title']} model has no named speakers{also}: leave speaker out")
    if speaker not in can["speakers"]:
        raise RequestError(f"unknown speaker {value!r}: choose one of {', '.join(can['speakers'])}")
    return speaker


def _language(value, can: dict) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not can["languages"]:
        raise RequestError(f"a {can['title']} model has no language choice (it speaks the language of the "
                           "text): leave language out")
    if not isinstance(value, str) or value.strip().lower() not in can["languages"]:
        raise RequestError(f"unknown language {value!r}: choose one of {', '.join(can['languages'])}")
    language = value.strip().lower()
    return None if language == "auto" else language


def _instruct(value, can: dict) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise RequestError(f"instruct must be a string, not {type(value).__name__}")
    if not value.strip():
        return None
    if not can["instruct"]:
        why = " (the 0.6B CustomVoice models take none)" if can["kind"] == "custom_voice" else ""
        raise RequestError(f"this {can['title']} model takes no instruction{why}: leave instruct out")
    if len(value) > MAX_TEXT_CHARS:
        raise RequestError(f"instruct is {len(value)} characters; the limit is {MAX_TEXT_CHARS}")
    return value  # as given: the package tokenizes it so


def _live(req: "SpeechRequest", mode: str, can: dict) -> None:
    """Whether text still being written can be spoken as asked (RequestError if not)."""
    if not can.get("live_text"):
        raise RequestError(f"a {can['title']} model speaks its thinker's reply, which it streams itself (chat "
                           "mode): text that arrives in pieces needs a Qwen3-TTS model")
    if mode != "speak":
        raise RequestError("text that arrives in pieces is spoken as it comes: use mode='speak'")
    if req.text_input is not None and str(req.text_input).strip().lower() != "streaming":
        raise RequestError("text that arrives in pieces is read a token per frame: use text_input='streaming' "
                           "(or leave it out); 'whole' needs all the text before the first frame")


def _text_input(value, can: dict) -> str | None:
    if value is None:
        return can["default_text_input"]
    if not isinstance(value, str) or value.strip().lower() not in can["text_input"]:
        raise RequestError(f"text_input {value!r} is not available here: choose one of {', '.join(can['text_input'])}")
    return value.strip().lower()


def _reference(req: "SpeechRequest", can: dict) -> dict:
    """reference_audio → (24000, float32 mono samples); reference_text checked."""
    if req.reference_audio is None:
        if req.reference_text is not None:
            raise RequestError("reference_text is the transcript of reference_audio: pass the clip too")
        if can["clone"]:
            raise RequestError("this Qwen3-TTS Base model clones a voice: pass reference_audio=(sample_rate, samples)")
        return {}
    if not can["clone"]:
        raise RequestError(f"reference_audio clones a voice, which only a Qwen3-TTS Base model does; this is a "
                           f"{can['title']} model" + (": choose a speaker" if can["speakers"] else ""))
    samples = clean_audio(req.reference_audio, "reference_audio", min_samples=SAMPLE_RATE // 2)
    text = req.reference_text
    if text is not None:
        if not isinstance(text, str):
            raise RequestError(f"reference_text must be a string, not {type(text).__name__}")
        if not text.strip():
            raise RequestError("reference_text is empty: give the words spoken in the clip, or leave it out "
                               "to clone the voice alone")
        text = text[:MAX_TEXT_CHARS]  # as given: the package tokenizes it so
    return dict(reference_audio=(SAMPLE_RATE, samples), reference_text=text)


def clean_piece(text) -> str:
    """Text as the tokenizer may take it: lone surrogates replaced, control characters (but newline and tab)
    spaces; RequestError when it is not a string."""
    if not isinstance(text, str):
        raise RequestError(f"text must be a string, not {type(text).__name__}")
    # Lone surrogates cannot be encoded; replace them rather than fail deep in the tokenizer.
    text = text.encode("utf-8", "replace").decode("utf-8")
    return "".join(" " if unicodedata.category(c) == "Cc" and c not in "\n\t" else c for c in text)


def _clean_text(text, warnings: list[str], strip: bool = True) -> str:
    text = clean_piece(text)
    if not text.strip():
        raise RequestError("text is empty: type something to say")
    text = text.strip() if strip else text
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
