"""The page's layout (app/layout.py): every component the wiring names is built, with the element
ids the browser tests and scripts use, and the choices follow the loaded model."""

from __future__ import annotations

import gradio as gr

from app import layout
from app.surgery import OPS
from omni_core import MAX_FRAMES

from .conftest import our_pipeline


def build(info: dict, streaming: bool = True):
    with gr.Blocks():
        return layout.page(info, streaming)


def test_the_page_has_its_components_with_their_element_ids():
    p = build(our_pipeline("tiny").info)
    for name, elem_id in [("text", "text"), ("generate", "generate"), ("predictor", "predictor"), ("audio", "audio"),
                          ("heatmap", "heatmap"), ("stats", "stats"), ("frame", "frame"), ("frame_view", "inspector"),
                          ("spectrogram", "spectrogram"), ("cbstats", "cbstats"), ("pin", "pin"),
                          ("edit_op", "edit-op")]:
        assert getattr(p, name).elem_id == elem_id, name
    assert isinstance(p.take, gr.State) and isinstance(p.pinned, gr.State)
    assert len(p.api_inputs) == 9 and len(p.surgery_inputs) == 7 and len(p.stats_inputs) == 2


def test_choices_follow_the_model_and_the_machine():
    info = our_pipeline("tiny").info
    p = build(info)
    assert [c[0] for c in p.speaker.choices] == info["speakers"] and p.speaker.value == info["default_speaker"]
    assert p.max_frames.maximum == MAX_FRAMES and p.max_frames.value == 0  # 0: automatic
    assert [c[1] for c in p.edit_op.choices] == list(OPS)
    assert p.cuda_graph.value is info["cuda_available"] and p.cuda_graph.interactive is info["cuda_available"]
    assert p.predictor.value == "kv"  # no CUDA here: the KV predictor is the fast one on a CPU
    gpu = build({**info, "cuda_available": True, "default_speaker": "aiden"})
    assert gpu.cuda_graph.value is True and gpu.speaker.value == "aiden"
    assert gpu.predictor.value == "reprefill"  # it replays as a CUDA graph
