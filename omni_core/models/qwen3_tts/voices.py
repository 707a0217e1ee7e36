"""Who speaks and in which language: a Qwen3-TTS model's voices, and what a request may ask of it.

CustomVoice models name their speakers (a codec id each; a dialect speaker swaps the
language id for its dialect's when the language is `chinese` or `auto`); VoiceDesign
models take an instruction and no speaker; Base models clone the voice of a reference
clip. Names arrive in any case ("Vivian", "English", "Auto") and are matched lower-cased,
as the package does.
"""

from __future__ import annotations

from dataclasses import dataclass

from omni_core.models.qwen3_tts.config import TTSConfig


@dataclass(frozen=True)
class Voice:
    """What fills the codec track of one request: the language id (None: auto) and the speaker
    (a codec id, or None: none, or an x-vector given later for a clone)."""

    language_id: int | None
    speaker_id: int | None


def codec_track(cfg: TTSConfig, voice: Voice) -> list[int]:
    """The think / language tags, before the speaker slot: [think, think_bos, lang, think_eos], or
    [nothink, think_bos, think_eos] for auto."""
    c = cfg.codec_ids
    if voice.language_id is None:
        return [c["codec_nothink_id"], c["codec_think_bos_id"], c["codec_think_eos_id"]]
    return [c["codec_think_id"], c["codec_think_bos_id"], voice.language_id, c["codec_think_eos_id"]]


def resolve(cfg: TTSConfig, speaker: str | None, language: str | None) -> Voice:
    """Names (already checked, lower-cased) → ids, with the dialect rule."""
    language = language or "auto"
    language_id = None if language == "auto" else cfg.languages[language]
    if speaker in cfg.dialects and language in ("chinese", "auto"):
        language_id = cfg.languages[cfg.dialects[speaker]]
    return Voice(language_id, cfg.speakers[speaker] if speaker else None)


def abilities(cfg: TTSConfig) -> dict:
    """What `pipe.info` tells about the voices (and what the request check enforces)."""
    return dict(
        family=cfg.family, kind=cfg.kind, size=cfg.size, speakers=sorted(cfg.speakers),
        languages=cfg.language_names, dialects=dict(cfg.dialects), instruct=cfg.accepts_instruct,
        clone=cfg.kind == "base", chat=False, text_input=["whole", "streaming"],
        default_text_input=cfg.default_text_input,
    )
