"""The page: the layout (layout.py), then all event wiring together, then the launch settings.

Element ids (for browser tests and for people who script the page): text, generate,
predictor, audio, heatmap, stats; inspecting codes: frame, inspector, spectrogram, cbstats,
surgery, pin; scoring: score-take, score-status; your own audio: audio-in, roundtrip, ablation, clone
(README has the full table).
API names: `synthesize` (streaming), `codes`, `codebook_stats`, `surgery`, `encode` and `score`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from app import layout, panels
from app.files import OutputDir
from app.handlers import Lab, SynthOut
from app.recording import EncodeOut, Recording
from app.scoring import Scorer, ScoreOut
from app.studio import AfterTake, Studio, SurgeryOut

# How often Gradio's queue looks for a request it can start while none can, and for progress to send (the page's
# handlers report none: gr.Progress is not used). Its own 1 ms and 10 ms (on Linux) kept a server at 8.5% of a core
# while idle and while a request runs (the queue is empty then too), taken from the engine on a 2-core machine; 10 ms
# and 50 ms: 2.3-2.8% (5 ms: 3.6-4.4%; a Zen 3, `python app.py` idle 10 s). A request may start up to 10 ms later.
QUEUE_POLL_S, PROGRESS_POLL_S = 0.01, 0.05
STATIC = Path(__file__).resolve().parent.parent / "static"
JS = (STATIC / "lab.js").read_text()  # heatmap click → frame slider; the playhead


def build_ui(pipe, outputs: OutputDir) -> gr.Blocks:
    info = pipe.info
    streaming = shutil.which("ffmpeg") is not None  # Gradio encodes streamed audio with ffmpeg
    with gr.Blocks(title="Omni Speech Lab", fill_width=True, delete_cache=(3600, 3600)) as demo:
        p = layout.page(info, streaming)
        lab, studio = Lab(pipe, outputs, streaming), Studio(pipe, outputs)
        wire(p, lab, studio, Recording(pipe, outputs, lab.figure), Scorer(pipe, lab, studio))
        if info.get("compiling"):  # a page opened after the background build says so (compiled, not compiling)
            demo.load(lambda: panels.header(pipe.info, streaming), outputs=p.header, queue=False)
    # As many handlers run at once as the engine batches; more wait in a bounded queue.
    demo.queue(default_concurrency_limit=info["max_batch"], max_size=info["max_waiting"])
    queue = getattr(demo, "_queue", None)  # (no public setting for them in Gradio 6)
    for name, least in (("sleep_when_free", QUEUE_POLL_S), ("progress_update_sleep_when_free", PROGRESS_POLL_S)):
        if hasattr(queue, name):
            setattr(queue, name, max(getattr(queue, name), least))
    return demo


def wire(p: SimpleNamespace, lab: Lab, studio: Studio, recording: Recording, scorer: Scorer) -> None:
    """Every event of the page, and the API endpoints. Engine work shares one concurrency group."""
    private = dict(api_visibility="private")
    settings = [p.text, p.mode, p.speaker, p.predictor, p.cuda_graph, p.do_sample, p.temperature, p.top_k,
                p.top_p, p.seed, p.max_frames, p.view, p.language, p.instruct, p.text_input]
    request_inputs = [*settings, p.ref_audio, p.ref_text]  # what a request is made of
    synth_inputs = [*request_inputs, p.feed_rate]  # and how fast live text comes
    after_take = dict(fn=studio.after_take, inputs=[p.take, p.pinned, p.spectro_kind],
                      outputs=[getattr(p, name) for name in AfterTake._fields], show_progress="hidden", **private)
    gr.on([p.generate.click, p.text.submit], lab.synthesize, inputs=synth_inputs,
          outputs=list(SynthOut(audio=p.audio, heatmap=p.heatmap, stats=p.stats, files=p.files, take=p.take)),
          api_name="synthesize", concurrency_id="engine", show_progress="minimal").then(**after_take)
    p.clone.click(lab.synthesize, inputs=[*settings, p.audio_in, p.clone_text],  # the recording as the voice
                  outputs=list(SynthOut(audio=p.audio, heatmap=p.heatmap, stats=p.stats, files=p.files, take=p.take)),
                  concurrency_id="engine", show_progress="minimal", **private).then(**after_take)
    p.encode.click(recording.encode, inputs=[p.audio_in, p.view], outputs=[getattr(p, n) for n in EncodeOut._fields],
                   api_name="encode_recording", concurrency_id="engine", **private).then(**after_take)
    # Stop sets the running request's cancel flag and the request draws its own last update.
    # (Gradio's `cancels=` would drop that update, and its last live one could land after ours.)
    p.stop.click(lab.stop, inputs=[p.take], queue=False, **private)
    p.view.change(lab.redraw, inputs=[p.view, p.take], outputs=[p.heatmap], queue=False, **private)
    p.listen.click(lab.listen, inputs=[p.k, p.take], outputs=[p.listen_audio], concurrency_id="engine", **private)
    p.upload.upload(lab.upload, inputs=[p.upload, p.view],
                    outputs=[p.heatmap, p.stats, p.listen_audio, p.k, p.files, p.take],
                    concurrency_id="engine", **private).then(**after_take)
    p.frame.change(studio.inspect, inputs=[p.frame, p.take], outputs=[p.frame_view, p.frame_audio],
                   trigger_mode="always_last", show_progress="hidden", **private)
    p.spectro_kind.change(studio.spectrogram, inputs=[p.spectro_kind, p.take], outputs=[p.spectrogram],
                          queue=False, **private)
    surgery_outputs = [getattr(p, name) for name in SurgeryOut._fields]
    score_outputs = [getattr(p, name) for name in ScoreOut._fields]
    p.edit_apply.click(studio.edit, inputs=[p.edit_op, p.edit_cb, p.edit_start, p.edit_end, p.edit_value,
                                            p.edit_seed, p.take, p.view, p.spectro_kind, p.frame],
                       outputs=surgery_outputs, concurrency_id="engine", **private).success(
        scorer.score_edit, inputs=[p.take, p.view, p.frame], outputs=score_outputs, concurrency_id="engine",
        show_progress="hidden", **private)  # heard first, then scored: each edited cell's p before → after
    p.score_take.click(scorer.score_take, inputs=[p.take, p.frame, *request_inputs], outputs=score_outputs,
                       concurrency_id="engine", show_progress="minimal", **private)
    p.edit_restore.click(studio.restore, inputs=[p.take, p.view, p.spectro_kind, p.frame],
                         outputs=surgery_outputs, **private)
    p.listen_without.click(studio.listen_without, inputs=[p.without, p.take], outputs=[p.listen_audio],
                           concurrency_id="engine", **private)
    p.pin.click(studio.pin, inputs=[p.take], outputs=[p.pinned, p.ab_text, p.audio_a, p.ab_plot, p.audio_b],
                **private)
    gr.on([], studio.stats_api, inputs=p.stats_inputs, outputs=p.stats_output, api_name="codebook_stats")
    gr.on([], studio.surgery_api, inputs=p.surgery_inputs, outputs=p.surgery_outputs, api_name="surgery",
          concurrency_id="engine")
    gr.on([], lab.codes, inputs=p.api_inputs, outputs=p.api_outputs, api_name="codes", concurrency_id="engine")
    gr.on([], scorer.score_api, inputs=p.score_inputs, outputs=p.score_output, api_name="score",
          concurrency_id="engine")
    gr.on([], recording.encode_api, inputs=p.encode_inputs, outputs=p.encode_outputs, api_name="encode",
          concurrency_id="engine")


def launch_kwargs(args, outputs: OutputDir, routes: list | None = None) -> dict:
    """Arguments for `Blocks.launch`. Host and port only when given, so GRADIO_SERVER_* still work.
    routes: more routes on the same server (app/api.py's speech API), given to the FastAPI app Gradio makes."""
    kwargs = dict(share=args.share, css_paths=[STATIC / "style.css"], allowed_paths=[str(STATIC), str(outputs.root)],
                  max_file_size="5mb", theme=theme(), footer_links=["api"], js=JS)
    if routes:
        kwargs["app_kwargs"] = {"routes": list(routes)}
    if args.host is not None:
        kwargs["server_name"] = args.host
    if args.port is not None:
        kwargs["server_port"] = args.port
    return kwargs


def theme() -> gr.themes.Base:
    return gr.themes.Soft(primary_hue="indigo", secondary_hue="sky", neutral_hue="slate",
                          font=_fonts("Inter", "ui-sans-serif", "system-ui", "sans-serif"),
                          font_mono=_fonts("ui-monospace", "SFMono-Regular", "Menlo", "monospace"))


def _fonts(*names: str) -> list:
    """Locally installed fonts (nothing fetched), as Font objects: Gradio compares themes
    font by font on launch and fails on plain strings."""
    return [gr.themes.Font(name) for name in names]
