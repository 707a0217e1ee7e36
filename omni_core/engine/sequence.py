"""`Sequence`: one request inside the engine, as plain state.

Everything the request owns: its KV caches (thinker, talker), its random generators, its
reply so far, its codec stream, its codes and audio, its timings and its event queue.
Nothing is shared with the requests beside it, so a request makes the codes it makes
alone.

Each part has one writer, and every writer but the caller's runs in the engine's thread
(a codec process's audio too: its receiving thread only queues it, engine/codec_stream.py):

  the caller's thread       req, overlap (made before it is handed over), submitted_at (set as it is
    (pipeline.py, loop.py     handed to the engine), cancel (set), frames_read (Stream: frames read);
    `submit`, stream.py)      it reads `events` and nothing else writes them but `emit`
  the scheduler             admitted_at, paused_since, stats.warnings of a stop
  admission (Runner.admit,  prompt_ids, reply (made), builder, max_text_tokens, thinker_cache and
    the family adapter)       thinker_todo (chat), talker_prompt (Qwen3-TTS), decoder (the codec stream)
  the runner                the models' state as they advance: the reply's tokens, last_token, shown,
                              thinker_cache (dropped when the reply ends), talker_cache, the todos (each
                              prefill takes its piece), hidden (after the talker's prompt or a talker step;
                              emptied once its frame is made: `frame_made`), history, the generators'
                              states, stats.cuda_graph
  the guard (guard.py)      spent, step_spent (each call's seconds; reset as a step begins)
  output.py                 the frame's results (codes, probs, top_codes, top_probs, batches, mismatches,
                              last_cb0, last_embeds, pending), the audio (chunks_sent, audio, codec_error,
                              spent["codec"]: the codec's own seconds as its audio comes back), the end
                              (stats.stopped, the result's stats; `release`: the caches and the stream
                              let go, finished)

score.py drives a sequence of its own (never handed to the scheduler) through the runner and writes its
frame fields itself, in the engine's thread between steps.
"""

from __future__ import annotations

import queue
import threading
import time

import torch

from omni_core.events import Stats
from omni_core.models.qwen3_omni.prompt import TextSteps
from omni_core.models.sampling import SamplingConfig
from omni_core.request import MAX_FRAMES, SpeechRequest

STAGES = ("thinker", "talker", "predictor", "codec")


class Sequence:
    def __init__(self, request: SpeechRequest, warnings: list[str], device: torch.device, dtype: torch.dtype,
                 cancel=None, overlap: bool = True, top_p_of_top_k: bool = False):
        self.req = request
        self.overlap = overlap  # False: the thinker writes the whole reply before the talker starts
        self.cancel = cancel if cancel is not None else threading.Event()
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.finished = False
        self.frames_read = 0  # Frame events the caller has taken (the caller's thread writes it, the scheduler reads)
        self.paused_since: float | None = None  # when the reader fell too far behind; None: reading
        # time
        self.submitted_at = time.perf_counter()  # set again when it is handed to the engine
        self.admitted_at: float | None = None  # when it got a batch slot: the time budget counts from here
        self.spent = dict.fromkeys(STAGES, 0.0)  # seconds per stage: the calls this request took part in
        self.step_spent = dict.fromkeys(STAGES, 0.0)  # the same, in the current step (Frame.talker_ms, ...)
        self.stats = Stats(device=str(device), dtype=str(dtype).replace("torch.", ""),
                           predictor=request.predictor, warnings=list(warnings))
        # sampling: each stage its own generator
        seed = request.seed
        self.sampling = SamplingConfig.of(request, top_p_of_top_k)  # the thinker's and the talker's (the predictor: its own)
        self.gen_thinker = torch.Generator(device).manual_seed(seed + 1)
        self.gen_talker = torch.Generator(device).manual_seed(seed)
        # Both predictors draw from equal streams, so compare mode compares like with like.
        self.gen_predictor = {k: torch.Generator(device).manual_seed(seed + 2) for k in ("reprefill", "kv")}
        # text: the thinker's prompt and the reply, as the talker reads it
        self.prompt_ids: list[int] = []
        self.reply = TextSteps(None)  # admission makes the real one
        self.feed = None  # TextFeed: the text is still being written (Pipeline.stream_text); None: all given
        self.voice = None  # live text: (Voice, x-vector, ICL reference codes) for the prompt its text completes
        self.text_wait_since: float | None = None  # live text: when the talker caught up with the text
        self.builder = None  # TalkerPromptBuilder, made at admission
        self.max_text_tokens: int | None = None
        self.last_token: torch.Tensor | None = None  # [1]: the thinker's last reply token
        self.shown = 0  # reply tokens already sent as TextDelta
        # model state
        self.thinker_cache = self.talker_cache = None
        # prompt positions not yet prefilled: thinker ids [1, n], talker embeddings [1, n, C] (None: all done)
        self.thinker_todo = self.talker_todo = None
        self.talker_prompt: torch.Tensor | None = None  # [1, L, C]; Qwen3-TTS builds it at admission
        self.hidden: torch.Tensor | None = None  # [1, C]: the talker's last hidden state, which CB0 is read from
        self.history = torch.empty(1, 0, dtype=torch.long, device=device)  # CB0s so far
        self.last_cb0: torch.Tensor | None = None  # [1]
        self.last_embeds: torch.Tensor | None = None  # [1, 15, C]: the last frame's CB1..15 embeddings
        self.decoder = None  # CodecStream (engine/codec_stream.py): this request's incremental codec decode
        # output
        self.codes, self.probs, self.top_codes, self.top_probs = [], [], [], []  # per frame
        self.batches: list[int] = []  # requests in the step that made each frame
        self.audio, self.pending = [], []  # audio chunks; frames not yet decoded
        self.chunks_sent = 0  # chunks handed to the codec (their audio may still be coming: codec_process.py)
        self.codec_error: Exception | None = None  # a chunk failed in the codec process: the step fails the row
        self.mismatches = 0

    def wants_token(self) -> bool:
        """Chat mode: the next talker step reads text step k-1 (k = frames made), which needs
        reply tokens r0..r(k+1), or the reply's end."""
        if not self.thinking:
            return False
        return not self.overlap or len(self.reply.ids) < len(self.codes) + 2

    @property
    def can_talk(self) -> bool:
        """The talker's prompt can be built (it needs r0, and whether r0 is the last token)."""
        return self.reply.done if not self.overlap else self.reply.can_prompt

    @property
    def awaiting_text(self) -> bool:
        """Live text: the next frame needs text the caller has not sent (or settled) yet."""
        if self.feed is None or self.reply.done:
            return False
        if self.talker_cache is None:
            return not self.reply.can_prompt
        return self.talking and bool(self.codes) and self.hidden is None and not self.reply.ready(len(self.codes) - 1)

    def count_text_wait(self, now: float) -> None:
        """Start or stop the clock of the talker's wait for the caller's text (Stats.text_wait_s)."""
        if self.awaiting_text:
            self.text_wait_since = self.text_wait_since or now
        elif self.text_wait_since is not None:
            self.stats.text_wait_s += now - self.text_wait_since
            self.text_wait_since = None

    @property
    def talking(self) -> bool:
        """The talker's prompt is prefilled: each step makes a frame."""
        return self.talker_cache is not None and self.talker_todo is None

    @property
    def thinking(self) -> bool:
        """Chat mode: the thinker's prompt is prefilled and the reply is still being written."""
        return self.thinker_cache is not None and self.thinker_todo is None and not self.reply.done

    @property
    def decoding(self) -> bool:
        """A step would advance it past its prompts (a frame, or a reply token): what a prefill stalls."""
        return self.talking or self.thinking

    def max_frames(self) -> int:
        if self.req.max_frames is not None:
            return self.req.max_frames
        # Scales with the text; known once the reply is (the talker lags the thinker by a step).
        return default_frames(len(self.reply.ids)) if self.reply.done else MAX_FRAMES

    @property
    def unread(self) -> int:
        """Frames made that the caller has not read yet."""
        return len(self.codes) - self.frames_read

    @property
    def paused(self) -> bool:
        return self.paused_since is not None

    def emit(self, event) -> None:
        self.events.put(event)

    def release(self) -> None:
        """Let go of the caches and the codec stream, then mark the request over."""
        self.thinker_cache = self.talker_cache = self.decoder = self.hidden = None
        self.thinker_todo = self.talker_todo = None
        self.last_embeds = self.talker_prompt = None
        self.builder = self.reply.builder = None  # it holds the thinker and the talker
        self.finished = True


def default_text_tokens(prompt_len: int) -> int:
    """Chat reply length when none is given: random weights never emit EOS."""
    return max(16, min(256, prompt_len))


def default_frames(num_text_tokens: int) -> int:
    """Frames when none are given: about 4 frames (320 ms) per text token, plus a tail."""
    return min(MAX_FRAMES, 8 + 4 * num_text_tokens)
