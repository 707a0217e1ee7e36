"""`SpeechModel`: the loaded speech path as a request sees it, one small typed object.

The modules and tables here are read-only after loading; every request reads them,
none writes them. What differs between the families (admission, the talker's prompt and
text inputs, CB0's rules, the default speaker) is asked of `family`, the adapter chosen at
load (families/).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from omni_core.codec.code2wav import Code2Wav
from omni_core.codec.qwen3_tts import TTSCodec
from omni_core.fast.predictors import Predictors
from omni_core.families.protocol import Family
from omni_core.models.config import OmniConfig
from omni_core.models.qwen3_omni.talker import Talker
from omni_core.models.qwen3_omni.thinker import Thinker
from omni_core.models.qwen3_tts.config import TTSConfig
from omni_core.models.qwen3_tts.talker import Talker as TTSTalker


@dataclass(frozen=True)
class SpeechModel:
    config: OmniConfig | TTSConfig
    thinker: Thinker | None  # None: a Qwen3-TTS model (text goes straight to the talker)
    talker: Talker | TTSTalker
    code2wav: Code2Wav | TTSCodec  # the codec
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    predictors: Predictors  # the code predictor's fast path, chosen once
    family: Family  # Qwen3Omni or Qwen3TTS (families/): what differs between the two

    @property
    def default_speaker(self) -> str | None:
        return self.family.default_speaker

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

    def cb0_mask(self, frames: int) -> torch.Tensor:
        """The ids CB0 cannot take at this frame: the suppressed band, and codec EOS before min_new_tokens."""
        if frames >= self.family.min_new_tokens:
            return self.family.suppress_mask
        mask = self.family.suppress_mask.clone()
        mask[self.codec_eos] = True
        return mask
