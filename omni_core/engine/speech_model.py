"""`SpeechModel`: the loaded speech path as a request sees it, one small typed object.

The modules and tables here are read-only after loading; every request reads them,
none writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from omni_core.codec.code2wav import Code2Wav
from omni_core.fast.predictors import Predictors
from omni_core.models.config import OmniConfig
from omni_core.models.qwen3_omni.talker import Talker
from omni_core.models.qwen3_omni.thinker import Thinker


@dataclass(frozen=True)
class SpeechModel:
    config: OmniConfig
    thinker: Thinker
    talker: Talker
    code2wav: Code2Wav
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    predictors: Predictors  # the code predictor's fast path, chosen once
    suppress_mask: torch.Tensor  # [talker vocab] bool: ids CB0 never takes
    default_speaker: str

    @property
    def im_end(self) -> int:
        return self.config.token_ids["im_end"]

    @property
    def codec_eos(self) -> int:
        return self.config.codec_ids["codec_eos_token_id"]

    def chat_prompt(self, text: str) -> list[int]:
        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                 add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def speaker_id(self, speaker: str | None) -> int:
        return self.config.speakers[speaker or self.default_speaker]
