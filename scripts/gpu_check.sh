#!/usr/bin/env bash
# The GPU check (issues 13 and 46) in one go, under 9 minutes on one H200: the real-size code
# predictor at batch 1/8/16/32 in bfloat16 (eager KV, eager re-prefill, CUDA-graph re-prefill,
# HF generate, then compiled KV while time lasts), Qwen3-TTS 0.6B and 1.7B end to end (with and
# without the graph, 1/8/16 at once, int8), the CUDA tests, and the
# full-size random-weight pipeline (48 + 20 layers, ~68 GB bfloat16): first audio,
# per-stage time, RTF, peak GPU memory. Results: $OUT/gpu.json (OUT defaults to
# bench_results) and $OUT/gpu_check.log. Extra arguments go to scripts/gpu_check.py
# (--help lists them; e.g. --skip compiled, --budget-s 300).
#
# The device's Python has its own torch and an older transformers and reaches no package
# index, so the pinned transformers travels as a wheel in wheels/ (git-ignored; carry it)
# and is installed into a temporary folder that goes first on PYTHONPATH. Fetch it here:
#   .venv/bin/pip download transformers==5.24.0 --no-deps -d wheels/
# (its other requirements, huggingface_hub >= 1.31, tokenizers 0.23, safetensors 0.8,
# are already on the device; add any that a newer pin needs the same way).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench_results}
export OUT
mkdir -p "$OUT"
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
LOG="$OUT/gpu_check.log"

if compgen -G "wheels/*.whl" >/dev/null; then
  SITE=$(mktemp -d /tmp/omni-site.XXXXXX)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" wheels/*.whl \
    || { echo "installing wheels/*.whl failed" | tee "$LOG"; exit 1; }
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" - <<'EOF' 2>&1 | tee "$LOG" || exit 1
import sys, torch, transformers
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__} "
      f"from {transformers.__file__}, CUDA {torch.cuda.is_available()}")
pin = "5.24.0"
if transformers.__version__ != pin:
    sys.exit(f"transformers {transformers.__version__} is not the pinned {pin}: put its wheel in wheels/ (see above)")
EOF
# A hard stop a little past the driver's own budget (by default it starts no section after 480 s;
# set HARD_STOP_S with a smaller --budget-s): gpu.json is rewritten after every section, so a stop
# keeps what was measured.
PYTHONUNBUFFERED=1 timeout -k 10 "${HARD_STOP_S:-540}" "$PY" scripts/gpu_check.py --out "$OUT" "$@" 2>&1 | tee -a "$LOG"
