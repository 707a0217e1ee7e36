"""The talker: a MoE decoder that writes codebook 0 of each 80 ms frame.

Its input at decode step k is the sum of the previous frame's 16 codec embeddings
(E_talker(cb0) + Σ_j codec_embedding[j](code_j)) plus one text step: the thinker's
text, projected, one token per frame (`trailing_text_hidden[k]`, then `tts_pad`).
"""

from __future__ import annotations

import torch
from torch import nn

from omni_core.models.code_predictor import CodePredictor, frame_embedding
from omni_core.models.config import OmniConfig
from omni_core.models.decoder import DecoderStack
from omni_core.models.layers import Linear, ResizeMLP


class TalkerModel(DecoderStack):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)


class Talker(nn.Module):
    """talker.*"""

    def __init__(self, cfg: OmniConfig):
        super().__init__()
        t = cfg.talker
        self.model = TalkerModel(t)
        self.codec_head = Linear(t.hidden_size, t.vocab_size, bias=False)
        self.text_projection = ResizeMLP(cfg.thinker_hidden_size, t.intermediate_size, t.hidden_size)
        self.hidden_projection = ResizeMLP(cfg.thinker_hidden_size, t.intermediate_size, t.hidden_size)
        self.code_predictor = CodePredictor(cfg.predictor, cfg.num_code_groups)

    def embed_codes(self, cb0: torch.Tensor, residual_embeds: torch.Tensor) -> torch.Tensor:
        """cb0 [B], residual_embeds [B, G-1, C] → the frame's summed codec embedding [B, 1, C]."""
        return frame_embedding(self.model.codec_embedding, cb0, residual_embeds)
