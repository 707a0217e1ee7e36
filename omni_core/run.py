"""One request, start to finish: thinker → talker → code predictor → codec.

A `SpeechRun` owns all the state of its request (KV caches, random generators,
codec stream, timings); nothing is shared with other requests, so a request run
beside others gives exactly the codes it gives alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import torch

from .events import AudioChunk, Done, Frame, Result, Stats, TextDelta
from .request import MAX_FRAMES, SpeechRequest
from .sampling import SamplingConfig
from .streaming_codec import StreamingDecoder
from .talker_loop import TalkerLoop
from .talker_prompt import TalkerPromptBuilder, TextSteps

MAX_CHUNK_FRAMES = 8  # audio chunks of 1, 2, 4, 8, 8, ... frames: the first as soon as one frame
# is decoded, later ones larger (fewer codec calls; 640 ms of audio each).
STAGES = ("thinker", "talker", "predictor", "codec")


class SpeechRun:
    def __init__(self, pipe, request: SpeechRequest, warnings: list[str], cancel=None, overlap: bool = True):
        self.pipe, self.req, self.cancel, self.overlap = pipe, request, cancel, overlap
        self.cfg = pipe.config
        self.spent = dict.fromkeys(STAGES, 0.0)  # seconds per stage
        self.stats = Stats(device=str(pipe.device), dtype=str(pipe.dtype).replace("torch.", ""),
                           predictor=request.predictor, warnings=list(warnings))
        self.codes, self.probs, self.audio = [], [], []
        self.shown = 0  # reply tokens already sent as TextDelta

    def timed(self, stage: str, fn, *args):
        t = time.perf_counter()
        out = fn(*args)
        self.spent[stage] += time.perf_counter() - t
        return out

    # ---- the run ----------------------------------------------------------------------------

    def events(self) -> Iterator:
        self.t0 = time.perf_counter()
        prompt_ids, reply = self._thinker()
        builder = TalkerPromptBuilder(self.cfg, self.pipe.thinker, self.pipe.talker)
        steps = TextSteps(builder, self._timed_reply(reply))
        if not self.overlap or self.req.mode == "speak":  # sequential; speak mode knows its reply
            while self.timed("thinker", steps.pull):
                pass
        if self.req.mode == "speak":
            yield TextDelta(self.req.text, steps.spoken)
        yield from self._new_text(steps)
        speaker = self.pipe.speaker_id(self.req.speaker)
        prompt = self.timed("talker", builder.prompt, prompt_ids, steps.first_spoken, speaker)
        yield from self._frames(TalkerLoop(self.pipe, self.req, prompt, self.req.seed), steps)
        yield Done(self._result(prompt_ids, steps))

    def _thinker(self) -> tuple[list[int], Iterator[int]]:
        """The thinker's prompt ids and an iterator over its reply ids (lazy in chat mode)."""
        pipe, req = self.pipe, self.req
        prompt_ids = pipe.chat_prompt(req.text)
        im_end = self.cfg.token_ids["im_end"]
        if req.mode == "speak":
            reply_ids = pipe.tokenizer(req.text, add_special_tokens=False)["input_ids"] + [im_end]
            # Teacher-forced: the thinker reads the reply as if it had written it. For text-only
            # input the talker then reads only the (projected) token embeddings, as in HF; the
            # hidden states matter for audio/image/video positions, which this path has none of.
            self.timed("thinker", pipe.thinker, torch.tensor([prompt_ids + reply_ids], device=pipe.device))
            return prompt_ids, iter(reply_ids)
        max_tokens = req.max_text_tokens or default_text_tokens(len(prompt_ids))
        sampling = SamplingConfig.of(req)
        generator = torch.Generator(pipe.device).manual_seed(req.seed + 1)
        prompt = torch.tensor([prompt_ids], device=pipe.device)
        return prompt_ids, pipe.thinker.generate(prompt, max_tokens, im_end, sampling, generator)

    def _timed_reply(self, reply: Iterator[int]) -> Iterator[int]:
        while (token := self.timed("thinker", next, reply, None)) is not None:
            yield token

    def _new_text(self, steps: TextSteps) -> Iterator[TextDelta]:
        """Chat mode: the reply tokens the talker now reads, as they come."""
        new = steps.spoken[self.shown:]
        if self.req.mode == "chat" and new:
            self.shown += len(new)
            yield TextDelta(self.pipe.tokenizer.decode(new, skip_special_tokens=True), new)

    def _frames(self, loop: TalkerLoop, steps: TextSteps) -> Iterator:
        """Frame by frame until codec EOS, the frame limit, Stop, or the time budget."""
        codec, pending, mismatches = StreamingDecoder(self.pipe.codec), [], 0
        self.spent["talker"] += loop.forward_ms / 1000
        self.stats.cuda_graph = loop.use_graph
        for step in range(MAX_FRAMES):
            if (reason := self._interrupted()) is not None:
                self.stats.stopped = reason
                break
            frame, cb0, embeds = self._frame(loop)
            if frame is None:
                self.stats.stopped = "eos"
                break
            mismatches += int(frame.mismatch.sum()) if frame.mismatch is not None else 0
            yield frame
            pending.append(frame.codes)
            if len(pending) >= min(2 ** len(self.audio), MAX_CHUNK_FRAMES):
                yield from self._audio(codec, pending)
                pending = []
            if len(self.codes) >= self._max_frames(steps):
                self.stats.stopped = "max_frames"
                break
            text_step = self.timed("thinker", steps.__getitem__, step)
            yield from self._new_text(steps)
            self.timed("talker", loop.advance, cb0, embeds, text_step)
        if pending:
            yield from self._audio(codec, pending)
        if self.req.predictor == "compare":
            self.stats.mismatches = mismatches

    def _frame(self, loop: TalkerLoop):
        """One frame: CB0 from the talker, CB1..CB15 from the predictor; (None, ...) at codec EOS."""
        talker_ms = loop.forward_ms
        cb0, p0 = self.timed("talker", loop.next_cb0)
        if int(cb0) == self.cfg.codec_ids["codec_eos_token_id"]:
            return None, cb0, None
        t = time.perf_counter()
        (codes, probs, embeds), other = loop.predict(cb0)
        predictor_ms = (time.perf_counter() - t) * 1000
        self.spent["predictor"] += predictor_ms / 1000
        row = torch.cat([cb0, codes[0]]).cpu().numpy()
        frame = Frame(len(self.codes), row, torch.cat([p0, probs[0]]).float().cpu().numpy(),
                      talker_ms, predictor_ms)
        if other is not None:
            frame.other_codes = np.concatenate([row[:1], other[0].cpu().numpy()])
            frame.mismatch = frame.other_codes != row
        self.codes.append(row), self.probs.append(frame.probs)
        return frame, cb0, embeds

    def _interrupted(self) -> str | None:
        if self.cancel is not None and self.cancel.is_set():
            return "cancelled"
        budget = self.pipe.time_budget_s
        if budget and time.perf_counter() - self.t0 > budget:
            self.stats.warnings.append(f"stopped after the {budget:g} s time budget")
            return "time_budget"
        return None

    def _max_frames(self, steps: TextSteps) -> int:
        if self.req.max_frames is not None:
            return self.req.max_frames
        # Scales with the text; known once the reply is (the talker lags the thinker by a step).
        return default_frames(len(steps.ids)) if steps.done else MAX_FRAMES

    def _audio(self, codec: StreamingDecoder, rows: list[np.ndarray]) -> Iterator[AudioChunk]:
        codes = torch.from_numpy(np.stack(rows).T)[None].to(self.pipe.device)  # [1, 16, n]
        wav = self.timed("codec", codec.push, codes)[0, 0].float().cpu().numpy()
        self.audio.append(wav)
        if self.stats.first_audio_s is None:
            self.stats.first_audio_s = time.perf_counter() - self.t0
        yield AudioChunk(wav, self.cfg.sample_rate, len(self.codes) - len(rows))

    def _result(self, prompt_ids: list[int], steps: TextSteps) -> Result:
        s, cfg, G = self.stats, self.cfg, self.cfg.num_code_groups
        s.thinker_s, s.talker_s, s.predictor_s, s.codec_s = (self.spent[k] for k in STAGES)
        s.total_s, s.frames = time.perf_counter() - self.t0, len(self.codes)
        audio = np.concatenate(self.audio) if self.audio else np.zeros(0, np.float32)
        s.audio_s = len(audio) / cfg.sample_rate
        s.rtf = s.total_s / s.audio_s if s.audio_s else None
        s.predictor_ms_per_frame = 1000 * s.predictor_s / s.frames if s.frames else None
        spoken = steps.spoken
        s.text_tokens = len(spoken)
        text = self.req.text if self.req.mode == "speak" else self.pipe.tokenizer.decode(spoken,
                                                                                          skip_special_tokens=True)
        codes = np.stack(self.codes) if self.codes else np.zeros((0, G), np.int64)
        probs = np.stack(self.probs) if self.probs else np.zeros((0, G), np.float32)
        return Result(codes.astype(np.int64), audio.astype(np.float32), text, list(prompt_ids), spoken, s,
                      probs, cfg.sample_rate)


def default_text_tokens(prompt_len: int) -> int:
    """Chat reply length when none is given: random weights never emit EOS."""
    return max(16, min(256, prompt_len))


def default_frames(num_text_tokens: int) -> int:
    """Frames when none are given: about 4 frames (320 ms) per text token, plus a tail."""
    return min(MAX_FRAMES, 8 + 4 * num_text_tokens)
