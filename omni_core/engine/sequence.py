"""One request inside the engine: `Sequence` holds everything the request owns.

Its KV caches (thinker, talker), its random generators, its reply so far, its codec
stream, its codes and audio, its timings and its event queue. Nothing is shared with
the requests beside it, so a request makes the codes it makes alone. The scheduler
(scheduler.py) calls these methods from its one thread; the caller reads `events`.
"""

from __future__ import annotations

import queue
import threading
import time

import numpy as np
import torch

from ..events import AudioChunk, Done, Frame, Result, Stats, TextDelta
from ..request import MAX_FRAMES, SpeechRequest
from ..sampling import (TOP_K_ALTERNATIVES, SamplingConfig, choose, choose_with_alternatives, repetition_penalty,
                        suppress)
from ..streaming_codec import StreamingDecoder
from ..talker_prompt import TalkerPromptBuilder, TextSteps
from .parts import Parts

STAGES = ("thinker", "talker", "predictor", "codec")
MAX_CHUNK_FRAMES = 8  # audio chunks of 1, 2, 4, 8, 8, ... frames: the first as soon as one frame
# is decoded, later ones larger (fewer codec calls; 640 ms of audio each).


class Failed:
    """What a request's queue gets instead of Done when it fails; the stream raises `error`."""

    def __init__(self, error: BaseException):
        self.error = error


class Sequence:
    def __init__(self, parts: Parts, request: SpeechRequest, warnings: list[str], cancel=None,
                 overlap: bool = True):
        self.parts, self.req = parts, request
        self.overlap = overlap  # False: the thinker writes the whole reply before the talker starts
        self.cancel = cancel if cancel is not None else threading.Event()
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.stats = Stats(device=str(parts.device), dtype=str(parts.dtype).replace("torch.", ""),
                           predictor=request.predictor, warnings=list(warnings))
        self.spent = dict.fromkeys(STAGES, 0.0)  # seconds per stage: the calls this request took part in
        self.step_spent = dict.fromkeys(STAGES, 0.0)  # the same, in the current step (Frame.talker_ms, ...)
        self.codes, self.probs, self.audio, self.pending = [], [], [], []  # pending: rows not yet decoded
        self.top_codes, self.top_probs = [], []  # per frame: [16, 5] alternatives and their probabilities
        self.batches: list[int] = []  # requests in the step that made each frame
        self.mismatches = 0
        self.shown = 0  # reply tokens already sent as TextDelta
        self.finished = False
        self.t0 = time.perf_counter()  # reset when the engine takes the request in
        seed = request.seed
        self.sampling = SamplingConfig.of(request)
        self.gen_thinker = torch.Generator(parts.device).manual_seed(seed + 1)
        self.gen_talker = torch.Generator(parts.device).manual_seed(seed)
        # Both predictors draw from equal streams, so compare mode compares like with like.
        self.gen_predictor = {k: torch.Generator(parts.device).manual_seed(seed + 2) for k in ("reprefill", "kv")}
        self.prompt_ids: list[int] = []
        self.steps = TextSteps(None)  # the reply (admit() makes the real one)
        self.thinker_cache = self.talker_cache = self.codec = None
        self.hidden = None  # [1, C]: the talker's last hidden state, which CB0 is read from
        self.history = torch.empty(1, 0, dtype=torch.long, device=parts.device)  # CB0s so far

    # ---- admission: the prompts, and the thinker's prefill in chat mode ---------------------

    def admit(self) -> None:
        p, req = self.parts, self.req
        self.t0 = time.perf_counter()
        self.prompt_ids = p.chat_prompt(req.text)
        self.builder = TalkerPromptBuilder(p.config, p.thinker, p.talker)
        self.codec = StreamingDecoder(p.codec)
        if req.mode == "speak":
            # The reply is the text. For text-only input the talker reads only the thinker's
            # (projected) token embeddings, never its hidden states (as HF): no thinker forward.
            reply = p.tokenizer(req.text, add_special_tokens=False)["input_ids"] + [p.im_end]
            self.steps = TextSteps(self.builder, reply, done=True)
            self.emit(TextDelta(req.text, self.steps.spoken))
            return
        self.steps = TextSteps(self.builder)
        self.max_text_tokens = req.max_text_tokens or default_text_tokens(len(self.prompt_ids))
        self.thinker_cache = p.thinker.model.new_cache(1, len(self.prompt_ids) + self.max_text_tokens,
                                                       like=p.thinker.lm_head.weight)
        self.take_token(p.thinker(torch.tensor([self.prompt_ids], device=p.device), self.thinker_cache)[:, -1])

    # ---- the thinker, one token per step ----------------------------------------------------

    def wants_token(self) -> bool:
        """Chat mode: the next talker step reads text step k-1 (k = frames made), which needs
        reply tokens r0..r(k+1), or the reply's end."""
        if self.thinker_cache is None or self.steps.done:
            return False
        return not self.overlap or len(self.steps.ids) < len(self.codes) + 2

    @property
    def can_talk(self) -> bool:
        """The talker's prompt can be built (it needs r0, and whether r0 is the last token)."""
        return self.steps.done if not self.overlap else self.steps.can_prompt

    def take_token(self, logits: torch.Tensor) -> None:
        """logits [1, V] → the reply's next token (HF: the thinker never feeds back its last)."""
        token, _ = choose(logits, self.sampling, self.gen_thinker)
        self.steps.add(int(token))
        self.last_token = token
        if int(token) == self.parts.im_end or len(self.steps.ids) == self.max_text_tokens:
            self.steps.finish()
            self.thinker_cache = None
        new = self.steps.spoken[self.shown:]
        if new:
            self.shown += len(new)
            self.emit(TextDelta(self.parts.tokenizer.decode(new, skip_special_tokens=True), new))

    # ---- the talker ---------------------------------------------------------------------------

    @property
    def talking(self) -> bool:
        return self.talker_cache is not None

    def start_talker(self) -> None:
        """The talker's prompt and its prefill (once the reply's first tokens are known)."""
        p = self.parts
        prompt = self.builder.prompt(self.prompt_ids, self.steps.first_spoken, p.speaker_id(self.req.speaker))
        self.talker_cache = p.talker.model.new_cache(1, prompt.shape[1] + 64, like=prompt)
        self.hidden = p.talker.model(prompt, self.talker_cache, 0)[:, -1]

    def next_input(self) -> torch.Tensor:
        """The talker's next input [1, 1, C]: the last frame's summed embedding + text step k-1."""
        return self.parts.talker.embed_codes(self.last_cb0, self.last_embeds) + self.steps[len(self.codes) - 1]

    def next_cb0(self, logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """logits [1, V] from the codec head → CB0 [1], its probability [1], and the top-5 ids [1, 5] and
        probabilities [1, 5] of the same processed distribution (HF's processing)."""
        logits = suppress(repetition_penalty(logits, self.history, self.req.repetition_penalty),
                          self.parts.suppress_mask)
        chosen = choose_with_alternatives(logits, self.sampling, self.gen_talker)
        self.history = torch.cat([self.history, chosen[0][:, None]], dim=1)
        return chosen

    # ---- output --------------------------------------------------------------------------------

    def add_frame(self, cb0, p0, top0, top0_probs, predicted, other, talker_ms: float, predictor_ms: float,
                  batch: int) -> None:
        """One frame: CB0 [1] with probability p0 [1] and alternatives top0, top0_probs [1, 5]; predicted =
        (codes [1, 15], probs [1, 15], embeds [1, 15, C], top codes [1, 15, 5], top probs [1, 15, 5]);
        other: the KV predictor's codes [1, 15] in compare mode."""
        codes, probs, embeds, top, top_probs = predicted
        row = torch.cat([cb0, codes[0]]).cpu().numpy()
        frame = Frame(len(self.codes), row, torch.cat([p0, probs[0]]).float().cpu().numpy(), talker_ms,
                      predictor_ms, batch=batch, top_codes=torch.cat([top0, top[0]]).cpu().numpy(),
                      top_probs=torch.cat([top0_probs, top_probs[0]]).float().cpu().numpy())
        if other is not None:
            frame.other_codes = np.concatenate([row[:1], other[0].cpu().numpy()])
            frame.mismatch = frame.other_codes != row
            self.mismatches += int(frame.mismatch.sum())
        self.codes.append(row), self.probs.append(frame.probs), self.batches.append(batch)
        self.top_codes.append(frame.top_codes), self.top_probs.append(frame.top_probs)
        self.last_cb0, self.last_embeds = cb0, embeds
        self.emit(frame)
        self.pending.append(row)
        if len(self.pending) >= min(2 ** len(self.audio), MAX_CHUNK_FRAMES):
            self.decode_pending()

    def decode_pending(self) -> None:
        if not self.pending or self.codec is None:
            return
        t = time.perf_counter()
        codes = torch.from_numpy(np.stack(self.pending).T)[None].to(self.parts.device)  # [1, 16, n]
        wav = self.codec.push(codes)[0, 0].float().cpu().numpy()
        self.spent["codec"] += time.perf_counter() - t
        first = len(self.codes) - len(self.pending)
        self.pending = []
        self.audio.append(wav)
        if self.stats.first_audio_s is None:
            self.stats.first_audio_s = time.perf_counter() - self.t0
        self.emit(AudioChunk(wav, self.parts.config.sample_rate, first))

    def max_frames(self) -> int:
        if self.req.max_frames is not None:
            return self.req.max_frames
        # Scales with the text; known once the reply is (the talker lags the thinker by a step).
        return default_frames(len(self.steps.ids)) if self.steps.done else MAX_FRAMES

    def interrupted(self, time_budget_s: float | None) -> str | None:
        if self.cancel.is_set():
            return "cancelled"
        if time_budget_s and time.perf_counter() - self.t0 > time_budget_s:
            self.stats.warnings.append(f"stopped after the {time_budget_s:g} s time budget")
            return "time_budget"
        return None

    def emit(self, event) -> None:
        self.events.put(event)

    # ---- the end ------------------------------------------------------------------------------

    def finish(self, reason: str) -> None:
        """Decode what is left, send Done, and let go of the caches."""
        self.stats.stopped = reason
        self.decode_pending()
        self.emit(Done(self.result()))
        self.release()

    def fail(self, error: BaseException) -> None:
        self.emit(Failed(error))
        self.release()

    def release(self) -> None:
        self.finished = True
        self.thinker_cache = self.talker_cache = self.codec = self.hidden = None
        self.last_embeds = None

    def result(self) -> Result:
        s, cfg, G = self.stats, self.parts.config, self.parts.config.num_code_groups
        s.thinker_s, s.talker_s, s.predictor_s, s.codec_s = (self.spent[k] for k in STAGES)
        s.total_s, s.frames = time.perf_counter() - self.t0, len(self.codes)
        audio = np.concatenate(self.audio) if self.audio else np.zeros(0, np.float32)
        s.audio_s = len(audio) / cfg.sample_rate
        s.rtf = s.total_s / s.audio_s if s.audio_s else None
        s.predictor_ms_per_frame = 1000 * s.predictor_s / s.frames if s.frames else None
        s.batch_max = max(self.batches, default=0)
        s.batch_mean = float(np.mean(self.batches)) if self.batches else None
        if self.req.predictor == "compare":
            s.mismatches = self.mismatches
        spoken = self.steps.spoken
        s.text_tokens = len(spoken)
        text = self.req.text if self.req.mode == "speak" else self.parts.tokenizer.decode(
            spoken, skip_special_tokens=True)
        codes = np.stack(self.codes) if self.codes else np.zeros((0, G), np.int64)
        probs = np.stack(self.probs) if self.probs else np.zeros((0, G), np.float32)
        k = TOP_K_ALTERNATIVES
        top_codes = np.stack(self.top_codes) if self.top_codes else np.zeros((0, G, k), np.int64)
        top_probs = np.stack(self.top_probs) if self.top_probs else np.zeros((0, G, k), np.float32)
        return Result(codes.astype(np.int64), audio.astype(np.float32), text, list(self.prompt_ids), spoken, s,
                      probs, cfg.sample_rate, top_codes.astype(np.int64), top_probs.astype(np.float32))


def default_text_tokens(prompt_len: int) -> int:
    """Chat reply length when none is given: random weights never emit EOS."""
    return max(16, min(256, prompt_len))


def default_frames(num_text_tokens: int) -> int:
    """Frames when none are given: about 4 frames (320 ms) per text token, plus a tail."""
    return min(MAX_FRAMES, 8 + 4 * num_text_tokens)
