"""The page's launch settings (app/ui.py): Gradio's own env vars decide the port and host unless
flags are given; only static/ and the output folder are served."""

from __future__ import annotations


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
