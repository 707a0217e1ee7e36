"""Code2Wav pairs for the codec tests (test_code2wav.py, test_streaming.py): the HF reference and
ours with the same spread weights, and random codes.

The HF initialisation of Code2Wav (std 0.02, layer scales 0.01, ConvNeXt gamma
1e-6, SnakeBeta at zero) gives audio of ~1e-6: every comparison would pass
trivially. `omni_core.synthetic.tiny` gives the reference seeded weights at which the audio is
well scaled (std ~0.07-0.3, mostly unclamped), so the tolerances bite.
"""

from __future__ import annotations

import torch

from omni_core.codec.code2wav import Code2Wav
from omni_core.codec.streaming import StreamingDecoder
from omni_core.loading.checkpoint import copy_state_dict
from omni_core.models.config import OmniConfig
from omni_core.synthetic.tiny import build_hf_model

PRESETS = ("tiny", "tiny-b")
NUM_FRAMES = 30  # crosses tiny-b's 6-frame attention window many times
_models: dict[str, tuple] = {}


def models(preset: str):
    """(HF code2wav, ours) with the same spread weights, float32, eval; built once per preset."""
    if preset not in _models:
        hf = build_hf_model(preset)
        ours = Code2Wav(OmniConfig.from_hf(hf.config.to_dict()).codec).eval()
        copy_state_dict(ours, hf.code2wav.state_dict())
        _models[preset] = hf.code2wav, ours
    return _models[preset]


def random_codes(batch: int = 1, num_frames: int = NUM_FRAMES, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 2048, (batch, 16, num_frames), generator=torch.Generator().manual_seed(seed))


def stream_all(codec, codes, chunk: int, **kw) -> tuple[torch.Tensor, list[int]]:
    stream = StreamingDecoder(codec, **kw)
    parts = [stream.push(codes[..., i:i + chunk]) for i in range(0, codes.shape[-1], chunk)]
    return torch.cat(parts, dim=-1), [p.shape[-1] for p in parts]
