"""`load_pipeline` and `Pipeline`: the public face of the engine.

A Pipeline holds the weights and the tokenizer, read-only after loading, and one
`Engine` (engine/loop.py) whose thread runs every request: each step advances
all running requests together, and each request keeps its own caches and generators.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import torch

from omni_core.audio import MAX_SECONDS, clean_audio
from omni_core.engine import Engine, Sequence, SpeechModel, Stream
from omni_core.engine.scheduler import MAX_UNREAD, STALL_S
from omni_core.engine.stream import TextStream
from omni_core.engine.text_feed import TextFeed
from omni_core.engine.threads import in_passing_thread
from omni_core.events import Done, Result
from omni_core.families import registry
from omni_core.fast.predictors import Predictors
from omni_core.loading.recipe import LoadedModel, load_model
from omni_core.pipeline_config import PipelineConfig
from omni_core.request import RequestError, SpeechRequest

log = logging.getLogger(__name__)


def load_pipeline(source: str | Path = "tiny", *, device: str = "auto", dtype: str = "auto",
                  threads: int | None = None, time_budget_s: float | None = None,
                  compile: bool = False, revision: str | None = None, force: bool = False,
                  max_batch: int = 16, max_waiting: int | None = None, max_unread: int = MAX_UNREAD,
                  stall_s: float = STALL_S, batch_invariant: bool = True, exact: bool = False,
                  codec_threads: int | None = None, codec_processes: int = 1,
                  quantize: str | None = None) -> "Pipeline":
    """'tiny' (the embedded random-weight model; 'tiny-b' is a second shape; 'tiny-tts' a Qwen3-TTS
    CustomVoice one), a checkpoint directory (Qwen3-Omni, or Qwen3-TTS: model_type qwen3_tts), or a hub
    id ('Qwen/Qwen3-Omni-30B-A3B-Instruct', 'Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice', fetched into the
    hub cache: loading/hub.py), or
    'random:qwen3-omni-30b-a3b[?layers=N]': the real speech path with random weights drawn on the
    device, no files (loading/random_weights.py; layers=N cuts the thinker and the talker).

    Every option is a field of `PipelineConfig` (pipeline_config.py), documented and checked there: a bad
    one raises ValueError before anything loads.
    Close the pipeline (`close()`, or `with load_pipeline(...) as pipe:`) to end its engine thread."""
    config = PipelineConfig(device=device, dtype=dtype, threads=threads, time_budget_s=time_budget_s,
                            compile=compile, revision=revision, force=force, max_batch=max_batch,
                            max_waiting=max_waiting, max_unread=max_unread, stall_s=stall_s,
                            batch_invariant=batch_invariant, exact=exact, codec_threads=codec_threads,
                            codec_processes=codec_processes, quantize=quantize)
    # Compiled graphs take the plain weights (inductor packs its own): no oneDNN plans' packed copies.
    loaded = in_passing_thread(config.num_threads, load_model, source, device=config.device, dtype=config.dtype,
                               revision=config.revision, force=config.force, batch_invariant=config.batch_invariant,
                               fast_kernels=not config.compile, quantize=config.quantize)
    if config.summary():  # the load report ends with the options that are not the defaults
        loaded = dataclasses.replace(loaded, report=f"{loaded.report} · options: {config.summary()}")
    log.info(loaded.report)
    if config.codec_threads is not None and loaded.device.type != "cpu":
        raise ValueError(f"codec_threads runs the codec on CPU threads; this model is on {loaded.device}")
    # The pipeline's own set-up runs kernels too (the family's prompt pieces: a text projection), and a
    # caller's thread that runs one keeps an OpenMP team for good, which throttles the engine's (threads.py).
    return in_passing_thread(config.num_threads, Pipeline, loaded, config)


class Pipeline:
    """The loaded speech path and the engine that serves it. Weights and tokenizer are read-only."""

    def __init__(self, loaded: LoadedModel, options: PipelineConfig | None = None):
        self.options = options or PipelineConfig()  # load_pipeline's options, checked
        self.config, self.tokenizer = loaded.config, loaded.tokenizer
        self.thinker = loaded.modules.get("thinker")  # None for Qwen3-TTS
        self.talker, self.code2wav = loaded.modules["talker"], loaded.modules["code2wav"]
        self.speaker_encoder = loaded.modules.get("speaker_encoder")
        self.device, self.dtype = loaded.device, loaded.dtype
        self.source, self.random_weights, self.load_report = loaded.source, loaded.random_weights, loaded.report
        self.speakers = sorted(self.config.speakers)
        self.steps = []  # the thinker's and talker's compiled decode steps (compile=True)
        self.background = None  # the units' build while requests decode eagerly (`warm_up(background=True)`)
        if self.options.compile:
            from omni_core.fast.compiled_steps import compile_steps
            self.steps = [compile_steps(stack.model) for stack in (self.thinker, self.talker) if stack is not None]
        # Sampling's top-p: HF's sort of the whole vocabulary in exact mode, over the top-k survivors otherwise
        self.top_p_of_top_k = not self.options.exact
        cp = self.talker.code_predictor
        cp.sampling = dataclasses.replace(cp.sampling, top_p_of_top_k=self.top_p_of_top_k)
        self.predictors = Predictors(cp, self.device, compiled=self.options.compile, exact=self.options.exact)
        family = registry.of_config(self.config)(self.config, loaded.modules, self.tokenizer, self.device)
        self.model = SpeechModel(self.config, self.thinker, self.talker, self.code2wav, self.tokenizer,
                                 self.device, self.dtype, self.predictors, family)
        o = self.options
        self.engine = Engine(self.model, o.max_batch, o.num_threads, codec_threads=o.codec_threads,
                             codec_processes=o.codec_processes, time_budget_s=o.time_budget_s,
                             max_waiting=o.max_waiting, max_unread=o.max_unread, stall_s=o.stall_s)

    @property
    def info(self) -> dict:
        cfg = self.config
        return dict(
            source=self.source, name=Path(self.source).name or self.source, random_weights=self.random_weights,
            device=str(self.device), dtype=str(self.dtype).replace("torch.", ""), compiled=self.compiled,
            compiling=self.background is not None and not self.background.ready.is_set(),
            batch_invariant=self.options.batch_invariant, exact=self.options.exact, quantize=self.options.quantize,
            cuda_available=torch.cuda.is_available(), **self.abilities,
            default_speaker=self.default_speaker, sample_rate=cfg.sample_rate,
            samples_per_frame=cfg.codec.samples_per_frame,
            frame_ms=1000 * cfg.codec.samples_per_frame / cfg.sample_rate,
            codebook_size=cfg.codec.codebook_size, num_code_groups=cfg.num_code_groups,
            max_batch=self.engine.max_batch, max_waiting=self.engine.max_waiting,
            can_encode=getattr(self.code2wav, "can_encode", False), max_encode_s=MAX_SECONDS,
        )

    @property
    def default_speaker(self) -> str | None:
        """The speaker of a request that names none (the family's: families/)."""
        return self.model.default_speaker

    @property
    def abilities(self) -> dict:
        """What a request may ask of this model: family, kind, speakers, languages, instruct, clone, chat,
        text_input (and its default), repetition_penalty (the default); the family says (families/)."""
        return self.model.family.abilities()

    @property
    def time_budget_s(self) -> float | None:
        """The most one request may run, from when the engine takes it in (None: no limit)."""
        return self.engine.scheduler.time_budget_s

    @time_budget_s.setter
    def time_budget_s(self, seconds: float | None) -> None:
        self.engine.scheduler.time_budget_s = seconds  # checked: None or a positive number

    @property
    def compiled(self) -> bool:
        """Whether this pipeline decodes compiled (or will, once its background build is done)."""
        return self.predictors.compiled is not None or self.background is not None

    @property
    def active(self) -> int:
        """Requests the engine has taken in and not finished (waiting or running)."""
        return self.engine.active

    # ---- requests ---------------------------------------------------------------------------

    def stream(self, request: SpeechRequest, cancel=None, *, overlap: bool = True) -> Stream:
        """Submit the request and return its events: TextDelta / Frame / AudioChunk, then Done, from
        the engine that runs it beside the others. Raises RequestError at once on bad input or when
        max_waiting requests already wait, EngineError when the pipeline is closed or its engine is
        down. `cancel` (a threading.Event) or `Stream.close()` stops the request at the next step.
        overlap=False: the thinker writes its whole reply before the talker starts (the same codes;
        a check of the overlap)."""
        return self.stream_together([request], cancel, overlap=overlap)[0]

    def stream_together(self, requests: list[SpeechRequest], cancel=None, *, overlap: bool = True) -> list[Stream]:
        """Streams for several requests handed to the engine at once: they are taken in at the same
        step (as many as max_batch allows), so they share steps from their first frame."""
        seqs = [self._sequence(r, cancel if len(requests) == 1 else None, overlap) for r in requests]
        self.engine.submit(*seqs)
        return [Stream(self.engine, seq) for seq in seqs]

    def stream_text(self, request: SpeechRequest, cancel=None) -> TextStream:
        """Like `stream`, for text still being written (an LLM's reply as it comes): `request.text` is its first
        piece (it may be empty), `TextStream.append` sends the rest, `TextStream.end` ends it. Qwen3-TTS reads it
        in streaming text input, a token a frame as each settles (models/qwen3_tts/live_text.py): the codes of
        the same text given whole with text_input='streaming', bit for bit."""
        seq = self._sequence(request, cancel, True, live=True)
        seq.feed = TextFeed(self.engine.wake)
        seq.feed.append(seq.req.text)
        self.engine.submit(seq)
        return TextStream(self.engine, seq)

    def _sequence(self, request: SpeechRequest, cancel, overlap: bool, live: bool = False) -> Sequence:
        clean, warnings = self.check(request, live)
        if cancel is not None and not (callable(getattr(cancel, "is_set", None)) and callable(getattr(cancel, "set", None))):
            raise RequestError(f"cancel must be a threading.Event (with is_set() and set()), not {type(cancel).__name__}")
        return Sequence(clean, warnings, self.device, self.dtype, cancel, overlap, self.top_p_of_top_k)

    def generate(self, request: SpeechRequest, **kwargs) -> Result:
        with self.stream(request, **kwargs) as events:
            for event in events:
                if isinstance(event, Done):
                    return event.result
        raise RuntimeError("the stream ended without a result")

    def close(self) -> None:
        """Fail what the engine still holds (EngineError), end its thread and let go of the weights it
        kept alive; later calls raise EngineError. Idempotent."""
        self.engine.close()

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, fn, *args):
        """Run fn(*args) in the engine's thread between two steps (a profiler, a debugger) and return
        its result: torch work belongs to that thread."""
        return self.engine.call(fn, *args)

    def check(self, request: SpeechRequest, live: bool = False) -> tuple[SpeechRequest, list[str]]:
        if not isinstance(request, SpeechRequest):
            raise RequestError("pass a SpeechRequest")
        return request.checked(self.speakers, self.abilities, live)

    def chat_prompt(self, text: str) -> list[int]:
        return self.model.chat_prompt(text)

    def speaker_id(self, speaker: str | None) -> int:
        return self.model.speaker_id(speaker)

    @property
    def needs_warm_up(self) -> bool:
        """Whether `warm_up` builds what a request would otherwise wait for: compiled pieces, CUDA graphs."""
        return self.compiled or self.device.type == "cuda"

    def warm_up(self, report=None, background: bool = False) -> None:
        """Run one short request per decode path, and compile or load (compile=True) or capture (CUDA)
        the predictor for every batch bucket up to max_batch, so that this happens now and not in a
        user's request. report(message), e.g. print: told what is compiled or loaded, and how long it took.
        background (compile=True): the units are built or loaded in a thread of their own, and requests
        decode eagerly until they are ready, then compiled (fast/background.py: `self.background.ready`); the
        short requests still run now (eagerly: a second or two). (warm_up.py)"""
        from omni_core.warm_up import warm_up
        warm_up(self, report, background)

    def score(self, codes, request: SpeechRequest, k: int = 5, keep: bool = False):
        """Teacher-forced: how likely this model finds `codes` [T, 16] for `request` (its text, mode, speaker,
        voice, predictor and sampling settings define the prompt and the distributions) → a `Score` with the
        log-probability and probability of every given code and its top-k alternatives (ids, probabilities),
        frame by frame and codebook by codebook, under the processed distributions the engine draws from: for a
        take this pipeline generated, the probabilities it reported (engine/score.py). In the engine's thread,
        a frame at a time between its steps. keep: the whole distributions too (`Score.distributions`, float32 [T, 16, V]).
        Raises RequestError for codes of the wrong shape or range, or a bad request."""
        from omni_core.engine.score import scoring

        codes = np.asarray(codes)
        G, size = self.config.num_code_groups, self.config.codec.codebook_size
        if codes.ndim != 2 or codes.shape[1] != G or not np.issubdtype(codes.dtype, np.integer):
            raise RequestError(f"codes must be integers of shape [frames, {G}], got {codes.dtype} {list(codes.shape)}")
        if codes.size and (codes.min() < 0 or codes.max() >= size):
            raise RequestError(f"codes must lie in 0..{size - 1}")
        if not 1 <= int(k) <= size:
            raise RequestError(f"k must be between 1 and {size}, got {k}")
        seq = self._sequence(request, None, overlap=False)
        parts = scoring(self.engine.runner, seq, codes.astype(np.int64), int(k), bool(keep))
        # A frame per engine call: the requests being generated take their steps between a long take's frames
        while (done := self.engine.call(next, parts)) is None:
            pass
        return done

    # ---- audio → codes → audio ----------------------------------------------------------------

    def encode(self, samples, sample_rate: int) -> np.ndarray:
        """Audio (any rate, mono or [N, channels]; at most `info['max_encode_s']` seconds) → codes
        [T, 16] int64 with the codec's encoder (Qwen3-TTS), in the engine's thread. T = ceil(seconds
        · 12.5). Raises RequestError for audio that is not audio, silent or too long, and for a model
        whose codec has no encoder."""
        if not getattr(self.code2wav, "can_encode", False):
            raise RequestError("this model's codec has no encoder (Qwen3-Omni publishes none): load a "
                               "Qwen3-TTS model to turn audio into codes")
        wav = clean_audio((sample_rate, samples), "audio")
        return self.engine.call(self._encode, wav)

    def prepare_audio(self, samples, sample_rate: int) -> np.ndarray:
        """The audio as the encoder hears it: float32 mono at the model's rate, checked as `encode` checks
        it (what a round trip's re-decode is compared with)."""
        return clean_audio((sample_rate, samples), "audio")

    @torch.no_grad()
    def _encode(self, wav: np.ndarray) -> np.ndarray:
        return self.code2wav.encode(torch.from_numpy(wav).to(self.device)).cpu().numpy().astype(np.int64)

    def decode(self, codes, num_codebooks: int = 16, drop=None) -> np.ndarray:
        """codes [T, 16] → float32 audio at 24 kHz, from the first `num_codebooks` codebooks
        (in the engine's thread, between its steps). `drop` [T, 16] bool: cells that contribute
        nothing, as the codebooks past `num_codebooks` do (code surgery: "without CBj")."""
        codes = np.asarray(codes)
        G = self.config.num_code_groups
        if codes.ndim != 2 or codes.shape[1] != G:
            raise RequestError(f"codes must have shape [frames, {G}], got {list(codes.shape)}")
        if not 1 <= int(num_codebooks) <= G:
            raise RequestError(f"num_codebooks must be between 1 and {G}, got {num_codebooks}")
        if drop is not None and np.shape(drop) != codes.shape:
            raise RequestError(f"drop must have the codes' shape {list(codes.shape)}, got {list(np.shape(drop))}")
        if len(codes) == 0:
            return np.zeros(0, np.float32)
        return self.engine.call(self._decode, codes, int(num_codebooks), drop)

    @torch.no_grad()
    def _decode(self, codes: np.ndarray, num_codebooks: int, drop=None) -> np.ndarray:
        x = torch.as_tensor(codes, dtype=torch.long, device=self.device).T[None]  # [1, 16, T]
        keep = None if drop is None else ~torch.as_tensor(np.asarray(drop, bool), device=self.device).T[None]
        return self.code2wav(x, num_codebooks=num_codebooks, keep=keep)[0, 0].float().cpu().numpy()
