"""`load_pipeline` and `Pipeline`: the public face of the engine.

A Pipeline holds the weights and the tokenizer, read-only after loading, and one
`Engine` (engine/scheduler.py) whose thread runs every request: each step advances
all running requests together, and each request keeps its own caches and generators.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from . import memory, tiny
from .checkpoint import load_tokenizer, load_weights, materialize, read_config
from .codec import Code2Wav
from .config import CheckpointError, OmniConfig
from .engine import Engine, Parts, Predictors, Sequence, Stream
from .events import Done, Result
from .hub import resolve_source
from .request import RequestError, SpeechRequest
from .talker import Talker
from .thinker import Thinker

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise CheckpointError(f"unknown device {device!r}: use 'auto', 'cpu' or 'cuda'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CheckpointError("device 'cuda' was asked for, but CUDA is not available here")
    return dev


def resolve_dtype(dtype: str | torch.dtype, cfg: OmniConfig) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    name = cfg.torch_dtype if dtype == "auto" else str(dtype).replace("torch.", "")
    if name not in DTYPES:
        raise CheckpointError(f"unsupported dtype {name!r}: use one of auto, {', '.join(DTYPES)}")
    return DTYPES[name]


def load_pipeline(source: str | Path = "tiny", *, device: str = "auto", dtype: str = "auto",
                  threads: int | None = None, time_budget_s: float | None = None,
                  compile: bool = False, revision: str | None = None, force: bool = False,
                  max_batch: int = 16) -> "Pipeline":
    """'tiny' (the embedded random-weight model; 'tiny-b' is a second shape), a checkpoint directory,
    or a hub id ('Qwen/Qwen3-Omni-30B-A3B-Instruct', fetched into the hub cache: hub.py), or
    'random:qwen3-omni-30b-a3b[?layers=N]': the real speech path with random weights drawn on the
    device, no files (random_weights.py; layers=N cuts the thinker and the talker).

    threads: CPU threads for torch's kernels (process-wide; None leaves torch's default). The engine
    runs every request in its one thread, so it can have all the cores.
    time_budget_s: the most one request may run before it is stopped (None: no limit).
    compile: decode with torch.compile'd steps and predictor frames (compiled.py): the same codes,
    several times faster on small models; the first request of each kind compiles first.
    revision: the hub id's branch, tag or commit (None: the default branch).
    force: load even when the memory check (memory.py) says the weights do not fit.
    max_batch: the most requests the engine advances together; more wait their turn."""
    if threads is not None:
        torch.set_num_threads(max(1, int(threads)))
    if str(source).startswith("random:"):  # full size, random weights, no files (random_weights.py)
        from .random_weights import load_random
        pipe = load_random(str(source), device=device, dtype=dtype, force=force, max_batch=max_batch)
        pipe.time_budget_s = time_budget_s
        log.info(pipe.load_report)
        if compile:
            pipe.enable_compile()
        return pipe
    random_weights = str(source) in tiny.PRESETS
    path = resolve_source(source, revision)
    start = time.perf_counter()  # load time: after any download
    cfg = read_config(path)
    tokenizer = load_tokenizer(path)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, cfg)
    needs = memory.plan(path, dt)
    free = memory.check(needs, dev, force)
    with torch.device("meta"):
        thinker, talker, codec = Thinker(cfg.thinker), Talker(cfg), Code2Wav(cfg.codec)
    modules = {"thinker": thinker, "talker": talker, "code2wav": codec}
    for m in modules.values():
        materialize(m, dev, dt).eval().requires_grad_(False)
    load_weights(modules, path)
    pipe = Pipeline(cfg, thinker, talker, codec, tokenizer, dev, dt, str(source), random_weights, max_batch)
    pipe.time_budget_s = time_budget_s
    pipe.load_report = memory.report(str(source), needs, dev, free, time.perf_counter() - start)
    log.info(pipe.load_report)
    if compile:
        pipe.enable_compile()
    return pipe


class Pipeline:
    def __init__(self, config: OmniConfig, thinker: Thinker, talker: Talker, codec: Code2Wav, tokenizer,
                 device: torch.device, dtype: torch.dtype, source: str, random_weights: bool,
                 max_batch: int = 16):
        self.config, self.thinker, self.talker, self.codec = config, thinker, talker, codec
        self.tokenizer, self.device, self.dtype = tokenizer, device, dtype
        self.source, self.random_weights = source, random_weights
        self.speakers = sorted(config.speakers)
        self.default_speaker = "ethan" if "ethan" in config.speakers else self.speakers[0]
        self.parts = Parts(config, thinker, talker, codec, tokenizer, device, dtype,
                           Predictors(talker.code_predictor, device), self._suppress_mask(), self.default_speaker)
        self.engine = Engine(self.parts, max_batch)

    @property
    def info(self) -> dict:
        cfg = self.config
        return dict(
            source=self.source, name=Path(self.source).name or self.source, random_weights=self.random_weights,
            device=str(self.device), dtype=str(self.dtype).replace("torch.", ""), compiled=self.compiled,
            cuda_available=torch.cuda.is_available(), speakers=list(self.speakers),
            default_speaker=self.default_speaker, sample_rate=cfg.sample_rate,
            samples_per_frame=cfg.codec.samples_per_frame,
            frame_ms=1000 * cfg.codec.samples_per_frame / cfg.sample_rate,
            codebook_size=cfg.codec.codebook_size, num_code_groups=cfg.num_code_groups,
            max_batch=self.engine.max_batch,
        )

    @property
    def time_budget_s(self) -> float | None:
        """The most one request may run, from when the engine takes it in (None: no limit)."""
        return self.engine.time_budget_s

    @time_budget_s.setter
    def time_budget_s(self, seconds: float | None) -> None:
        self.engine.time_budget_s = seconds

    @property
    def compiled(self) -> bool:
        return self.parts.predictors.compiled is not None

    # ---- requests ---------------------------------------------------------------------------

    def stream(self, request: SpeechRequest, cancel=None, *, overlap: bool = True) -> Stream:
        """TextDelta / Frame / AudioChunk events, then Done, from the engine that runs this request
        beside the others. Raises RequestError at once on bad input; `cancel` (an Event) or
        `Stream.close()` stops the request at the next step. overlap=False: the thinker writes
        its whole reply before the talker starts (the same codes; a check of the overlap)."""
        clean, warnings = self.check(request)
        return Stream(self.engine, Sequence(self.parts, clean, warnings, cancel, overlap))

    def generate(self, request: SpeechRequest, **kwargs) -> Result:
        with self.stream(request, **kwargs) as events:
            for event in events:
                if isinstance(event, Done):
                    return event.result
        raise RuntimeError("the stream ended without a result")

    def check(self, request: SpeechRequest) -> tuple[SpeechRequest, list[str]]:
        if not isinstance(request, SpeechRequest):
            raise RequestError("pass a SpeechRequest")
        return request.checked(self.speakers)

    def chat_prompt(self, text: str) -> list[int]:
        return self.parts.chat_prompt(text)

    def speaker_id(self, speaker: str | None) -> int:
        return self.parts.speaker_id(speaker)

    def _suppress_mask(self) -> torch.Tensor:
        """HF suppresses the talker's last 1024 ids (special codec ids) except codec EOS."""
        vocab = self.config.talker.vocab_size
        mask = torch.zeros(vocab, dtype=torch.bool, device=self.device)
        mask[vocab - 1024:] = True
        mask[self.config.codec_ids["codec_eos_token_id"]] = False
        return mask

    def enable_compile(self) -> None:
        """Compiled decode steps and predictor frames from now on, this pipeline's own (compiled.py)."""
        from .compiled import compile_step
        for stack in (self.thinker.model, self.talker.model):
            compile_step(stack)
        self.parts = replace(self.parts, predictors=Predictors(self.talker.code_predictor, self.device,
                                                                compiled=True))
        self.engine.parts = self.parts

    def warm_up(self) -> None:
        """Run one short request per decode path, and compile the predictor for every batch
        bucket the engine can use, so that compiling happens now and not in a user's request."""
        compiled = self.parts.predictors.compiled
        if compiled is not None:
            self.engine.call(torch.no_grad()(compiled.warm_up), self.engine.max_batch)
        for predictor in ("reprefill", "kv"):
            for do_sample in (False, True):
                self.generate(SpeechRequest("warm up", mode="chat", predictor=predictor, do_sample=do_sample,
                                            max_frames=3, max_text_tokens=3))

    # ---- codes → audio ----------------------------------------------------------------------

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
        return self.codec(x, num_codebooks=num_codebooks, keep=keep)[0, 0].float().cpu().numpy()
