"""scripts/gpu_check.py and gpu_check.sh on a CPU: argument handling, the JSON report, and a
dry run with tiny sizes (the GPU-only parts skipped), so a device run does not die on a typo."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)

CPU_DRY_RUN = ["--device", "cpu", "--dtype", "float32", "--model", "tiny", "--batches", "1", "--repeats", "1",
               "--frames", "3", "--concurrent", "2", "--tts", "tiny-tts", "--tts-counts", "1,2"]


def test_defaults_and_out_from_the_environment(monkeypatch):
    monkeypatch.setenv("OUT", "/tmp/somewhere")
    args = gpu_check.parse_args([])
    assert args.out == "/tmp/somewhere" and args.batches == [1, 8, 16, 32] and args.skip == set()
    assert args.device == "cuda" and args.dtype == "bfloat16" and args.frames == 100
    assert args.model == "random:qwen3-omni-30b-a3b"
    assert args.tts == ["random:qwen3-tts-0.6b", "random:qwen3-tts-1.7b"] and args.tts_counts == [1, 8, 16]
    monkeypatch.delenv("OUT")
    assert gpu_check.parse_args(["--skip", "tests,compiled"]).skip == {"tests", "compiled"}
    assert gpu_check.parse_args([]).out == "bench_results"


@pytest.mark.parametrize("argv", [["--skip", "test"], ["--batches", "1,x"], ["--batches", "0"], ["--frames", "0"],
                                  ["--tts-counts", "1,0"],
                                  ["--dtype", "int8"]])
def test_bad_arguments_stop_with_a_message(argv, capsys):
    with pytest.raises(SystemExit):
        gpu_check.parse_args(argv)
    assert "error" in capsys.readouterr().err


def test_sections_record_results_errors_skips_and_budget(tmp_path):
    args = gpu_check.parse_args(["--out", str(tmp_path), "--skip", "tests", "--budget-s", "0.5"])
    calls = []

    def ok(args, deadline):
        calls.append("ok")
        return {"value": np.arange(3)}

    def boom(args, deadline):
        raise RuntimeError("no CUDA here")

    def slow(args, deadline):
        import time
        time.sleep(0.6)
        return {}

    report = gpu_check.Report(tmp_path)
    gpu_check.run_sections(args, report, {"machine": ok, "tests": ok, "predictor": boom, "pipeline": slow,
                                          "concurrent": ok})
    data = json.loads((tmp_path / "gpu.json").read_text())["sections"]
    assert calls == ["ok"]
    assert data["machine"]["value"] == [0, 1, 2]
    assert data["tests"] == {"skipped": "--skip"}
    assert "no CUDA here" in data["predictor"]["error"] and "Traceback" in data["predictor"]["traceback"]
    assert data["concurrent"]["skipped"].startswith("budget")
    assert not list(tmp_path.glob("*.tmp"))


def test_pytest_command_selects_the_files_with_cuda_tests(tmp_path):
    cmd = gpu_check.pytest_command(tmp_path / "junit.xml")
    files = {Path(c).name for c in cmd if c.startswith("tests/")}
    assert cmd[cmd.index("-k") + 1] == "cuda" and {"test_cuda_graph.py", "test_predictors.py"} <= files
    assert not files & {"test_app.py", "test_browser.py", "test_layout.py"}  # the app's imports: not on the device
    assert gpu_check.junit_counts(tmp_path / "missing.xml") == {}
    (tmp_path / "j.xml").write_text('<testsuites><testsuite tests="3" failures="1" errors="0" skipped="2"/>'
                                    '</testsuites>')
    assert gpu_check.junit_counts(tmp_path / "j.xml") == {"tests": 3, "failures": 1, "errors": 0, "skipped": 2}


def test_dry_run_on_cpu(tmp_path):
    """Every section but the CUDA tests and compiling: the real-size predictor at batch 1 (no graph
    on a CPU), the tiny Qwen3-TTS model alone and two at once, the tiny pipeline, two concurrent requests."""
    assert gpu_check.main(["--out", str(tmp_path), "--skip", "tests,compiled", *CPU_DRY_RUN]) == 0
    data = json.loads((tmp_path / "gpu.json").read_text())
    s = data["sections"]
    assert s["machine"]["cuda_available"] in (True, False) and s["machine"]["transformers"]
    timings = s["predictor"]["batches"]["1"]["ms_per_call"]
    assert set(timings) == {"eager_kv", "eager_reprefill", "hf_generate"} and not s["predictor"]["graph"]
    tts = s["tts"]["tiny-tts"]
    assert set(tts["solo"]) == {"reprefill", "kv"}
    assert all(r["frames"] == 3 for way in tts["solo"].values() for r in way["rounds"])
    assert tts["kv_codes_equal_reprefill"] is True and set(tts["at_once"]) == {"1", "2"}
    assert all(v > 0 for v in tts["questions"].values()) and len(tts["questions"]) == 4
    assert tts["int8"]["frames"] == 3 and tts["int8"]["rtf"] > 0
    run = s["pipeline"]["runs"][0]
    assert run["frames"] == 3 and run["first_audio_s"] > 0 and set(run["stage_ms"]) >= {"talker", "predictor", "codec"}
    assert s["pipeline"]["rtf"] > 0 and s["pipeline"]["first_audio_ms"] > 0
    assert len(s["concurrent"]["results"]) == 2 and all(r["frames"] == 3 for r in s["concurrent"]["results"])
    assert data["args"]["skip"] == ["compiled", "tests"] and data["total_s"] > 0


def test_shell_script_installs_the_wheels_and_runs_the_driver(tmp_path):
    """gpu_check.sh end to end (wheels/ installed into a temporary path when present), sections trimmed."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", "--skip", "tests,predictor,tts,concurrent,compiled",
                           *CPU_DRY_RUN], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = (tmp_path / "gpu_check.log").read_text()
    assert "transformers 5.24.0" in log and "wrote" in log
    if list((ROOT / "wheels").glob("*.whl")):
        assert "/tmp/omni-site." in log  # the carried wheel was imported, not the installed package
    sections = json.loads((tmp_path / "gpu.json").read_text())["sections"]
    assert sections["pipeline"]["runs"][0]["frames"] == 3
