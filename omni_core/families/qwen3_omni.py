"""`Qwen3Omni`: the Qwen3-Omni family's adapter (families/protocol.py).

A request's text goes to the thinker: chat mode prefills its chat prompt and lets it write a reply;
speak mode takes the text itself as the reply (for text-only input the talker reads only the
thinker's projected token embeddings, never its hidden states, as HF: no thinker forward). The
talker's prompt is built from the thinker's prompt and the reply's first token
(models/qwen3_omni/prompt.py), and each later text step is a reply token projected into the
talker's space, then tts_eos, then tts_pad.
"""

from __future__ import annotations

import torch

from omni_core.engine.sequence import Sequence, default_text_tokens
from omni_core.events import TextDelta
from omni_core.families.protocol import OpenStream, suppress_band
from omni_core.loading import qwen3_omni as loading
from omni_core.models.config import OmniConfig
from omni_core.models.qwen3_omni.prompt import TalkerPromptBuilder, TextSteps
from omni_core.request import OMNI_ABILITIES

DEFAULT_SPEAKER = "ethan"  # HF's `generate(speaker="Ethan")`


class Qwen3Omni:
    name = "qwen3_omni"
    model_type = "qwen3_omni_moe"  # config.json's
    loading = loading
    min_new_tokens = 0  # HF's talker may end at its first frame

    def __init__(self, config: OmniConfig, modules: dict, tokenizer, device: torch.device):
        self.config = config
        speakers = sorted(config.speakers)
        self.default_speaker = DEFAULT_SPEAKER if DEFAULT_SPEAKER in config.speakers else (speakers or [None])[0]
        self.suppress_mask = suppress_band(config, device)

    def abilities(self) -> dict:
        return {**OMNI_ABILITIES, "speakers": sorted(self.config.speakers)}

    def admit(self, model, seq: Sequence, open_stream: OpenStream) -> None:
        """The chat prompt, the talker's prompt builder and the codec stream; speak mode's reply is the text,
        chat mode's thinker prompt waits for `Runner.prefill_thinker`."""
        req = seq.req
        seq.prompt_ids = model.chat_prompt(req.text)
        seq.builder = TalkerPromptBuilder(model.config, model.thinker, model.talker)
        seq.decoder = open_stream(None)
        if req.mode == "speak":
            reply = model.tokenizer(req.text, add_special_tokens=False)["input_ids"] + [model.im_end]
            seq.reply = TextSteps(seq.builder, reply, done=True)
            seq.emit(TextDelta(req.text, seq.reply.spoken))
            return
        seq.reply = TextSteps(seq.builder)
        seq.max_text_tokens = req.max_text_tokens or default_text_tokens(len(seq.prompt_ids))
        thinker = model.thinker.model
        seq.thinker_cache = thinker.new_cache(1, len(seq.prompt_ids) + seq.max_text_tokens,
                                              like=thinker.embed_tokens.weight)
        seq.thinker_todo = torch.tensor([seq.prompt_ids], device=model.device)  # prefilled by `prefill_thinker`

    def talker_prompt(self, model, seq: Sequence) -> torch.Tensor:
        """Built once the reply's first tokens are known (r0, and whether it is the last)."""
        return seq.builder.prompt(seq.prompt_ids, seq.reply.first_spoken, model.speaker_id(seq.req.speaker))

    def text_inputs(self, seqs: list[Sequence]) -> torch.Tensor:
        """One text projection for the rows whose step is a reply token (the projection's matmul rows are
        batch-invariant); the others read the tts_eos or tts_pad embedding."""
        steps = [s.reply.step(len(s.codes) - 1) for s in seqs]  # token ids to project, or embeddings [1, 1, C]
        reading = [(s, step) for s, step in zip(seqs, steps) if isinstance(step, int)]
        if reading:
            ids = torch.tensor([step for _, step in reading], device=reading[0][0].builder.device)[:, None]  # [B', 1]
            projected = iter(reading[0][0].builder.project(ids).split(1))
            steps = [next(projected) if isinstance(step, int) else step for step in steps]
        return torch.cat(steps)
