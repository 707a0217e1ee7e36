"""End of speech: a talker that emits codec EOS (tests/eos_model.py) stops the stream where HF's
`generate` stops, and every layer (engine, CLI, app handlers) handles utterances of 0, 1 and a few frames.

In speak mode the checkpoint ends an utterance after as many frames as the text has tokens,
or at the first `~`: "~..." gives zero frames, "a~" one, "abcde" five.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import plotly.graph_objects as go
import pytest
import soundfile as sf
import torch
from transformers import Qwen3OmniMoeForConditionalGeneration

from app import figures
from app.files import OutputDir
from app.handlers import Lab
from omni_core import AudioChunk, Done, Frame, SpeechRequest, TextDelta, load_pipeline
from omni_core.cli import main as cli_main

from .conftest import PRESETS
from .eos_model import EOS_ID, ensure_eos_model
from .test_talker import ForceTokens

UTTERANCES = {0: "~ never said", 1: "a~", 5: "abcde"}  # frames → speak-mode text
MAX_FRAMES = 40  # well past every stop: the stop must come from EOS


@pytest.fixture(scope="session")
def eos_root(tmp_path_factory):
    return tmp_path_factory.mktemp("eos-checkpoints")


@pytest.fixture(scope="module", params=PRESETS)
def eos_preset(request, eos_root):
    """(checkpoint dir, our pipeline, HF reference) of one preset with the EOS channel."""
    path = ensure_eos_model(eos_root, request.param)
    torch.manual_seed(0)
    hf = Qwen3OmniMoeForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
    return path, load_pipeline(str(path), device="cpu", dtype="float32", exact=True), hf


@pytest.fixture(scope="module")
def eos_tiny(eos_root):
    path = ensure_eos_model(eos_root, "tiny")
    return path, load_pipeline(str(path), device="cpu", dtype="float32")


def hf_run(hf, pipe, text: str, mode: str, max_frames: int = MAX_FRAMES, max_text_tokens: int = 12):
    """HF generate, talker greedy: (the talker's CB0 tokens, codes [T, 16] or None, wav or None).

    Speak mode forces HF's thinker to write `text` + <|im_end|>. HF cannot finish an utterance of
    zero frames (its `torch.stack` of no codes raises), so then only the talker's tokens come back."""
    prompt = pipe.chat_prompt(text)
    kwargs = dict(thinker_max_new_tokens=max_text_tokens)
    if mode == "speak":
        reply = pipe.tokenizer(text, add_special_tokens=False)["input_ids"] + [pipe.config.token_ids["im_end"]]
        kwargs = dict(thinker_max_new_tokens=len(reply), thinker_logits_processor=[ForceTokens(len(prompt), reply)])
    seen, talker_generate, chunked_decode = {}, hf.talker.generate, hf.code2wav.chunked_decode

    def talker(**kw):
        seen["talker"] = out = talker_generate(**kw)
        return out

    def decode(codes, **kw):
        seen["codes"] = codes.clone()
        return chunked_decode(codes, **kw)

    hf.talker.generate, hf.code2wav.chunked_decode = talker, decode
    try:
        _, wav = hf.generate(input_ids=torch.tensor([prompt]), speaker="ethan", thinker_do_sample=False,
                             thinker_eos_token_id=pipe.config.token_ids["im_end"],
                             talker_max_new_tokens=max_frames + 1, talker_do_sample=False, **kwargs)
    except RuntimeError as e:  # zero frames
        assert "non-empty" in str(e)
        wav = None
    finally:
        hf.talker.generate, hf.code2wav.chunked_decode = talker_generate, chunked_decode
    tokens = seen["talker"].sequences[0].tolist()
    codes = seen["codes"][0].T.numpy() if "codes" in seen else None
    return tokens, codes, None if wav is None else wav.reshape(-1).numpy()


def expected_samples(pipe, frames: int) -> int:
    """1920 per frame, less the 555 samples the causal decoder holds back at the end (HF's length too)."""
    spf = pipe.info["samples_per_frame"]
    return frames * spf - (spf - pipe.code2wav.num_samples(1)) if frames else 0


# ---- the engine against HF --------------------------------------------------------------------------------

@pytest.mark.parametrize("frames", sorted(UTTERANCES))
def test_speak_stops_at_hfs_eos(eos_preset, frames):
    _, pipe, hf = eos_preset
    text = UTTERANCES[frames]
    tokens, want_codes, want_wav = hf_run(hf, pipe, text, "speak")
    assert tokens[-1] == EOS_ID and EOS_ID not in tokens[:-1] and len(tokens) == frames + 1  # HF's talker
    for predictor in ("reprefill", "kv"):
        got = pipe.generate(SpeechRequest(text, predictor=predictor, max_frames=MAX_FRAMES))
        assert got.stats.stopped == "eos" and got.stats.frames == frames
        assert got.codes.shape == (frames, 16) and got.codes[:, 0].tolist() == tokens[:-1]
        assert len(got.audio) == expected_samples(pipe, frames) == frames * 1920 - 555 * (frames > 0)
        if frames:
            np.testing.assert_array_equal(got.codes, want_codes)
            assert len(got.audio) == len(want_wav)
            np.testing.assert_allclose(got.audio, want_wav, atol=1e-4, rtol=0)


def test_chat_stops_at_hfs_eos(eos_preset):
    """Chat mode: the thinker's reply decides the length; HF and we stop at the same frame."""
    _, pipe, hf = eos_preset
    text = "Tell me something."
    tokens, want_codes, want_wav = hf_run(hf, pipe, text, "chat", max_text_tokens=8)
    got = pipe.generate(SpeechRequest(text, mode="chat", max_text_tokens=8, max_frames=MAX_FRAMES))
    assert tokens[-1] == EOS_ID and got.stats.stopped == "eos" and 0 < got.stats.frames < MAX_FRAMES
    np.testing.assert_array_equal(got.codes, want_codes)
    np.testing.assert_allclose(got.audio, want_wav, atol=1e-4, rtol=0)


@pytest.mark.parametrize("frames", sorted(UTTERANCES))
def test_stream_events_of_zero_one_and_a_few_frames(eos_tiny, frames):
    _, pipe = eos_tiny
    events = list(pipe.stream(SpeechRequest(UTTERANCES[frames], max_frames=MAX_FRAMES)))
    assert isinstance(events[0], TextDelta) and isinstance(events[-1], Done)
    assert sum(isinstance(e, Done) for e in events) == 1
    result = events[-1].result
    assert [e.index for e in events if isinstance(e, Frame)] == list(range(frames))
    chunks = [e.audio for e in events if isinstance(e, AudioChunk)]
    assert bool(chunks) == bool(frames)  # no frame, no audio chunk
    np.testing.assert_array_equal(np.concatenate(chunks) if chunks else np.zeros(0, np.float32), result.audio)
    s = result.stats
    assert (s.stopped, s.frames, s.audio_s) == ("eos", frames, len(result.audio) / 24000)
    assert result.codes.dtype == np.int64 and result.codes.shape == (frames, 16)
    assert result.probs.shape == (frames, 16)
    if frames == 0:
        assert s.rtf is None and s.predictor_ms_per_frame is None and s.first_audio_s is None
    else:
        assert s.rtf > 0 and s.predictor_ms_per_frame > 0 and s.first_audio_s > 0
    np.testing.assert_allclose(pipe.decode(result.codes), result.audio, atol=1e-4, rtol=0)


def test_frame_limit_before_eos_says_max_frames(eos_tiny):
    _, pipe = eos_tiny
    whole = pipe.generate(SpeechRequest(UTTERANCES[5]))
    cut = pipe.generate(SpeechRequest(UTTERANCES[5], max_frames=2))
    assert (whole.stats.stopped, cut.stats.stopped, cut.stats.frames) == ("eos", "max_frames", 2)
    np.testing.assert_array_equal(cut.codes, whole.codes[:2])


def test_compare_mode_and_sampling_stop_too(eos_tiny):
    _, pipe = eos_tiny
    compare = pipe.generate(SpeechRequest(UTTERANCES[5], predictor="compare"))
    assert (compare.stats.stopped, compare.stats.frames, compare.stats.mismatches) == ("eos", 5, 0)
    sampled = pipe.generate(SpeechRequest(UTTERANCES[1], do_sample=True, seed=3))
    assert (sampled.stats.stopped, sampled.stats.frames) == ("eos", 1)  # EOS takes all the probability


# ---- the CLI ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("frames", sorted(UTTERANCES))
def test_cli_writes_zero_one_and_a_few_frames(eos_tiny, tmp_path, capsys, frames):
    path, pipe = eos_tiny
    wav, codes = tmp_path / "a.wav", tmp_path / "a.npy"
    assert cli_main(["synth", UTTERANCES[frames], "--model", str(path), "--out", str(wav),
                     "--codes", str(codes)]) == 0
    out = capsys.readouterr().out
    assert f"{frames} frames" in out and "stopped: eos" in out
    assert ("RTF n/a" in out) == (frames == 0)
    audio, rate = sf.read(wav)
    assert rate == 24000 and len(audio) == expected_samples(pipe, frames)
    assert np.load(codes).shape == (frames, 16)


def test_cli_process_with_zero_frames(eos_tiny, tmp_path):
    path, _ = eos_tiny
    done = subprocess.run([sys.executable, "-m", "omni_core", "synth", UTTERANCES[0], "--model", str(path),
                           "--out", str(tmp_path / "z.wav"), "--codes", str(tmp_path / "z.json")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "0 frames" in done.stdout and "n/a" in done.stdout and "Traceback" not in done.stderr
    assert '"codes": []' in (tmp_path / "z.json").read_text()


# ---- the app's handlers -------------------------------------------------------------------------------------

@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.parametrize("frames", sorted(UTTERANCES))
def test_app_synthesize_finishes_zero_one_and_a_few_frames(eos_tiny, tmp_path, frames, streaming):
    _, pipe = eos_tiny
    lab = Lab(pipe, OutputDir(tmp_path), streaming=streaming)
    updates = list(lab.synthesize(UTTERANCES[frames], "speak", "ethan", "kv", False, False, 0.9, 50, 1.0, 0,
                                  MAX_FRAMES, "codes"))
    last = updates[-1]
    take = last.take
    assert take.finished and take.frames == frames
    assert "end of speech" in last.stats and isinstance(last.heatmap, go.Figure)
    last.heatmap.to_json()  # what Gradio sends to the page
    wav = next(p for p in last.files if p.endswith(".wav"))
    assert len(sf.read(wav)[0]) == expected_samples(pipe, frames)
    assert np.load(next(p for p in last.files if p.endswith(".npy"))).shape == (frames, 16)
    if not streaming:  # the whole utterance at the end, even an empty one
        assert last.audio[0] == 24000 and len(last.audio[1]) == expected_samples(pipe, frames)
    for view in figures.VIEWS:
        assert isinstance(lab.redraw(view, take), go.Figure)


@pytest.mark.parametrize("frames", sorted(UTTERANCES))
def test_app_codes_api_zero_one_and_a_few_frames(eos_tiny, tmp_path, frames):
    _, pipe = eos_tiny
    doc, wav = Lab(pipe, OutputDir(tmp_path), streaming=True).codes(UTTERANCES[frames], predictor="kv")
    assert len(doc["codes"]) == frames and doc["stats"]["stopped"] == "eos"
    assert len(sf.read(wav)[0]) == expected_samples(pipe, frames)
