"""`Qwen3TTS`: the Qwen3-TTS family's adapter (families/protocol.py).

No thinker: the request's text goes straight into the talker's prompt, built at admission with the
voice (a named speaker and language, an instruction, or a clone's x-vector and reference codes), and
each later text step is an embedding the prompt builder made (models/qwen3_tts/prompt.py). A clone's
reference codes go first into the codec stream: the package decodes reference + new codes and returns
the new part.
"""

from __future__ import annotations

import torch

from omni_core.engine.sequence import Sequence
from omni_core.events import TextDelta
from omni_core.families.protocol import OpenStream, suppress_band
from omni_core.loading import qwen3_tts as loading
from omni_core.models.qwen3_tts import voices
from omni_core.models.qwen3_tts.config import TTSConfig
from omni_core.models.qwen3_tts.live_text import LiveText
from omni_core.models.qwen3_tts.prompt import PromptBuilder, assistant_text


class Qwen3TTS:
    name = "qwen3_tts"
    model_type = "qwen3_tts"  # config.json's
    loading = loading
    min_new_tokens = 2  # the package's generate(min_new_tokens=2): no codec EOS as the first two frames' CB0

    def __init__(self, config: TTSConfig, modules: dict, tokenizer, device: torch.device):
        self.config = config
        self.default_speaker = (sorted(config.speakers) or [None])[0]  # CustomVoice: the first by name
        self.suppress_mask = suppress_band(config, device)
        self.prompts = PromptBuilder(config, modules["talker"], tokenizer)  # the talker's prompt from a request
        self.speaker_encoder = modules.get("speaker_encoder")  # Base: x-vectors of reference clips

    def abilities(self) -> dict:
        cfg = self.config
        return {**voices.abilities(cfg), "title": f"Qwen3-TTS {cfg.kind}", "strip_text": False,
                "repetition_penalty": cfg.generation["repetition_penalty"], "live_text": True}

    def admit(self, model, seq: Sequence, open_stream: OpenStream) -> None:
        """The talker's prompt from the request (a clone's x-vector and reference codes first) and the codec
        stream (a clone's reference codes go in first)."""
        req = seq.req
        voice = voices.resolve(self.config, req.speaker or self.default_speaker, req.language)
        xvector = reference = None
        if req.reference_audio is not None:
            wav = torch.from_numpy(req.reference_audio[1]).to(model.device)
            xvector = self.speaker_encoder.embed(wav)
            if req.reference_text is not None:
                codes = model.code2wav.encode(wav)  # [T, 16]
                reference = (req.reference_text, codes)
        seq.decoder = open_stream(None if reference is None else reference[1].T)
        if seq.feed is not None:  # text still being written: the prompt waits for the text it holds
            prefix, held = ([], 1) if reference is None else (self.prompts.reference_ids(reference[0]),
                                                              1 + reference[1].shape[0])
            seq.reply = LiveText(self.prompts, seq.feed, seq.stats.warnings, prefix, held)
            seq.voice = (voice, xvector, None if reference is None else reference[1])
            return
        prompt = self.prompts.build(req.text, voice, req.text_input == "whole", req.instruct, xvector, reference)
        seq.prompt_ids, seq.reply, seq.talker_prompt = prompt.ids, prompt.text, prompt.embeds
        seq.emit(TextDelta(req.text, seq.reply.spoken))

    def talker_prompt(self, model, seq: Sequence) -> torch.Tensor:
        """Built at admission; for live text once the text it holds has settled."""
        if seq.talker_prompt is None:
            voice, xvector, codes = seq.voice
            seq.talker_prompt = self.prompts.streaming_prompt(seq.reply.prompt_rows(), voice, seq.req.instruct,
                                                              xvector, codes)
        return seq.talker_prompt

    def read_text(self, seq: Sequence) -> None:
        """A live request's new text (engine/text_feed.py): the tokens it settles, sent as a TextDelta."""
        new = seq.reply.refresh()
        if new:
            seq.emit(TextDelta(self.prompts.tokenizer.decode(new), new))
        if seq.reply.done and not seq.prompt_ids:  # the text has just ended: the prompt's ids, as whole text's
            seq.prompt_ids = self.prompts.tokenize(assistant_text(seq.reply.text))

    def text_inputs(self, seqs: list[Sequence]) -> torch.Tensor:
        return torch.cat([s.reply.step(len(s.codes) - 1) for s in seqs])
