"""The tiny Qwen3-TTS presets on disk (omni_core/synthetic/qwen3_tts.py), here `tiny-tts-base`: a Base
model (voice cloning) with its speaker encoder, built deterministically with tiny-tts's talker and
codec, loaded by name, cloning in both modes; its greedy clone equals the official package's
(the oracle, tests/tts_oracle.py; skipped without .venv-ref)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from omni_core import RequestError, SpeechRequest, load_pipeline
from omni_core.models.qwen3_tts.config import read_tts_config
from omni_core.models.qwen3_tts.speaker_encoder import SpeakerEncoder
from omni_core.synthetic.qwen3_tts import TINY, TINY_BASE, ensure_tiny_tts
from tests.tts_oracle import oracle, tone

CLIP = tone(1.0)
ICL = dict(text="Hello.", ref_audio=CLIP, ref_sample_rate=24000, ref_text="Hi there.", max_frames=6)
XVECTOR = dict(text="Hello.", ref_audio=CLIP, ref_sample_rate=24000, ref_text=None, max_frames=6)
WEIGHTS = ("model.safetensors", "speech_tokenizer/model.safetensors")


def request(req: dict, **fields) -> SpeechRequest:
    return SpeechRequest(req["text"], reference_audio=(req["ref_sample_rate"], req["ref_audio"]),
                         reference_text=req["ref_text"], max_frames=req["max_frames"], **fields)


@pytest.fixture(scope="module")
def base():
    return load_pipeline(TINY_BASE, device="cpu", dtype="float32", exact=True)  # the parity test's: the official bits


def test_a_fresh_build_equals_the_cached_one(tmp_path):
    fresh, cached = ensure_tiny_tts(TINY_BASE, root=tmp_path), ensure_tiny_tts(TINY_BASE)
    assert fresh != cached
    for name in WEIGHTS:
        a, b = load_file(str(fresh / name)), load_file(str(cached / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    for name in ("config.json", "generation_config.json", "tokenizer.json", "speech_tokenizer/config.json"):
        assert (fresh / name).read_bytes() == (cached / name).read_bytes(), name


def test_a_base_checkpoint_with_tiny_tts_talker_and_codec():
    folder, custom = ensure_tiny_tts(TINY_BASE), ensure_tiny_tts(TINY)
    config = json.loads((folder / "config.json").read_text())
    assert config["tts_model_type"] == "base" and config["talker_config"]["spk_id"] == {}
    assert config["speaker_encoder_config"]["enc_dim"] == config["talker_config"]["hidden_size"]
    weights, theirs = load_file(str(folder / WEIGHTS[0])), load_file(str(custom / WEIGHTS[0]))
    speaker = {k: v for k, v in weights.items() if k.startswith("speaker_encoder.")}
    assert {k: v for k, v in weights.items() if k not in speaker}.keys() == theirs.keys()
    assert all(torch.equal(weights[k], theirs[k]) for k in theirs)  # the same talker
    codec, their_codec = load_file(str(folder / WEIGHTS[1])), load_file(str(custom / WEIGHTS[1]))
    assert codec.keys() == their_codec.keys() and all(torch.equal(codec[k], their_codec[k]) for k in codec)
    assert any(k.startswith("encoder.") for k in codec)  # Mimi's encoder: a clip can be encoded
    # every speaker-encoder parameter is in the file, drawn (none left constant)
    names = SpeakerEncoder(read_tts_config(folder).speaker_encoder).state_dict()
    assert set(speaker) == {"speaker_encoder." + k for k in names}
    assert all(t.float().std() > 0 for t in speaker.values())


def test_loads_by_name_and_reports_clone(base):
    info = base.info
    assert (info["family"], info["kind"], info["clone"], info["speakers"]) == ("qwen3_tts", "base", True, [])
    assert info["random_weights"] and info["can_encode"] and not info["instruct"]
    assert info["default_text_input"] == "streaming" and base.speaker_encoder is not None


@pytest.mark.parametrize("req", [ICL, XVECTOR], ids=["icl", "x-vector"])
def test_clones_with_frames_and_audio(base, req):
    result = base.generate(request(req))
    assert result.codes.shape == (6, 16) and len(result.audio) == 6 * 1920
    assert np.isfinite(result.audio).all() and np.abs(result.audio).max() > 0.05


def test_the_transcript_changes_the_clone(base):
    icl, voice = (base.generate(request(r)).codes for r in (ICL, XVECTOR))
    assert not np.array_equal(icl, voice)


def test_refuses_a_speaker_name(base):
    with pytest.raises(RequestError, match=r"has no named speakers \(it clones the voice of reference_audio\)"):
        base.generate(request(ICL, speaker="vivian"))


def test_greedy_clones_equal_the_package(base):
    want = oracle("run", ensure_tiny_tts(TINY_BASE), [ICL, XVECTOR])
    for i, req in enumerate((ICL, XVECTOR)):
        np.testing.assert_array_equal(base.generate(request(req)).codes, want[f"codes_{i}"], err_msg=f"request {i}")
