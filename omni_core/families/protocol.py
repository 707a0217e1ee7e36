"""`Family`: what differs between Qwen3-Omni and Qwen3-TTS, asked of one object chosen at load.

The load recipe reads the family's `loading` module (config, tokenizer, modules, weights); the
pipeline its abilities (what a request may ask, `pipe.info`), its default speaker and the request
defaults; the engine (`SpeechModel.family`) its admission of a request (prompts, codec stream),
the talker's prompt and its next text inputs, and the CB0 rules (suppressed ids, min_new_tokens).
Everything else in the engine is shared: the talker, the code predictor and the codec are driven
the same way for both.
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable, ClassVar, Protocol

import torch

# open_stream(prefix [Q, n] | None) → the request's codec stream (engine/codec_stream.py), or None when the
# request makes no audio (scoring); prefix: codes decoded first whose audio is not wanted (a clone's reference).
OpenStream = Callable[[torch.Tensor | None], object]


class Family(Protocol):
    name: ClassVar[str]  # "qwen3_omni" | "qwen3_tts": config.json's model_type, `pipe.info["family"]`
    model_type: ClassVar[str]  # its checkpoints' config.json model_type
    loading: ClassVar[ModuleType]  # its part of the load recipe (loading/qwen3_omni.py, loading/qwen3_tts.py)
    min_new_tokens: ClassVar[int]  # CB0 cannot be codec EOS before this many frames
    default_speaker: str | None  # the speaker of a request that names none
    suppress_mask: torch.Tensor  # [talker vocab] bool: the ids CB0 never takes

    def abilities(self) -> dict:
        """What a request may ask of this model (request.py checks it; `pipe.info` shows it)."""

    def admit(self, model, seq, open_stream: OpenStream) -> None:
        """A request taken in: its prompts (the thinker's to prefill, or the talker's), its reply or text
        steps and its codec stream."""

    def talker_prompt(self, model, seq) -> torch.Tensor:
        """The talker's prompt [1, L, C], once `seq.can_talk`."""

    def text_inputs(self, seqs: list) -> torch.Tensor:
        """Text step k-1 of every row (k: frames made) [B, 1, C]: what the talker's next input adds to the last
        frame's codec embedding."""


def suppress_band(config, device: torch.device) -> torch.Tensor:
    """HF suppresses the talker's last 1024 ids (special codec ids) except codec EOS: [vocab] bool (both families)."""
    vocab = config.talker.vocab_size
    mask = torch.zeros(vocab, dtype=torch.bool, device=device)
    mask[vocab - 1024:] = True
    mask[config.codec_ids["codec_eos_token_id"]] = False
    return mask
