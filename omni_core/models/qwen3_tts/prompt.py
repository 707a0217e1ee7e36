"""The talker's prompt (prefill) and its text steps, built as the package's `generate` builds them.

With T(ids) = text_projection(text_embedding(ids)), C(ids) the talker's codec embedding, the
text tokenized as `<|im_start|>assistant\\n{text}<|im_end|>\\n<|im_start|>assistant\\n` (ids[:3]
the role, ids[3:-5] the text), and bos, eos, pad = T([tts_bos, tts_eos, tts_pad]):

    instruction (optional)   T(<|im_start|>user\\n{instruct}<|im_end|>\\n)
    role                     T(ids[:3])
    codec track              [pad × (n-2), bos] + C(track[:-1]), track = think/language tags,
                             speaker slot (if any), codec_pad, codec_bos
    streaming text           T(ids[3]) + C(codec_bos); then one text token per frame:
                             T(ids[4:-5]), eos, then pad
    whole text               (T(ids[3:-5]), eos) + C(codec_pad) each, then pad + C(codec_bos);
                             then pad every frame
    ICL clone (replaces the text rows): text = T(ref ids ++ ids[3:-5]) ++ eos, codec =
                             C(codec_bos) ++ the reference frames' summed embeddings;
                             whole: text + C(codec_pad), then codec + pad;
                             streaming: text + codec over the codec's length (text padded with
                             pad), the rest of the text as the text steps

docs/QWEN3_TTS.md lists where each piece is in the package.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from omni_core.models.qwen3_tts.config import TTSConfig
from omni_core.models.qwen3_tts.talker import Talker
from omni_core.models.qwen3_tts.voices import Voice, codec_track


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def reference_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def instruct_text(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n"


class TextSteps:
    """The text the talker reads at each decode step k: `steps[k]` ([1, 1, H]), then tts_pad forever.
    Speaks the engine's text-steps interface (done, ids, spoken, ready, step(k), [k])."""

    def __init__(self, steps: torch.Tensor, pad: torch.Tensor, ids: list[int]):
        self.steps, self.pad = steps, pad  # [1, K, H], [1, 1, H]
        self.ids = list(ids)  # the spoken text's ids (the request's text)
        self.done = True  # all text is known before the first frame

    @property
    def spoken(self) -> list[int]:
        return self.ids

    @property
    def can_prompt(self) -> bool:
        return True

    def ready(self, k: int) -> bool:
        return True

    def __getitem__(self, k: int) -> torch.Tensor:
        return self.steps[:, k:k + 1] if k < self.steps.shape[1] else self.pad

    def step(self, k: int) -> torch.Tensor:
        """Step k's embedding [1, 1, H]: every step is projected already."""
        return self[k]


@dataclass
class Prompt:
    embeds: torch.Tensor  # [1, L, H]: the talker's prefill
    text: TextSteps
    ids: list[int]  # the tokenized assistant text


class PromptBuilder:
    """Projects text into the talker's space; one per pipeline, stateless between requests."""

    def __init__(self, cfg: TTSConfig, talker: Talker, tokenizer):
        self.cfg, self.talker, self.tokenizer = cfg, talker, tokenizer
        t = cfg.token_ids
        specials = torch.tensor([[t["tts_bos"], t["tts_eos"], t["tts_pad"]]], device=self.device)
        self.bos, self.eos, self.pad = talker.project_text(specials).chunk(3, dim=1)

    @property
    def device(self) -> torch.device:
        return self.talker.model.codec_embedding.weight.device

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])

    def project(self, ids: list[int]) -> torch.Tensor:
        """ids → T(ids) [1, len(ids), H] (no rows for no ids)."""
        if not ids:
            return self.pad[:, :0]
        return self.talker.project_text(torch.tensor([ids], device=self.device))

    @torch.no_grad()
    def build(self, text: str, voice: Voice, whole: bool, instruct: str | None = None,
              xvector: torch.Tensor | None = None, reference: tuple[str, torch.Tensor] | None = None) -> Prompt:
        """xvector [H]: a clone's speaker embedding (fills the speaker slot); reference = (transcript,
        codes [T, 16]): an ICL clone."""
        ids = self.tokenize(assistant_text(text))
        head, track = self.head(ids[:3], voice, instruct, xvector)
        if reference is not None:
            rows, steps = self.icl(ids[3:-5], reference, whole)
        elif whole:
            text_rows = torch.cat([self.project(ids[3:-5]), self.eos], dim=1)
            pads = self.talker.embed_codec([self.cfg.codec_ids["codec_pad_id"]] * text_rows.shape[1])
            rows, steps = torch.cat([text_rows + pads, self.pad + track[:, -1:]], dim=1), self.pad
        else:
            rows = self.project(ids[3:4]) + track[:, -1:]
            steps = torch.cat([self.project(ids[4:-5]), self.eos], dim=1)
        return Prompt(torch.cat([head, rows], dim=1), TextSteps(steps, self.pad, ids[3:-5]), ids)

    def head(self, role: list[int], voice: Voice, instruct: str | None,
             xvector: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompt's rows before the text [1, n, H] (instruction, role, codec track) and the track [1, m, H]."""
        parts = [self.project(self.tokenize(instruct_text(instruct)))] if instruct else []
        parts.append(self.project(role))
        track = self.track(voice, xvector)  # [1, m, H]
        m = track.shape[1]
        parts.append(torch.cat([self.pad.expand(1, m - 2, -1), self.bos], dim=1) + track[:, :-1])
        return torch.cat(parts, dim=1), track

    @torch.no_grad()
    def streaming_prompt(self, text: torch.Tensor, voice: Voice, instruct: str | None = None,
                         xvector: torch.Tensor | None = None, codes: torch.Tensor | None = None) -> torch.Tensor:
        """The streaming-text prompt [1, L, H] from the text rows it holds (`text` [1, n, H]: the first token's; an
        ICL clone's, over its reference codes [T, 16]), as `build` makes it, for text still being written
        (live_text.py)."""
        head, track = self.head(self.tokenize(assistant_text(""))[:3], voice, instruct, xvector)
        return torch.cat([head, text + (track[:, -1:] if codes is None else self.icl_codec(codes))], dim=1)

    def reference_ids(self, transcript: str) -> list[int]:
        """An ICL clone's transcript ids, which go before the text's."""
        return self.tokenize(reference_text(transcript))[3:-2]

    def icl_codec(self, codes: torch.Tensor) -> torch.Tensor:
        """An ICL clone's codec rows [1, 1 + T, H]: codec_bos, then the reference frames' summed embeddings."""
        bos = self.talker.embed_codec([self.cfg.codec_ids["codec_bos_id"]])
        return torch.cat([bos, self.talker.embed_frames(codes)], dim=1)

    def text_ids(self, text: str) -> list[int]:
        """The ids of `text` as the prompt tokenizes it (inside the assistant turn: ids[3:-5])."""
        return self.tokenize(assistant_text(text))[3:-5]

    def track(self, voice: Voice, xvector: torch.Tensor | None) -> torch.Tensor:
        """The codec track's embeddings [1, n, H]: tags, speaker slot, codec_pad, codec_bos."""
        c = self.cfg.codec_ids
        tags = self.talker.embed_codec(codec_track(self.cfg, voice))
        tail = self.talker.embed_codec([c["codec_pad_id"], c["codec_bos_id"]])
        if xvector is not None:
            speaker = [xvector.to(tags.dtype).view(1, 1, -1)]
        elif voice.speaker_id is not None:
            speaker = [self.talker.embed_codec([voice.speaker_id])]
        else:
            speaker = []
        return torch.cat([tags, *speaker, tail], dim=1)

    def icl(self, text_ids: list[int], reference: tuple[str, torch.Tensor], whole: bool):
        """An ICL clone's rows [1, R, H] and text steps."""
        transcript, codes = reference
        text = torch.cat([self.project(self.reference_ids(transcript) + text_ids), self.eos], dim=1)  # [1, Lt, H]
        codec = self.icl_codec(codes)
        Lt, Lc = text.shape[1], codec.shape[1]
        if whole:
            pads = self.talker.embed_codec([self.cfg.codec_ids["codec_pad_id"]] * Lt)
            return torch.cat([text + pads, codec + self.pad], dim=1), self.pad
        if Lt > Lc:
            return text[:, :Lc] + codec, text[:, Lc:]
        return torch.cat([text, self.pad.expand(1, Lc - Lt, -1)], dim=1) + codec, self.pad
