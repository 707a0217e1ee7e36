"""The page's launch settings (app/ui.py): Gradio's own env vars decide the port and host unless
flags are given; only static/ and the output folder are served."""

from __future__ import annotations

import pytest


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


def test_the_engine_leaves_a_core_to_a_browser_on_this_machine(monkeypatch):
    """Served to this machine only, the page's browser shares its cores: the engine takes one fewer (on 2
    cores a browser drawing the live heatmap halved an engine on both). Served to others (a Space, a
    given host, a share link), it takes them all. --threads decides when given."""
    from app.cli import parse_args

    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    assert parse_args([]).threads == 3
    assert parse_args(["--host", "localhost"]).threads == 3
    assert parse_args(["--host", "0.0.0.0"]).threads == 4
    assert parse_args(["--share"]).threads == 4
    assert parse_args(["--threads", "2"]).threads == 2
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")  # how a Space serves it
    assert parse_args([]).threads == 4
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    monkeypatch.delenv("GRADIO_SERVER_NAME")
    assert parse_args([]).threads == 1


def test_exact_is_asked_for_and_pad_lone_rows_is_gone(capsys):
    """--exact: the official bits (load_pipeline(exact=True)); padding a lone row is the default now, so
    --pad-lone-rows no longer exists."""
    from app.cli import parse_args

    assert parse_args(["--exact"]).exact and not parse_args([]).exact
    with pytest.raises(SystemExit):
        parse_args(["--pad-lone-rows"])


def test_the_codec_process_is_asked_for_with_its_threads():
    """--codec-threads N hands the pipeline codec_threads=N (0, the default: the codec in the engine's thread);
    --codec-processes P, codec_processes=P (1, the default)."""
    import pytest

    from app.cli import parse_args

    assert parse_args([]).codec_threads == 0
    assert parse_args(["--codec-threads", "1"]).codec_threads == 1
    with pytest.raises(SystemExit):
        parse_args(["--codec-threads", "-1"])
    assert parse_args([]).codec_processes == 1 and parse_args(["--codec-processes", "2"]).codec_processes == 2
    with pytest.raises(SystemExit):
        parse_args(["--codec-processes", "0"])
