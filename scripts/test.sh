#!/usr/bin/env bash
# Set up everything the tests need (scripts/setup.sh --dev, scripts/setup_ref.sh), then run every test.
# Extra arguments go to pytest, e.g. scripts/test.sh -k browser
set -euo pipefail
cd "$(dirname "$0")/.."
# A cold run writes about 10 GB here (the two venvs, the real-width checkpoints, inductor's kernels, the tests'
# temporary files); on a fuller disk tests fail with "No space left on device", and pytest's own capture files
# too (INTERNALERROR), which hides the cause. Say so first.
free_kb=$(df -Pk . 2>/dev/null | awk 'NR == 2 {print $4}') || true  # (no df: no warning)
if [ -n "$free_kb" ] && [ "$free_kb" -lt $((12 * 1024 * 1024)) ]; then
  echo "test.sh: warning: only $((free_kb / 1024 / 1024)) GB free here; a cold run writes about 10 GB" >&2
fi
# The two environments are independent, and each install keeps about one core busy for two minutes:
# they are built side by side. .venv-ref: the official qwen-tts package, the Qwen3-TTS tests' oracle.
ref_log=$(mktemp)
scripts/setup_ref.sh >"$ref_log" 2>&1 &
ref=$!
trap 'pkill -P "$ref" 2>/dev/null; kill "$ref" 2>/dev/null; rm -f "$ref_log"' EXIT  # setup.sh failed: stop the other install
scripts/setup.sh --dev
if ! wait "$ref"; then
  cat "$ref_log" >&2
  echo "test.sh: scripts/setup_ref.sh failed (its output is above)" >&2
  exit 1
fi
cat "$ref_log"
rm -f "$ref_log"
trap - EXIT
# Caches that a second run reuses (git-ignored): the synthetic checkpoints (the real-width one is
# 3.6 GB) and inductor's compiled kernels.
export OMNI_CORE_CACHE="${OMNI_CORE_CACHE:-$PWD/.cache/omni_core}"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$PWD/.cache/inductor}"
# Two workers, whole files each (a file's module fixtures are built once): the compile-bound files
# (test_compiled, the real-width checks) go first, in conftest's SLOW_FIRST order, and run beside the
# browser and server tests, which mostly wait.
# OpenMP threads that wait sleep instead of spinning, so the workers do not starve each other.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
exec .venv/bin/python -m pytest -q --durations=15 -n 2 --dist loadfile --no-loadscope-reorder --max-worker-restart 0 tests "$@"
