"""What a Qwen3-TTS model can be asked (omni_core/models/qwen3_tts/voices.py, the request check):
speakers, languages and dialects; each field a model cannot use is refused with a message that
says what it supports; bad reference clips and transcripts; the engine keeps serving."""

from __future__ import annotations

import numpy as np
import pytest

from omni_core import RequestError, SpeechRequest, load_pipeline
from omni_core.models.qwen3_tts import voices
from tests.conftest import our_pipeline
from tests.tts_oracle import our_tts, tone


@pytest.fixture(scope="module")
def tiny_tts():
    return load_pipeline("tiny-tts", device="cpu", dtype="float32")


def test_info_lists_speakers_languages_and_abilities(tiny_tts):
    info = tiny_tts.info
    assert info["family"] == "qwen3_tts" and info["kind"] == "custom_voice"
    assert info["speakers"] == ["dylan", "ryan", "vivian"] and info["dialects"] == {"dylan": "beijing_dialect"}
    assert info["languages"][0] == "auto" and "english" in info["languages"]
    assert not any("dialect" in lang for lang in info["languages"])
    assert (info["instruct"], info["clone"], info["chat"], info["can_encode"]) == (False, False, False, True)
    assert info["default_text_input"] == "whole"


def test_dialect_speakers_swap_the_language_for_chinese_and_auto(tiny_tts):
    cfg = tiny_tts.config
    dialect = cfg.languages["beijing_dialect"]
    assert voices.resolve(cfg, "dylan", None).language_id == dialect
    assert voices.resolve(cfg, "dylan", "chinese").language_id == dialect
    assert voices.resolve(cfg, "dylan", "english").language_id == cfg.languages["english"]
    assert voices.resolve(cfg, "vivian", None).language_id is None
    assert voices.codec_track(cfg, voices.resolve(cfg, "vivian", None))[0] == cfg.codec_ids["codec_nothink_id"]


def test_names_in_any_case(tiny_tts):
    clean, _ = tiny_tts.check(SpeechRequest("Hi", speaker="Vivian", language="English", text_input="Streaming"))
    assert (clean.speaker, clean.language, clean.text_input) == ("vivian", "english", "streaming")
    assert tiny_tts.check(SpeechRequest("Hi", language="Auto"))[0].language is None


@pytest.mark.parametrize("fields, message", [
    (dict(mode="chat"), "chat mode needs a thinker"),
    (dict(instruct="Whisper."), "takes no instruction (the 0.6B CustomVoice models take none)"),
    (dict(language="klingon"), "unknown language 'klingon': choose one of auto, chinese, english"),
    (dict(language="beijing_dialect"), "unknown language"),
    (dict(speaker="nobody"), "unknown speaker 'nobody': choose one of dylan, ryan, vivian"),
    (dict(text_input="paragraphs"), "text_input 'paragraphs' is not available here: choose one of whole, streaming"),
    (dict(reference_audio=(24000, tone(1.0))), "only a Qwen3-TTS Base model does; this is a Qwen3-TTS custom_voice"),
    (dict(reference_text="words"), "pass the clip too"),
])
def test_custom_voice_refuses_what_it_cannot_do(tiny_tts, fields, message):
    with pytest.raises(RequestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tiny_tts.check(SpeechRequest("Hello", **fields))


def test_voice_design_takes_an_instruction_and_no_speaker():
    pipe = our_tts("voice_design")
    assert pipe.check(SpeechRequest("Hi", instruct="Calm."))[0].instruct == "Calm."
    with pytest.raises(RequestError, match="has no named speakers \\(describe the voice with instruct\\)"):
        pipe.check(SpeechRequest("Hi", speaker="vivian"))


CLIP = tone(1.0)


@pytest.mark.parametrize("fields, message", [
    (dict(), "clones a voice: pass reference_audio"),
    (dict(reference_audio=(24000, np.zeros(24000, np.float32))), "silent"),
    (dict(reference_audio=(24000, np.ones(61 * 24000, np.float32) * 0.1)), "the limit is 60 s"),
    (dict(reference_audio=(24000, CLIP[:4000])), "needs at least 500 ms"),
    (dict(reference_audio=(1000, CLIP)), "a sample rate of 1000 Hz is not audio"),
    (dict(reference_audio=(24000, "not audio")), "samples must be numbers"),
    (dict(reference_audio=CLIP), "must be \\(sample_rate, samples\\)"),
    (dict(reference_audio=(24000, CLIP), reference_text="  "), "reference_text is empty"),
    (dict(reference_audio=(24000, CLIP), instruct="Loud."), "takes no instruction"),
    (dict(reference_audio=(24000, CLIP), speaker="vivian"), "no named speakers \\(it clones"),
])
def test_base_refuses_bad_clips_and_transcripts(fields, message):
    with pytest.raises(RequestError, match=message):
        our_tts("base").check(SpeechRequest("Hello", **fields))


def test_a_bad_request_leaves_the_engine_serving():
    pipe = our_tts("base")
    with pytest.raises(RequestError):
        pipe.generate(SpeechRequest("Hello", reference_audio=(24000, np.zeros(100))))
    result = pipe.generate(SpeechRequest("Hello", reference_audio=(48000, np.repeat(CLIP, 2)), max_frames=3))
    assert result.codes.shape == (3, 16)


def test_qwen3_omni_refuses_the_tts_fields():
    pipe = our_pipeline("tiny")
    for fields, message in ((dict(language="english"), "no language choice"),
                            (dict(instruct="Calm."), "takes no instruction"),
                            (dict(text_input="whole"), "choose one of streaming"),
                            (dict(reference_audio=(24000, CLIP)), "only a Qwen3-TTS Base model")):
        with pytest.raises(RequestError, match=message):
            pipe.check(SpeechRequest("Hello", **fields))
    with pytest.raises(RequestError, match="no encoder"):
        pipe.encode(CLIP, 24000)


def test_model_defaults_come_from_the_checkpoint_even_after_a_check_without_abilities():
    pipe = our_tts("voice_design")  # its generation_config.json sets repetition_penalty 1.1
    pre, _ = SpeechRequest("Hi").checked(pipe.info["speakers"])  # a caller's early check
    assert pre.text_input is None and pre.repetition_penalty is None
    clean, _ = pipe.check(pre)
    assert (clean.text_input, clean.repetition_penalty) == ("whole", 1.1)
    assert our_tts("base").check(SpeechRequest("Hi", reference_audio=(24000, CLIP)))[0].text_input == "streaming"
