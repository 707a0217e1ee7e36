"""`Parts`: what a request needs from its pipeline, as one small typed object.

The modules and tables here are read-only after loading; every request reads them,
none writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..codec import Code2Wav
from ..config import OmniConfig
from ..talker import Talker
from ..thinker import Thinker
from .predictors import Predictors


@dataclass(frozen=True)
class Parts:
    config: OmniConfig
    thinker: Thinker
    talker: Talker
    codec: Code2Wav
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    predictors: Predictors  # the code predictor's fast path, chosen once
    suppress_mask: torch.Tensor  # [talker vocab] bool: ids CB0 never takes
    default_speaker: str

    @property
    def im_end(self) -> int:
        return self.config.token_ids["im_end"]

    def chat_prompt(self, text: str) -> list[int]:
        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                 add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def speaker_id(self, speaker: str | None) -> int:
        return self.config.speakers[speaker or self.default_speaker]
