"""The talker's prompt and its text steps, built as HF `generate` builds them.

Prompt (HF `_get_talker_user_parts` + `_get_talker_assistant_parts`), for a thinker
sequence `... <|im_start|>assistant\\n r0 r1 r2 ...`:

  user part:      text_projection(embed(t)) for every token of the user turns
  assistant part: 9 positions, text track + codec track summed:
      text  = [a0, a1, a2, pad, pad, pad, pad, tts_bos, r0']   (x' = text_projection(embed(x)))
      codec = [0,  0,  0, nothink, think_bos, think_eos, speaker, codec_pad, codec_bos]

Text steps (`trailing_text_hidden`): step k reads r(k+1)', then tts_eos once, then
tts_pad forever. As in HF, the reply's last token (the EOS, or the token where
`max_new_tokens` cut it) is never fed back to the thinker, so it is never spoken:
a reply r0..r(G-1) gives text steps r1'..r(G-2)', tts_eos. A reply of one token
(G = 1) has nothing to speak: HF's prompt would have no r0' slot and its two tracks
would not line up; the engine ends such a request with no frames instead. The thinker pushes its tokens as it writes them,
so the talker can start as soon as it has written two (overlap).
"""

from __future__ import annotations

import torch

from omni_core.models.config import OmniConfig
from omni_core.models.qwen3_omni.talker import Talker
from omni_core.models.qwen3_omni.thinker import Thinker


def user_positions(ids: list[int], im_start: int, user: int) -> list[int]:
    """Positions whose turn (the token after the last <|im_start|> at or before it) is `user`."""
    out, turn_start = [], 0
    for p, t in enumerate(ids):
        if t == im_start:
            turn_start = p
        role_pos = min(turn_start + 1, len(ids) - 1)
        if ids[role_pos] == user:
            out.append(p)
    return out


def assistant_start(ids: list[int], im_start: int, assistant: int) -> int:
    starts = [p for p in range(len(ids) - 1) if ids[p] == im_start and ids[p + 1] == assistant]
    if not starts:
        raise ValueError("the prompt has no '<|im_start|>assistant' turn; the chat template must add one")
    return starts[-1]


class TalkerPromptBuilder:
    """Projects thinker tokens into talker space; one per request (no shared state)."""

    def __init__(self, cfg: OmniConfig, thinker: Thinker, talker: Talker):
        self.cfg, self.thinker, self.talker = cfg, thinker, talker
        tok = cfg.token_ids
        specials = torch.tensor([[tok["tts_bos"], tok["tts_eos"], tok["tts_pad"]]], device=self.device)
        self.tts_bos, self.tts_eos, self.tts_pad = self.project(specials).chunk(3, dim=1)  # 3 × [1, 1, C]

    @property
    def device(self) -> torch.device:
        return self.talker.model.codec_embedding.weight.device

    @torch.no_grad()
    def project(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [1, T] → text_projection(thinker embedding) [1, T, C]."""
        return self.talker.text_projection(self.thinker.embed(ids))

    @torch.no_grad()
    def prompt(self, prompt_ids: list[int], first_reply_id: int | None, speaker_id: int) -> torch.Tensor:
        """The talker's input embeddings [1, U + 9, C]; first_reply_id is r0, the reply's first spoken token."""
        if first_reply_id is None:
            raise ValueError("the talker's prompt needs the reply's first spoken token: this reply has none")
        tok, codec = self.cfg.token_ids, self.cfg.codec_ids
        ids = torch.tensor([prompt_ids], device=self.device)
        user = user_positions(prompt_ids, tok["im_start"], tok["user"])
        user_part = self.project(ids)[:, user]  # projected over the whole prompt, then gathered (as HF)
        a = assistant_start(prompt_ids, tok["im_start"], tok["assistant"])
        head = self.project(torch.tensor([prompt_ids[a:a + 3] + [first_reply_id]], device=self.device))
        text = torch.cat([head[:, :3], self.tts_pad.expand(1, 4, -1), self.tts_bos, head[:, 3:4]], dim=1)
        codec_ids = torch.tensor([[codec["codec_nothink_id"], codec["codec_think_bos_id"],
                                   codec["codec_think_eos_id"], speaker_id, codec["codec_pad_id"],
                                   codec["codec_bos_id"]]], device=self.device)
        zeros = torch.zeros(1, 3, text.shape[-1], dtype=text.dtype, device=self.device)
        codec_part = torch.cat([zeros, self.talker.model.codec_embedding(codec_ids)], dim=1)
        return torch.cat([user_part, text + codec_part], dim=1)


class TextSteps:
    """trailing_text_hidden, one entry per talker step, from the reply as the thinker writes it
    (`add` each token, `finish` when the reply is over)."""

    def __init__(self, builder: TalkerPromptBuilder, reply: list[int] = (), done: bool = False):
        self.builder = builder
        self.ids: list[int] = list(reply)  # the reply so far
        self.done = done

    def add(self, token: int) -> None:
        self.ids.append(token)

    def finish(self) -> None:
        self.done = True

    @property
    def can_prompt(self) -> bool:
        """The prompt needs to know whether r0 is the reply's last token."""
        return self.done or len(self.ids) >= 2

    @property
    def first_spoken(self) -> int | None:
        """r0, when it is spoken (not the reply's last token)."""
        return self.ids[0] if len(self.ids) > 1 else None

    @property
    def spoken(self) -> list[int]:
        """The reply ids the talker reads (or will read) so far: never the newest, which may be the last."""
        return self.ids[:-1]

    def ready(self, k: int) -> bool:
        """Whether step k is known: r(k+1) and whether it is the last token."""
        return self.done or k + 2 < len(self.ids)

    def step(self, k: int) -> int | torch.Tensor:
        """Talker decode step k: the token r(k+1) to project when it is not the reply's last, else the
        tts_eos or tts_pad embedding [1, 1, C]. (The engine projects every row's token in one call.)"""
        assert self.ready(k), f"text step {k} is not known yet ({len(self.ids)} reply tokens)"
        if k + 2 < len(self.ids):
            return self.ids[k + 1]
        return self.builder.tts_eos if k == max(len(self.ids) - 2, 0) else self.builder.tts_pad

    def __getitem__(self, k: int) -> torch.Tensor:
        """[1, 1, C] for talker decode step k: r(k+1)' if r(k+1) is not the reply's last token."""
        step = self.step(k)
        return self.builder.project(torch.tensor([[step]], device=self.builder.device)) if isinstance(step, int) else step
