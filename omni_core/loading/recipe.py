"""One load recipe for every source: a source supplies config, tokenizer and weights; the
recipe builds the modules on the meta device, checks memory, gives them storage and fills them.

    directory / hub id / 'tiny'   config.json + tokenizer files + safetensors shards
                                  (Qwen3-TTS: + speech_tokenizer/, loading/qwen3_tts.py)
    'random:<name>'               a preset config, a built tokenizer, seeded random weights

The source's family (families/registry.py) is asked once; its part of the recipe (loading/qwen3_omni.py,
loading/qwen3_tts.py: the same functions) reads the config and tokenizer, builds and fills the modules.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from omni_core.codec import batching
from omni_core.families import registry
from omni_core.loading import memory, random_weights
from omni_core.loading.checkpoint import materialize
from omni_core.loading.hub import is_hub_id, resolve_source
from omni_core.models import quant
from omni_core.models.invariant import PLAIN, use_plan
from omni_core.models.config import CheckpointError, OmniConfig
from omni_core.models.qwen3_tts.config import TTSConfig
from omni_core.planner import store
from omni_core.synthetic import tiny, weights
from omni_core.synthetic import qwen3_tts as synthetic_tts

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    """What a Pipeline is built from: the config, the modules (read-only from now on) and the tokenizer."""
    config: OmniConfig | TTSConfig
    modules: dict[str, nn.Module]  # "thinker" (Qwen3-Omni), "talker", "code2wav" (the codec), "speaker_encoder"
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    source: str
    random_weights: bool
    report: str  # one line: what was loaded, its size, the time, the free memory


def load_model(source: str | Path = "tiny", *, device: str = "auto", dtype: str = "auto",
               revision: str | None = None, force: bool = False, batch_invariant: bool = True,
               fast_kernels: bool = True, quantize: str | None = None) -> LoadedModel:
    """The recipe: read the source → build on meta → check memory → materialize → fill → quantize (quantize="int8":
    the talker's, predictor's and thinker's large matmuls, models/quant.py) → plan the float matmuls.
    batch_invariant: each matmul's shape gets its batch-invariant plan, probed once per machine (omni_core/planner/);
    False: every matmul one plain F.linear (invariant.PLAIN), nothing probed (exact mode).
    fast_kernels: plans with kernels besides F.linear allowed (small GEMMs on one thread, oneDNN)."""
    start = time.perf_counter()
    src = read_source(source, revision)
    start = src.started or start  # load time: after any download
    dev = resolve_device(device)
    if quantize is not None and dev.type != "cpu":
        raise CheckpointError(f"quantize={quantize!r} runs on the CPU's int8 kernel; on {dev} load bfloat16 instead")
    modules = src.family.build_modules(src.cfg)
    dt, needs = choose_dtype(dtype, src.cfg, dev, lambda dt: src.needs_at(modules, dt))
    free = memory.check(needs, dev, force)
    for m in modules.values():
        materialize(m, dev, dt).eval().requires_grad_(False)
    src.fill(modules, dev, dt)
    saved = quant.quantize_modules([modules[k] for k in ("thinker", "talker") if k in modules], quantize) if quantize else 0
    if batch_invariant:  # the cheapest kernel plan per shape, kept per machine; the codec's streams batched if that holds
        store.plan_modules(modules.values(), dev, fast_kernels)
        batching.decide(modules["code2wav"])
    else:
        use_plan(modules.values(), PLAIN)
    report = memory.report(str(source), needs, dev, free, time.perf_counter() - start)
    report += report_extras(modules, src, dev, dt, dtype, quantize, saved)
    synthetic = src.drawn or str(source) in tiny.PRESETS or str(source) in synthetic_tts.TINY_PRESETS
    return LoadedModel(src.cfg, modules, src.tokenizer, dev, dt, str(source), synthetic, report)


@dataclass
class Source:
    """What a source supplies before its weights: the config and tokenizer, and its family's part of the recipe."""
    cfg: OmniConfig | TTSConfig
    tokenizer: object
    family: ModuleType  # loading/qwen3_omni.py or loading/qwen3_tts.py (families/registry.py chose it)
    path: Path | None = None  # the checkpoint's directory (None: random weights)
    random: dict | None = None  # random_weights.parse's options for a 'random:' source
    started: float | None = None  # when loading began after a download (None: no download)

    @property
    def drawn(self) -> bool:
        return self.random is not None

    def needs_at(self, modules: dict[str, nn.Module], dt: torch.dtype) -> memory.MemoryPlan:
        """The memory the weights need at dtype `dt`."""
        return random_weights.plan(modules, dt) if self.drawn else self.family.plan(self.path, self.cfg, dt)

    def fill(self, modules: dict[str, nn.Module], device: torch.device, dt: torch.dtype) -> None:
        """Give the materialized modules their weights: drawn, or read from the checkpoint."""
        if self.drawn:
            weights.fill_random(modules, self.random["seed"])
        else:
            self.family.load(modules, self.path, self.cfg, device, dt)


def read_source(source: str | Path, revision: str | None) -> Source:
    """The config and tokenizer of a 'random:' source, a directory or a hub id (downloaded first); the source's
    family is asked here, once."""
    if random_weights.is_random(source):
        options = random_weights.parse(str(source))
        family = registry.of_random(options["name"]).loading
        return Source(family.random_config(options["name"], options["layers"]), family.random_tokenizer(), family,
                      random=options)
    path = resolve_source(source, revision)
    started = time.perf_counter()
    family = registry.of_checkpoint(path).loading
    tokenizer = family.load_text_tokenizer(path, from_hub=is_hub_id(str(source)))
    return Source(family.read_config(path), tokenizer, family, path, started=started)


def report_extras(modules: dict[str, nn.Module], src: Source, dev: torch.device, dt: torch.dtype, dtype: str,
                  quantize: str | None, saved: int) -> str:
    """The load report's tail: the oneDNN matmuls, the quantized ones (or what int8 would gain here), and why
    auto chose float32 over the checkpoint's dtype."""
    report = ""
    packed = sum(getattr(m, "packed", None) is not None for root in modules.values() for m in root.modules())
    if packed:
        report += f" · {packed} matmuls through oneDNN (timed faster here: models/onednn.py)"
    if quantize:
        kinds = [type(m) for root in modules.values() for m in root.modules() if isinstance(m, quant.QUANTIZED)]
        split = f" ({kinds.count(quant.Int4Linear)} int4, {kinds.count(quant.Int8Linear)} int8)" if quantize == "mixed" else ""
        report += f" · {quantize} weights: {len(kinds)} matmuls{split}, {saved / 1e9:.2f} GB less (the codec and embeddings in {str(dt).removeprefix('torch.')})"
    elif dev.type == "cpu" and src.family.SUGGESTS_INT8 and (gain := quant.measured_gain(modules["talker"])):
        size = next(modules["talker"].parameters()).element_size()
        report += (f" · --quantize int8 reads a byte per weight instead of {size} (a one-row matmul here {gain:.1f}x as "
                   "fast; the codec stays as it is)")
    if dtype == "auto" and dt != DTYPES.get(src.cfg.torch_dtype, dt):
        report += (f" (the checkpoint is {src.cfg.torch_dtype}; this CPU has no fast {src.cfg.torch_dtype} kernels, so auto "
                   f"chose float32: --dtype {src.cfg.torch_dtype} keeps it)")
    return report


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


def resolve_dtype(dtype: str | torch.dtype, cfg: OmniConfig, device: torch.device | None = None) -> torch.dtype:
    """A dtype by name; "auto": the checkpoint's, except on a CPU that has no fast kernels for it (given
    `device`): float32 there. A CPU without native bfloat16 (e.g. AMD Zen 3, most laptops before 2023) runs
    bfloat16 matmuls and convolutions through slow paths, several times slower than float32 (BENCHMARKS.md,
    "Machines and method")."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = cfg.torch_dtype if dtype == "auto" else str(dtype).replace("torch.", "")
    if name not in DTYPES:
        raise CheckpointError(f"unsupported dtype {name!r}: use one of auto, {', '.join(DTYPES)}")
    if dtype == "auto" and device is not None and device.type == "cpu" and not fast_on_cpu(DTYPES[name]):
        return torch.float32
    return DTYPES[name]


def choose_dtype(dtype: str | torch.dtype, cfg, device: torch.device, needs_at) -> tuple[torch.dtype, memory.MemoryPlan]:
    """`resolve_dtype` for `device`, and needs_at(that dtype), the memory plan. Where auto chose float32 over
    the checkpoint's half dtype and float32 would not fit, the checkpoint's dtype after all."""
    dt = resolve_dtype(dtype, cfg, device)
    needs = needs_at(dt)
    own = resolve_dtype(dtype, cfg)
    if dt != own and not memory.fits(needs, device):
        return own, needs_at(own)
    return dt, needs


def fast_on_cpu(dtype: torch.dtype) -> bool:
    """Whether this CPU computes `dtype` with its own kernels (oneDNN's check: AVX-512 or native
    bfloat16 / float16 instructions), not by converting every element on the way."""
    if dtype == torch.bfloat16:
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if dtype == torch.float16:
        return torch.ops.mkldnn._is_mkldnn_fp16_supported()
    return True
