"""`PipelineConfig`: every option of `load_pipeline`, checked once when it is made.

A bad option fails here, before any weight is read. The fields hold the options in force: `exact`
sets max_batch to 1 and batch_invariant to False, several codec processes get one kernel thread
each when codec_threads is not given; `num_threads` is `threads` resolved when the config is made.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from omni_core.engine.scheduler import MAX_UNREAD, STALL_S, positive_seconds, whole
from omni_core.models import quant


@dataclass(frozen=True)
class PipelineConfig:
    """device: "auto" (CUDA when available, else the CPU), "cpu" or "cuda"; dtype: "auto" (the checkpoint's,
    or float32 on a CPU without fast kernels for it) or a name such as "bfloat16".
    threads: CPU threads for torch's kernels (None: as many as the calling thread has, torch's default
    all cores). The weights load in a thread of their own and the engine runs every request in its one
    thread (engine/threads.py: the caller's thread runs no kernels), so it can have all the cores.
    time_budget_s: the most one request may run, from when the engine admits it, before it is
    stopped (None: no limit; otherwise a positive number of seconds).
    compile: decode through compiled units (fast/units.py: one predictor step, one decoder layer): the same
    codes, several times faster on small models; `warm_up` compiles them (the first start) or loads them.
    revision: the hub id's branch, tag or commit (None: the default branch).
    force: load even when the memory check (loading/memory.py) says the weights do not fit.
    max_batch: the most requests the engine advances together; more wait their turn.
    max_waiting: the most requests that may wait for a slot (None: 4 x max_batch); `stream()` refuses
    more with a RequestError.
    max_unread: a request whose reader is more than this many frames behind is paused (its row leaves
    the batch, it keeps its slot) until the reader catches up; stall_s: paused that long, it is stopped
    ("stalled").
    batch_invariant: True (the default): a request's codes do not depend on what runs beside it (each
    matmul's batch-invariant plan, models/invariant.py); False: plain matmuls, a little faster for
    batches of float32 rows (BENCHMARKS.md, "The code predictor at real size"), and a request beside others
    may get other codes.
    The default mode is batch-invariant with the fastest kernels that hold: a lone row may be padded into its
    batch's kernel, so a request's last bits (and so, rarely, a greedy code) may differ from the official
    implementation's lone call; its per-frame log-probabilities agree within the tolerances
    tests/test_fidelity.py measures.
    exact: every request gets the official implementation's bits: one request at a time (max_batch 1,
    whatever is passed) on plain matmuls (invariant.PLAIN), each shaped as the official code shapes it.
    The parity tests run in this mode.
    codec_threads: decode the audio in a process of its own with this many kernel threads, while the
    engine runs its next step (engine/codec_process.py; CPU only, the same audio bits as in the engine's
    thread at that many threads); None: the engine's thread decodes it within its step.
    codec_processes: this many codec processes (of codec_threads kernel threads, 1 when not given), each
    request's stream in one of them (engine/codec_pool.py: a step's chunks decode in parallel, e.g.
    newcomers' first audio; the same audio).
    quantize: None (the default), or "int8": the talker's, code predictor's and thinker's large matmuls with
    int8 weights (symmetric, per output channel) and bfloat16 activations, quantized at load (models/quant.py):
    half a bfloat16 model's bytes per frame, so about twice the speed where decoding is bound by memory; the
    codec and the embeddings stay in float. Batch-invariant like the float path. CPU only. "int4": the same
    matmuls with int4 weights in groups of 32 (a scale and an offset each): a quarter of the bytes, with about
    15 times int8's error (measured in BENCHMARKS.md, "Qwen3-TTS int8 and the memory floor"). "mixed": int4
    in the talker's (and thinker's) decoder layers, int8 in the code predictor, the heads and the projections,
    where an error compounds through a frame's 15 predictor steps (BENCHMARKS.md, "mixed precision")."""

    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    time_budget_s: float | None = None
    compile: bool = False
    revision: str | None = None
    force: bool = False
    max_batch: int = 16
    max_waiting: int | None = None
    max_unread: int = MAX_UNREAD
    stall_s: float = STALL_S
    batch_invariant: bool = True
    exact: bool = False
    codec_threads: int | None = None
    codec_processes: int = 1
    quantize: str | None = None
    num_threads: int = field(init=False, compare=False)  # the kernel threads: `threads`, resolved

    def __post_init__(self):
        self._check_engine()
        self._check_codec()
        threads = max(1, int(self.threads)) if self.threads is not None else torch.get_num_threads()
        object.__setattr__(self, "num_threads", threads)
        self._check_quantize()
        if self.exact:
            self._set(max_batch=1)
        self._set(batch_invariant=bool(self.batch_invariant) and not self.exact, exact=bool(self.exact))

    def _check_engine(self) -> None:
        """The scheduler's options, in the order and with the words of engine/scheduler.py."""
        whole("max_batch", self.max_batch, 1)
        if self.max_waiting is not None:
            whole("max_waiting", self.max_waiting, 0)
        whole("max_unread", self.max_unread, 1)
        if self.time_budget_s is not None:
            positive_seconds("time_budget_s", self.time_budget_s)
        positive_seconds("stall_s", self.stall_s)

    def _check_codec(self) -> None:
        if self.codec_threads is not None and int(self.codec_threads) < 1:
            raise ValueError(f"codec_threads must be a positive number of CPU threads (got {self.codec_threads!r})")
        if int(self.codec_processes) < 1:
            raise ValueError(f"codec_processes must be a positive number of processes (got {self.codec_processes!r})")
        self._set(codec_processes=int(self.codec_processes))
        if self.codec_processes > 1 and self.codec_threads is None:
            self._set(codec_threads=1)

    def _check_quantize(self) -> None:
        if self.quantize is not None and self.quantize not in quant.MODES:
            raise ValueError(f"quantize must be None or one of {', '.join(quant.MODES)} (got {self.quantize!r})")
        if self.quantize is not None and self.exact:
            raise ValueError(f"exact=True gives the official implementation's bits, which {self.quantize} weights "
                             "cannot: choose one of the two")

    def _set(self, **values) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def summary(self) -> str:
        """The options in force that differ from the defaults, e.g. "max_batch=4, compile=True" ("" when
        none do). device and dtype are left out: the load report names what they resolved to."""
        return ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                         if f.init and f.name not in ("device", "dtype") and getattr(self, f.name) != f.default)
