"""The app's pieces that need no server: the heatmap figures, the stats panel, and the
rule that `app/` uses only omni_core's public API (and never torch)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

import omni_core
from app import figures, panels

APP_DIR = Path(__file__).resolve().parent.parent / "app"


def sample(T: int = 5):
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 2048, size=(T, 16))
    probs = rng.random((T, 16)).astype(np.float32)
    return codes, probs, np.zeros((T, 16), bool)


def test_codes_heatmap_has_cb0_on_top_seconds_on_x_and_a_fixed_colour_range():
    codes, probs, _ = sample()
    fig = figures.heatmap(codes, probs, view="codes")
    trace = fig.data[0]
    assert trace.z.shape == (16, 5) and (trace.z[:, 2] == codes[2]).all()  # one row per codebook
    assert list(trace.y) == [f"CB{g}" for g in range(16)] and fig.layout.yaxis.autorange == "reversed"
    assert (trace.zmin, trace.zmax) == (0, 2047)
    assert (trace.x0, trace.dx) == (0.04, 0.08)  # frame centres, in seconds
    for word in ("frame", "t =", "%{y}", "code"):
        assert word in trace.hovertemplate
    assert "5 frames" in fig.layout.title.text


def test_confidence_and_disagreement_views():
    codes, probs, mismatch = sample()
    confidence = figures.heatmap(codes, probs, mismatch, view="confidence").data[0]
    assert (confidence.zmin, confidence.zmax) == (0.0, 1.0)
    agree = figures.heatmap(codes, probs, mismatch, view="disagreement")
    assert "nowhere" in agree.layout.title.text
    mismatch[1, 3] = True
    assert "in 1 of 80 codes" in figures.heatmap(codes, probs, mismatch, view="disagreement").layout.title.text
    not_compare = figures.heatmap(codes, probs, None, view="disagreement")
    assert "compare" in not_compare.layout.annotations[0].text


def test_stats_panel_names_the_predictor_and_every_stage():
    stats = omni_core.Stats(thinker_s=0.01, talker_s=0.02, predictor_s=0.03, codec_s=0.004, total_s=0.07,
                            first_audio_s=0.05, frames=12, audio_s=0.96, rtf=0.07, predictor_ms_per_frame=2.5,
                            predictor="kv", warnings=["max_frames 9999 is above the limit; using 1500"]).to_dict()
    html = panels.finished(stats, "Hello <there>")
    for text in ("KV cache", "thinker", "talker", "predictor", "codec", "first audio", "real-time factor",
                 "2.50 ms", "cpu", "float32", "above the limit", "Hello &lt;there&gt;"):
        assert text in html


def test_app_uses_only_omni_cores_public_api_and_never_torch():
    public = set(omni_core.__all__)
    for path in APP_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
                assert not any(n.split(".")[0] in ("torch", "omni_core") for n in names), f"{path.name}: {names}"
            elif isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[0] != "torch", path.name
                if node.module.startswith("omni_core"):
                    assert node.module == "omni_core", f"{path.name} reaches into {node.module}"
                    assert {a.name for a in node.names} <= public, path.name


def test_launch_settings_keep_gradio_env_vars_and_serve_only_static_and_outputs(tmp_path):
    from app.cli import parse_args
    from app.files import OutputDir
    from app.ui import STATIC, launch_kwargs

    outputs = OutputDir(tmp_path)
    default = launch_kwargs(parse_args([]), outputs)
    assert "server_port" not in default and "server_name" not in default  # GRADIO_SERVER_PORT / _NAME decide
    assert default["allowed_paths"] == [str(STATIC), str(outputs.root)]
    assert default["max_file_size"] and default["css_paths"]
    given = launch_kwargs(parse_args(["--port", "9000", "--host", "0.0.0.0", "--model", "/ckpt"]), outputs)
    assert (given["server_port"], given["server_name"]) == (9000, "0.0.0.0")


def test_header_says_which_model_and_whether_compiled():
    info = omni_core.load_pipeline("tiny", device="cpu").info
    plain = panels.header(info, streaming=True)
    assert "tiny" in plain and "Random weights" in plain and "compile" not in plain
    assert "torch.compile'd" in panels.header({**info, "compiled": True}, streaming=True)


def test_an_empty_figures_message_is_wrapped_to_fit_a_phone():
    message = "Pin a take, then make another: their differences show here"
    text = figures.empty(message).layout.annotations[0].text
    lines = text.split("<br>")
    assert len(lines) > 1 and " ".join(lines) == message
    assert all(len(line) <= figures.EMPTY_LINE_CHARS for line in lines)
