#!/usr/bin/env bash
# GPU checks in one go (under 10 minutes on one GPU): the CUDA-graph tests and the
# GPU half of the benchmark. Run from the repo root on a machine with CUDA:
#   scripts/gpu_check.sh            # results in bench_results/gpu.json
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU here'; print(torch.cuda.get_device_name())"
"$PY" -m pytest -q tests/test_cuda_graph.py tests/test_code_predictor.py tests/test_pipeline.py -k "not default_lengths"
"$PY" -c "from omni_core.bench import main; main(quick=True, json_path='bench_results/gpu.json', gpu_only=True)"
