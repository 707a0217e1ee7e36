"""Qwen3-TTS end to end against the official package (the oracle, tests/tts_oracle.py): greedy
codes bit-identical and audio allclose, on the oracle's random checkpoints of each kind.

Covers the talker, its prompt (both text-input modes, an instruction, languages including
auto, a dialect speaker, the Mistral pre-tokenizer split), the code predictor (with
small_to_mtp_projection on voice design), the codec decoder, and the clone path (x-vector,
the encoder's reference codes, ICL in both modes, the reference decoded ahead of the new codes).
"""

from __future__ import annotations

import numpy as np
import pytest

from omni_core import SpeechRequest
from omni_core.models.qwen3_tts import voices
from tests.tts_oracle import oracle, our_tts, tone

CUSTOM = [
    dict(text="Hello world, this is a test.", speaker="Vivian", language="English", max_frames=8),
    # streaming text; a dialect speaker with auto; "HelloWorld" splits only with Mistral's regex
    dict(text="HelloWorld speech", speaker="dylan", language="Auto", text_input="streaming", max_frames=6),
    dict(text="Good morning", speaker="ryan", language="chinese", instruct="Speak slowly.", max_frames=5),
    dict(text="Is a test", speaker="DYLAN", language="German", text_input="whole", max_frames=4),
    dict(text="A", speaker="vivian", language="english", text_input="streaming", max_frames=3),  # one text token
]
DESIGN = [
    dict(text="Hello speech codes", language="English", instruct="A calm deep voice.", max_frames=6),
    dict(text="Hello speech codes", language="German", text_input="streaming", max_frames=6),
    dict(text="Good morning world", instruct="Bright and fast.", text_input="streaming", max_frames=5),
]
CLIP = tone()
CLONE = [
    dict(text="Good morning world", language="English", ref_text="Hello the voice", max_frames=6),  # ICL, streaming
    dict(text="Good morning world", language="English", ref_text="Hello the voice", text_input="whole", max_frames=6),
    dict(text="Good morning world", max_frames=5),  # the voice alone (x-vector)
    # a long transcript: the text runs past the reference codes (streaming ICL's other branch)
    dict(text="Hello", ref_text=" the speech codes is a test ing the voice world " * 3, max_frames=4),
]
for r in CLONE:
    r.update(ref_audio=CLIP, ref_sample_rate=24000)


def ours(kind: str, req: dict):
    kw = {k: req.get(k) for k in ("text", "speaker", "language", "instruct", "text_input", "max_frames")}
    if "ref_audio" in req:
        kw.update(reference_audio=(req["ref_sample_rate"], req["ref_audio"]), reference_text=req.get("ref_text"))
    return our_tts(kind).generate(SpeechRequest(**kw))


@pytest.mark.parametrize("kind, requests", [("custom_voice", CUSTOM), ("voice_design", DESIGN), ("base", CLONE)])
def test_greedy_codes_and_audio_equal_the_package(kind, requests):
    want = oracle("run", kind, requests)
    for i, req in enumerate(requests):
        got = ours(kind, req)
        codes, audio = want[f"codes_{i}"], want[f"audio_{i}"]
        np.testing.assert_array_equal(got.codes, codes, err_msg=f"{kind} request {i}: {req.get('text')!r}")
        assert len(codes) == req["max_frames"]  # our max_frames=N is the package's max_new_tokens=N+1
        if "ref_text" in req:
            # The package cuts reference + new audio at int(ref / total · samples), which float rounding
            # sometimes puts one sample early: its output may start with the reference's last sample.
            assert 0 <= len(audio) - len(got.audio) <= 1
            audio = audio[len(audio) - len(got.audio):]
        np.testing.assert_allclose(got.audio, audio, atol=1e-4, err_msg=f"{kind} request {i}")
        assert np.abs(audio).max() > 0.05  # the weights make real signal: the comparison bites


def test_prompt_embeddings_equal_the_package():
    """The prefill and the text steps, position by position (what decides the first frame)."""
    want = oracle("run", "custom_voice", CUSTOM)
    pipe = our_tts("custom_voice")
    for i, req in enumerate(CUSTOM):
        clean, _ = pipe.check(SpeechRequest(**{k: req.get(k) for k in
                                               ("text", "speaker", "language", "instruct", "text_input")}))
        voice = voices.resolve(pipe.config, clean.speaker, clean.language)
        prompt = pipe.model.family.prompts.build(clean.text, voice, clean.text_input == "whole", clean.instruct)
        np.testing.assert_allclose(prompt.embeds[0].numpy(), want[f"embeds_{i}"], atol=1e-5)
        steps = prompt.text.steps[0].numpy()
        np.testing.assert_allclose(steps, want[f"trailing_{i}"], atol=1e-5)


def test_bfloat16_codes_equal_the_package_in_bfloat16():
    """Both sides in bfloat16: the same codes; the audio differs by bfloat16's rounding through the
    codec's deep convolution stack (other kernels, other summation orders), not by more. Our KV
    predictor, the package's own algorithm: the re-prefill predictor recomputes every earlier position
    and attends with the whole sequence as queries, which rounds otherwise in bfloat16 (on the AMD EPYC
    it parts from the package in 2 of these 5 requests; in float32 both agree)."""
    want = oracle("run", "custom_voice", CUSTOM, dtype="bfloat16")
    pipe = our_tts("custom_voice", "bfloat16")
    for i, req in enumerate(CUSTOM):
        kw = {k: req.get(k) for k in ("text", "speaker", "language", "instruct", "text_input", "max_frames")}
        got = pipe.generate(SpeechRequest(**kw, predictor="kv"))
        np.testing.assert_array_equal(got.codes, want[f"codes_{i}"], err_msg=f"request {i}")
        diff, level = np.abs(got.audio - want[f"audio_{i}"]).mean(), np.abs(want[f"audio_{i}"]).mean()
        assert diff < 0.1 * level, (i, diff, level)  # measured: ~0.05 of the level
