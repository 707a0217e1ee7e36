"""The HTML panels (app/panels.py): the header says which model is loaded, the stats panel names
the predictor and every stage, the running and uploaded panels; text is escaped."""

from __future__ import annotations

import omni_core
from app import panels

from .conftest import our_pipeline


def test_stats_panel_names_the_predictor_and_every_stage():
    stats = omni_core.Stats(thinker_s=0.01, talker_s=0.02, predictor_s=0.03, codec_s=0.004, total_s=0.07,
                            first_audio_s=0.05, frames=12, audio_s=0.96, rtf=0.07, predictor_ms_per_frame=2.5,
                            predictor="kv", warnings=["max_frames 9999 is above the limit; using 1500"]).to_dict()
    html = panels.finished(stats, "Hello <there>")
    for text in ("KV cache", "thinker", "talker", "predictor", "codec", "first audio", "real-time factor",
                 "2.50 ms", "cpu", "float32", "above the limit", "Hello &lt;there&gt;"):
        assert text in html


def test_header_says_which_model_and_whether_compiled():
    info = our_pipeline("tiny").info
    plain = panels.header(info, streaming=True)
    assert "tiny" in plain and "Random weights" in plain and "compile" not in plain
    assert "torch.compile'd" in panels.header({**info, "compiled": True}, streaming=True)
    compiling = panels.header({**info, "compiled": True, "compiling": True}, streaming=True)
    assert "compiling: eager until it is ready" in compiling and "torch.compile'd" not in compiling


def test_header_says_when_audio_cannot_stream_and_names_a_real_model_plainly():
    info = {**our_pipeline("tiny").info, "random_weights": False, "name": "Qwen3-Omni"}
    html = panels.header(info, streaming=False)
    assert "ffmpeg is not installed" in html and "Random weights" not in html and "<b>Qwen3-Omni</b>" in html
    assert "ffmpeg is not installed" not in panels.header(info, streaming=True)


def test_finished_panel_shows_sharing_mismatches_and_why_it_stopped():
    stats = omni_core.Stats(frames=4, audio_s=0.32, predictor="compare", mismatches=3, batch_max=3,
                            batch_mean=2.5, stopped="cancelled", cuda_graph=True).to_dict()
    html = panels.finished(stats, "")
    for text in ("compare (re-prefill vs KV)", "CUDA graph", "up to 3 · mean 2.5", "predictor mismatches",
                 "Stopped: what was made so far", "frames · audio"):
        assert text in html
    assert "spoken text" not in html  # no text, no quote
    alone = panels.finished(omni_core.Stats(batch_max=1).to_dict(), "hi")
    assert "alone" in alone and "predictor mismatches" not in alone and "–" in alone  # no rtf: a dash


def test_running_panel_counts_frames_and_requests_in_the_step():
    html = panels.running("reprefill", 10, 0.08, 1.234, None, "Hi & bye", batch=3)
    assert "re-prefill" in html and "0.80 s" in html and "1.23 s" in html and "…" in html
    assert "3 requests" in html and "Hi &amp; bye" in html
    assert "alone" in panels.running("kv", 1, 0.08, 0.1, 0.05, "", batch=1)
    assert "50 ms" in panels.running("kv", 1, 0.08, 0.1, 0.05, "")


def test_uploaded_panel_names_the_file():
    html = panels.uploaded(25, 0.08, "take<1>.npy")
    assert "take&lt;1&gt;.npy" in html and "2.00 s" in html and ">25<" in html
