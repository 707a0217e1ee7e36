"""One request, start to finish: thinker → talker → code predictor → codec.

A `SpeechRun` owns all the state of its request (KV caches, random generators,
codec stream, timings); nothing is shared with other requests, so a request run
beside others gives exactly the codes it gives alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from .code_predictor import GREEDY, PREDICTOR_SAMPLING, predict_kv, predict_reprefill
from .events import AudioChunk, Done, Frame, Result, Stats, TextDelta
from .request import SpeechRequest
from .streaming_codec import StreamingDecoder
from .sampling import SamplingConfig, choose, repetition_penalty, suppress
from .talker_prompt import TalkerPromptBuilder, TextSteps

MAX_CHUNK_FRAMES = 8  # audio chunks of 1, 2, 4, 8, 8, ... frames: the first as soon as one frame
# is decoded, later ones larger (fewer codec calls; 640 ms of audio each).


@dataclass
class Clock:
    """Seconds spent per stage."""

    spent: dict[str, float] = field(default_factory=lambda: dict(thinker=0.0, talker=0.0, predictor=0.0, codec=0.0))

    def time(self, stage: str, fn, *args, **kwargs):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        self.spent[stage] += time.perf_counter() - t
        return out


class SpeechRun:
    def __init__(self, pipe, request: SpeechRequest, warnings: list[str], cancel=None, overlap: bool = True):
        self.pipe, self.req, self.cancel, self.overlap = pipe, request, cancel, overlap
        self.cfg = pipe.config
        self.clock = Clock()
        self.stats = Stats(device=str(pipe.device), dtype=str(pipe.dtype).replace("torch.", ""),
                           predictor=request.predictor, warnings=list(warnings))
        dev = pipe.device
        seed = request.seed
        # Separate streams per consumer; both predictors get the same stream in compare mode.
        self.gen_talker = torch.Generator(dev).manual_seed(seed)
        self.gen_thinker = torch.Generator(dev).manual_seed(seed + 1)
        self.gen_predictor = {name: torch.Generator(dev).manual_seed(seed + 2) for name in ("reprefill", "kv")}
        self.talker_sampling = SamplingConfig(request.do_sample, request.temperature, request.top_k, request.top_p)
        self.predictor_sampling = PREDICTOR_SAMPLING if request.do_sample else GREEDY
        self.predictors = self._predictors()

    # ---- the stages -------------------------------------------------------------------------

    def events(self) -> Iterator:
        t0 = time.perf_counter()
        self.t0 = t0
        prompt_ids, reply, text_events = self._thinker()
        yield from text_events()
        builder = TalkerPromptBuilder(self.cfg, self.pipe.thinker, self.pipe.talker)
        steps = TextSteps(builder, self._timed(reply))
        if not self.overlap or self.req.mode == "speak":  # speak mode: the whole reply is known
            while self.clock.time("thinker", steps.pull):
                pass
        yield from self._text_so_far(steps)
        prompt = self.clock.time("talker", builder.prompt, prompt_ids, steps.first_spoken, self.pipe.speaker_id(self.req.speaker))
        yield from self._frames(prompt, steps)
        result = self._result(prompt_ids, steps, time.perf_counter() - t0)
        yield Done(result)

    def _thinker(self):
        """prompt ids, an iterator over reply ids, and the TextDelta events known up front."""
        pipe, req = self.pipe, self.req
        prompt_ids = pipe.chat_prompt(req.text)
        self.prompt_ids = prompt_ids
        im_end = self.cfg.token_ids["im_end"]
        if req.mode == "speak":
            reply_ids = pipe.tokenizer(req.text, add_special_tokens=False)["input_ids"] + [im_end]
            # Teacher-forced: the thinker reads the reply as if it had written it.
            ids = torch.tensor([prompt_ids + reply_ids], device=pipe.device)
            self.clock.time("thinker", pipe.thinker, ids)
            return prompt_ids, iter(reply_ids), lambda: iter([TextDelta(req.text, reply_ids[:-1])])
        self.max_text_tokens = req.max_text_tokens or default_text_tokens(len(prompt_ids))
        sampling = self.talker_sampling if req.do_sample else SamplingConfig()
        reply = pipe.thinker.generate(torch.tensor([prompt_ids], device=pipe.device), self.max_text_tokens,
                                      im_end, sampling, self.gen_thinker)
        return prompt_ids, reply, lambda: iter(())

    def _timed(self, it: Iterator[int]) -> Iterator[int]:
        while True:
            token = self.clock.time("thinker", next, it, None)
            if token is None:
                return
            yield token

    def _text_so_far(self, steps: TextSteps):
        """TextDelta for reply tokens not yet shown (chat mode)."""
        if self.req.mode != "chat":
            return
        shown = getattr(self, "_shown", 0)
        new = steps.spoken[shown:]
        self._shown = shown + len(new)
        if new:
            yield TextDelta(self.pipe.tokenizer.decode(new, skip_special_tokens=True), new)

    def _frames(self, prompt: torch.Tensor, steps: TextSteps) -> Iterator:
        pipe, req, cfg = self.pipe, self.req, self.cfg
        talker = pipe.talker
        eos = cfg.codec_ids["codec_eos_token_id"]
        cache = talker.model.new_cache(1, prompt.shape[1] + 64, like=prompt)
        hidden = self.clock.time("talker", self._talker_forward, prompt, cache)
        history = torch.empty(1, 0, dtype=torch.long, device=pipe.device)
        self.codes, self.probs, self.audio = [], [], []
        codec = StreamingDecoder(pipe.codec)
        pending, mismatches, self.stats.stopped = [], 0, "max_frames"
        max_frames = req.max_frames
        step = 0
        while True:
            if self.cancel is not None and self.cancel.is_set():
                self.stats.stopped = "cancelled"
                break
            if self.pipe.time_budget_s and time.perf_counter() - self.t0 > self.pipe.time_budget_s:
                self.stats.stopped = "time_budget"
                self.stats.warnings.append(f"stopped after the {self.pipe.time_budget_s:g} s time budget")
                break
            t = time.perf_counter()
            logits = talker.codec_head(hidden[:, -1])
            logits = suppress(repetition_penalty(logits, history, req.repetition_penalty), pipe.suppress_mask)
            cb0, p0 = choose(logits, self.talker_sampling, self.gen_talker)
            talker_ms = (time.perf_counter() - t) * 1000
            self.clock.spent["talker"] += talker_ms / 1000
            if int(cb0) == eos:
                self.stats.stopped = "eos"
                break
            history = torch.cat([history, cb0[:, None]], dim=1)
            t = time.perf_counter()
            e0 = talker.model.codec_embedding(cb0)
            (codes, probs, embeds), other = self._predict(hidden[:, -1], e0)
            predictor_ms = (time.perf_counter() - t) * 1000
            self.clock.spent["predictor"] += predictor_ms / 1000
            row = torch.cat([cb0, codes[0]]).cpu().numpy()
            frame = Frame(len(self.codes), row, torch.cat([p0, probs[0]]).float().cpu().numpy(),
                          talker_ms, predictor_ms)
            if other is not None:
                frame.other_codes = np.concatenate([row[:1], other[0].cpu().numpy()])
                frame.mismatch = frame.other_codes != row
                mismatches += int(frame.mismatch.sum())
            self.codes.append(row), self.probs.append(frame.probs)
            yield frame
            pending.append(row)
            if max_frames is None and steps.done:
                max_frames = default_frames(len(steps.ids))
            if len(pending) >= min(2 ** len(self.audio), MAX_CHUNK_FRAMES):
                yield from self._audio(codec, pending)
                pending = []
            if max_frames is not None and len(self.codes) >= max_frames:
                break
            text_step = steps[step]
            yield from self._text_so_far(steps)
            if max_frames is None and steps.done:
                max_frames = default_frames(len(steps.ids))
            t = time.perf_counter()
            nxt = talker.embed_codes(cb0, embeds) + text_step
            hidden = self._talker_forward(nxt, cache)
            self.clock.spent["talker"] += time.perf_counter() - t
            step += 1
        if pending:
            yield from self._audio(codec, pending)
        if req.predictor == "compare":
            self.stats.mismatches = mismatches

    def _talker_forward(self, x: torch.Tensor, cache) -> torch.Tensor:
        with torch.no_grad():
            return self.pipe.talker.model(x, cache, start=cache.length)[0]

    def _predict(self, h: torch.Tensor, e0: torch.Tensor):
        """(codes, probs, embeds) of the main predictor, and the other's codes in compare mode."""
        main = self.predictors[0](h, e0)
        other = self.predictors[1](h, e0)[0] if len(self.predictors) > 1 else None
        return main, other

    def _predictors(self):
        pipe, name = self.pipe, self.req.predictor
        use_graph = pipe.device.type == "cuda" and self.req.cuda_graph is not False
        self.stats.cuda_graph = use_graph and name in ("reprefill", "compare")
        cp = pipe.talker.code_predictor

        def reprefill(h, e0):
            if self.stats.cuda_graph:
                return pipe.graph_predictor.run(h, e0, self.predictor_sampling, self.gen_predictor["reprefill"])
            return predict_reprefill(cp, h, e0, self.predictor_sampling, self.gen_predictor["reprefill"])

        def kv(h, e0):
            return predict_kv(cp, h, e0, self.predictor_sampling, self.gen_predictor["kv"])

        return {"reprefill": [reprefill], "kv": [kv], "compare": [reprefill, kv]}[name]

    def _audio(self, codec, rows: list[np.ndarray]):
        t = time.perf_counter()
        codes = torch.from_numpy(np.stack(rows).T)[None].to(self.pipe.device)  # [1, 16, n]
        wav = codec.push(codes)[0, 0].float().cpu().numpy()
        self.clock.spent["codec"] += time.perf_counter() - t
        self.audio.append(wav)
        if self.stats.first_audio_s is None:
            self.stats.first_audio_s = time.perf_counter() - self.t0
        yield AudioChunk(wav, self.cfg.sample_rate, len(self.codes) - len(rows))

    def _result(self, prompt_ids: list[int], steps: TextSteps, total: float) -> Result:
        s, cfg = self.stats, self.cfg
        s.thinker_s, s.talker_s = self.clock.spent["thinker"], self.clock.spent["talker"]
        s.predictor_s, s.codec_s = self.clock.spent["predictor"], self.clock.spent["codec"]
        s.total_s, s.frames = total, len(self.codes)
        audio = np.concatenate(self.audio) if self.audio else np.zeros(0, np.float32)
        s.audio_s = len(audio) / cfg.sample_rate
        s.rtf = total / s.audio_s if s.audio_s else None
        s.predictor_ms_per_frame = 1000 * s.predictor_s / s.frames if s.frames else None
        spoken = steps.spoken
        s.text_tokens = len(spoken)
        text = self.req.text if self.req.mode == "speak" else self.pipe.tokenizer.decode(spoken,
                                                                                          skip_special_tokens=True)
        codes = np.stack(self.codes) if self.codes else np.zeros((0, cfg.num_code_groups), np.int64)
        probs = np.stack(self.probs) if self.probs else np.zeros((0, cfg.num_code_groups), np.float32)
        return Result(codes.astype(np.int64), audio.astype(np.float32), text, list(prompt_ids), spoken, s, probs,
                      cfg.sample_rate)


def default_text_tokens(prompt_len: int) -> int:
    """Chat reply length when none is given: random weights never emit EOS."""
    return max(16, min(256, 2 * prompt_len))


def default_frames(num_text_tokens: int) -> int:
    """Frames when none are given: about 4 frames (320 ms) per text token, plus a tail."""
    from .request import MAX_FRAMES
    return min(MAX_FRAMES, 8 + 4 * num_text_tokens)
