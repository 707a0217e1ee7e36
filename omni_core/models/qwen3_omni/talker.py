"""The talker: a MoE decoder that writes codebook 0 of each 80 ms frame.

Its input at decode step k is the sum of the previous frame's 16 codec embeddings
(E_talker(cb0) + Σ_j codec_embedding[j](code_j)) plus one text step: the thinker's
text, projected, one token per frame (`trailing_text_hidden[k]`, then `tts_pad`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from omni_core.models.code_predictor import CodePredictor
from omni_core.models.config import OmniConfig
from omni_core.models.layers import DecoderStack, Linear


class TalkerModel(DecoderStack):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)


class ResizeMLP(nn.Module):
    """Thinker space → talker space (text_projection, hidden_projection)."""

    def __init__(self, in_dim: int, intermediate: int, out_dim: int):
        super().__init__()
        self.linear_fc1 = Linear(in_dim, intermediate, bias=True)
        self.linear_fc2 = Linear(intermediate, out_dim, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


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
        """cb0 [B], residual_embeds [B, G-1, C] → the frame's summed codec embedding [B, 1, C].
        Summed over one stacked axis, as HF does, so the floats agree."""
        every = torch.cat([self.model.codec_embedding(cb0)[:, None], residual_embeds], dim=1)
        return every.sum(1, keepdim=True)
