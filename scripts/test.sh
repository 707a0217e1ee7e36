#!/usr/bin/env bash
# Set up everything the tests need (scripts/setup.sh --dev, scripts/setup_ref.sh), then run every test.
# Extra arguments go to pytest, e.g. scripts/test.sh -k browser
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
scripts/setup_ref.sh  # .venv-ref: the official qwen-tts package, the Qwen3-TTS tests' oracle
# Caches that a second run reuses (git-ignored): the synthetic checkpoints (the real-width one is
# 3.6 GB) and inductor's compiled kernels.
export OMNI_CORE_CACHE="${OMNI_CORE_CACHE:-$PWD/.cache/omni_core}"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$PWD/.cache/inductor}"
exec .venv/bin/python -m pytest -q --durations=15 tests "$@"
