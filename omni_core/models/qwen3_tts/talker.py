"""The Qwen3-TTS talker: a dense decoder that writes codebook 0 of each 80 ms frame.

No thinker: text enters through the talker's own `text_embedding` and `text_projection`
(fc1 text→text, SiLU, fc2 text→hidden). Layers are the shared dense blocks (q/k RMSNorm,
SwiGLU); its 3-axis interleaved MRoPE has equal axes for text, so it is 1-D RoPE. Its
input at decode step k is the sum of the last frame's 16 codec embeddings plus one text
step, exactly as Qwen3-Omni's talker. The code predictor is the shared one, with codec
embeddings as wide as the talker (and `small_to_mtp_projection` when it is narrower).
"""

from __future__ import annotations

import torch
from torch import nn

from omni_core.models.code_predictor import CodePredictor, frame_embedding
from omni_core.models.decoder import DecoderStack
from omni_core.models.layers import Linear, ResizeMLP
from omni_core.models.qwen3_tts.config import TTSConfig


class TalkerModel(DecoderStack):
    """talker.model.*"""

    def __init__(self, cfg: TTSConfig):
        super().__init__(cfg.talker)
        self.codec_embedding = nn.Embedding(cfg.talker.vocab_size, cfg.talker.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class Talker(nn.Module):
    """talker.*"""

    def __init__(self, cfg: TTSConfig):
        super().__init__()
        H = cfg.talker.hidden_size
        self.model = TalkerModel(cfg)
        self.text_projection = ResizeMLP(cfg.text_hidden_size, cfg.text_hidden_size, H)
        self.codec_head = Linear(H, cfg.talker.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg.predictor, cfg.num_code_groups, embedding_dim=H,
                                            sampling=cfg.predictor_sampling)

    @torch.no_grad()
    def project_text(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [1, T] → text_projection(text_embedding(ids)) [1, T, H]."""
        return self.text_projection(self.model.text_embedding(ids))

    @torch.no_grad()
    def embed_codec(self, ids: list[int]) -> torch.Tensor:
        """Codec-vocabulary ids → the talker's codec embeddings [1, len(ids), H]."""
        device = self.model.codec_embedding.weight.device
        return self.model.codec_embedding(torch.tensor([ids], device=device))

    def embed_codes(self, cb0: torch.Tensor, residual_embeds: torch.Tensor) -> torch.Tensor:
        """cb0 [B], residual_embeds [B, G-1, H] → the frame's summed codec embedding [B, 1, H]."""
        return frame_embedding(self.model.codec_embedding, cb0, residual_embeds)

    @torch.no_grad()
    def embed_frames(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [T, G] (a reference clip's) → each frame's summed codec embedding [1, T, H]."""
        residual = torch.stack([emb(codes[:, j + 1]) for j, emb in enumerate(self.code_predictor.model.codec_embedding)],
                               dim=1)  # [T, G-1, H]
        return self.embed_codes(codes[:, 0], residual)[:, 0][None]
