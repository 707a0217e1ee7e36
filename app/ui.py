"""The page: layout first, then all event wiring together, then the launch settings.

Element ids (for browser tests and for people who script the page): text, generate,
predictor, audio, heatmap, stats; inspecting codes: frame, inspector, spectrogram, cbstats,
surgery, pin (README has the full table). API names: `synthesize` (streaming), `codes`,
`codebook_stats` and `surgery`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import gradio as gr

from app import charts, figures, inspector, panels
from app.files import OutputDir
from app.handlers import Lab, SynthOut
from app.studio import Studio
from app.surgery import OPS
from omni_core import MAX_FRAMES, MAX_TEXT_CHARS

STATIC = Path(__file__).resolve().parent.parent / "static"
EXAMPLES = [
    "Hello there! This is Omni Speech Lab.",
    "The quick brown fox jumps over the lazy dog.",
    "Sixteen codebooks, one frame every eighty milliseconds.",
]
PREDICTORS = [("re-prefill", "reprefill"), ("KV", "kv"), ("compare", "compare")]
VIEWS = [("codes", "codes"), ("confidence", "confidence"), ("disagreement", "disagreement")]
SPECTRO_KINDS = [("log-mel", "mel"), ("waveform", "wave")]
JS = (STATIC / "lab.js").read_text()  # heatmap click → frame slider; the playhead


def build_ui(pipe, outputs: OutputDir) -> gr.Blocks:
    info = pipe.info
    streaming = shutil.which("ffmpeg") is not None  # Gradio encodes streamed audio with ffmpeg
    lab = Lab(pipe, outputs, streaming)
    studio = Studio(pipe, outputs)
    cuda = bool(info["cuda_available"])

    with gr.Blocks(title="Omni Speech Lab", fill_width=True, delete_cache=(3600, 3600)) as demo:
        gr.HTML(panels.header(info, streaming), elem_id="header", js_on_load=None)
        take = gr.State(None)
        pinned = gr.State(None)  # take A of an A/B comparison
        with gr.Row(equal_height=False, elem_id="main"):
            with gr.Column(scale=4, min_width=320, elem_id="controls"):
                text = gr.Textbox(label="Text", lines=3, max_lines=8, max_length=MAX_TEXT_CHARS,
                                  placeholder="Type what to say (speak) or what to ask (chat)…",
                                  value=EXAMPLES[0], elem_id="text")
                gr.Examples(EXAMPLES, inputs=[text], label="Examples")
                with gr.Row():
                    mode = gr.Radio([("speak", "speak"), ("chat", "chat")], value="speak", label="Mode",
                                    info="speak: say this text · chat: the model replies", elem_id="mode",
                                    min_width=200)
                    speaker = gr.Dropdown(info["speakers"], value=info["default_speaker"], label="Speaker",
                                          elem_id="speaker", min_width=140)
                predictor = gr.Radio(PREDICTORS, value="reprefill", label="Code predictor",
                                     info="re-prefill (CUDA-graph friendly) · KV cache · compare runs both",
                                     elem_id="predictor")
                cuda_graph = gr.Checkbox(value=cuda, interactive=cuda, label="CUDA graph for the predictor",
                                         info=None if cuda else "CUDA is not available here: the predictor runs eagerly.",
                                         elem_id="cuda-graph")
                max_frames = gr.Slider(0, MAX_FRAMES, value=0, step=1, label="Max frames",
                                       info="0 = automatic (scales with the text) · 12.5 frames per second",
                                       elem_id="max-frames")
                with gr.Accordion("Sampling (greedy unless turned on)", open=False, elem_id="sampling"):
                    do_sample = gr.Checkbox(value=False, label="Sample (off = greedy)", elem_id="do-sample")
                    with gr.Row():
                        temperature = gr.Slider(0.05, 2.0, value=0.9, step=0.05, label="Temperature")
                        top_k = gr.Slider(0, 200, value=50, step=1, label="Top-k", info="0 = off")
                    with gr.Row():
                        top_p = gr.Slider(0.01, 1.0, value=1.0, step=0.01, label="Top-p")
                        seed = gr.Number(value=0, precision=0, minimum=0, label="Seed")
                with gr.Row(elem_id="actions"):
                    generate = gr.Button("Generate", variant="primary", elem_id="generate", scale=3)
                    stop = gr.Button("Stop", variant="stop", elem_id="stop", scale=1)
                audio = gr.Audio(label="Audio" if streaming else "Audio (whole file, at the end: no ffmpeg)",
                                 streaming=streaming, autoplay=True, interactive=False, elem_id="audio",
                                 buttons=["download"])
                files = gr.File(label="Downloads", file_count="multiple",
                                interactive=False, elem_id="downloads")
            with gr.Column(scale=6, min_width=340, elem_id="results"):
                view = gr.Radio(VIEWS, value="codes", label="Heatmap view", elem_id="view",
                                info="codes · the predictor's confidence · where re-prefill and KV disagree")
                with gr.Row(equal_height=False, elem_id="hub"):
                    with gr.Column(scale=5, min_width=300):
                        heatmap = gr.Plot(figures.empty(), label="heatmap", show_label=False, elem_id="heatmap")
                        spectrogram = gr.Plot(charts.spectrogram(None, info["sample_rate"], 0, info["frame_ms"]),
                                              label="spectrogram", show_label=False, elem_id="spectrogram")
                        spectro_kind = gr.Radio(SPECTRO_KINDS, value="mel", show_label=False, container=False,
                                                elem_id="spectro-kind")
                    with gr.Column(scale=3, min_width=260):
                        cbstats = gr.Plot(charts.cbstats(None), label="codebook statistics", show_label=False,
                                          elem_id="cbstats")
                with gr.Row(equal_height=False, elem_id="inspect-row"):
                    with gr.Column(scale=3, min_width=300):
                        frame = gr.Slider(0, 1, value=0, step=1, label="Frame",
                                          info="click a heatmap column, or move this", elem_id="frame")
                        frame_view = gr.HTML(inspector.idle(), elem_id="inspector", js_on_load=None)
                    with gr.Column(scale=1, min_width=220):
                        frame_audio = gr.Audio(label="This frame ± 0.5 s", interactive=False, elem_id="frame-audio",
                                               buttons=["download"])
                stats = gr.HTML(panels.idle(), label="stats", elem_id="stats", js_on_load=None)
                with gr.Accordion("Listen with the first k codebooks", open=True, elem_id="listen"):
                    with gr.Row(equal_height=False, elem_id="listen-row"):
                        k = gr.Slider(1, info["num_code_groups"], value=4, step=1, label="k codebooks",
                                      info="CB0 alone is coarse; each codebook refines the residual",
                                      elem_id="k", scale=4)
                        listen = gr.Button("Re-decode", size="md", elem_id="listen-button", scale=1,
                                           min_width=120)
                    with gr.Row(equal_height=False):
                        without = gr.Number(0, precision=0, minimum=0, maximum=info["num_code_groups"] - 1,
                                            label="Listen without codebook j", elem_id="without", scale=4)
                        listen_without = gr.Button("Without CBj", size="md", elem_id="listen-without", scale=1,
                                                   min_width=120)
                    listen_audio = gr.Audio(label="First k codebooks / without CBj", interactive=False,
                                            elem_id="audio-k", buttons=["download"])
                with gr.Accordion("Code surgery: edit codes and hear them", open=False, elem_id="surgery"):
                    with gr.Row(equal_height=False):
                        edit_op = gr.Radio(list(OPS), value="drop", label="Edit", elem_id="edit-op",
                                           info="set a value · random codes · drop (contributes nothing)")
                        edit_cb = gr.Number(0, precision=0, label="Codebook (0..15)", elem_id="edit-codebook")
                    with gr.Row(equal_height=False):
                        edit_start = gr.Number(0, precision=0, label="From frame", elem_id="edit-start")
                        edit_end = gr.Number(None, precision=0, label="To frame (empty: the last)", elem_id="edit-end")
                        edit_value = gr.Number(0, precision=0, label="Code (set)", elem_id="edit-value")
                        edit_seed = gr.Number(0, precision=0, label="Seed (random)", elem_id="edit-seed")
                    with gr.Row():
                        edit_apply = gr.Button("Apply and re-decode", variant="primary", elem_id="edit-apply")
                        edit_restore = gr.Button("Restore original", elem_id="edit-restore")
                    edit_log = gr.HTML(inspector.edit_log([]), elem_id="edit-log", js_on_load=None)
                    edit_audio = gr.Audio(label="Edited take", interactive=False, elem_id="audio-edit",
                                          buttons=["download"])
                    edit_files = gr.File(label="Edited take: WAV and codes", file_count="multiple", interactive=False,
                                         elem_id="edit-downloads")
                with gr.Accordion("A/B takes", open=True, elem_id="ab"):
                    pin = gr.Button("Pin this take as A", elem_id="pin")
                    ab_text = gr.HTML(inspector.ab_html(None, None), elem_id="ab-summary", js_on_load=None)
                    ab_plot = gr.Plot(figures.empty("Pin a take, then make another: their differences show here"),
                                      show_label=False, elem_id="ab-diff")
                    with gr.Row():
                        audio_a = gr.Audio(label="A", interactive=False, elem_id="audio-a")
                        audio_b = gr.Audio(label="B", interactive=False, elem_id="audio-b")
                with gr.Accordion("Decode a codes file", open=False, elem_id="upload-section"):
                    upload = gr.File(label="Upload codes ([T, 16], .npy or .json)", file_types=[".npy", ".json"],
                                     type="filepath", elem_id="upload")

        # The `codes` API: whole-utterance, no streaming. Plain text inputs so the engine, not a
        # dropdown, says what a bad value is.
        with gr.Column(visible=False):
            api_inputs = [gr.Textbox(label="text"), gr.Textbox(value="speak", label="mode"),
                          gr.Textbox(value=info["default_speaker"], label="speaker"),
                          gr.Textbox(value="reprefill", label="predictor"), gr.Checkbox(False, label="do_sample"),
                          gr.Number(0, precision=0, label="seed"), gr.Number(None, precision=0, label="max_frames")]
            api_outputs = [gr.JSON(label="result"), gr.File(label="wav")]
            stats_inputs = [gr.JSON(label="codes"), gr.JSON(None, label="probs")]
            stats_output = gr.JSON(label="statistics")
            surgery_inputs = [gr.JSON(label="codes"), gr.Textbox(value="drop", label="op"),
                              gr.Number(0, precision=0, label="codebook"), gr.Number(0, precision=0, label="start"),
                              gr.Number(None, precision=0, label="end"), gr.Number(0, precision=0, label="value"),
                              gr.Number(0, precision=0, label="seed")]
            surgery_outputs = [gr.JSON(label="result"), gr.File(label="wav")]

        # --- wiring ---------------------------------------------------------------------------------
        synth_inputs = [text, mode, speaker, predictor, cuda_graph, do_sample, temperature, top_k, top_p, seed,
                        max_frames, view]
        after_take = dict(fn=studio.after_take, inputs=[take, pinned, spectro_kind],
                          outputs=[cbstats, spectrogram, frame, frame_view, ab_plot, ab_text, audio_b, edit_log,
                                   edit_audio],
                          api_visibility="private", show_progress="hidden")
        gr.on([generate.click, text.submit], lab.synthesize, inputs=synth_inputs,
              outputs=list(SynthOut(audio=audio, heatmap=heatmap, stats=stats, files=files, take=take)),
              api_name="synthesize", concurrency_id="engine", show_progress="minimal").then(**after_take)
        # Stop sets the running request's cancel flag and the request draws its own last update.
        # (Gradio's `cancels=` would drop that update, and its last live one could land after ours.)
        stop.click(lab.stop, inputs=[take], queue=False, api_visibility="private")
        view.change(lab.redraw, inputs=[view, take], outputs=[heatmap], queue=False, api_visibility="private")
        listen.click(lab.listen, inputs=[k, take], outputs=[listen_audio], concurrency_id="engine",
                     api_visibility="private")
        upload.upload(lab.upload, inputs=[upload, view], outputs=[heatmap, stats, listen_audio, k, files, take],
                      concurrency_id="engine", api_visibility="private").then(**after_take)
        frame.change(studio.inspect, inputs=[frame, take], outputs=[frame_view, frame_audio], api_visibility="private",
                     trigger_mode="always_last", show_progress="hidden")
        spectro_kind.change(studio.spectrogram, inputs=[spectro_kind, take], outputs=[spectrogram], queue=False,
                            api_visibility="private")
        surgery_outputs_page = [heatmap, edit_audio, edit_files, edit_log, cbstats, spectrogram, take, frame_view,
                                frame_audio]
        edit_apply.click(studio.edit, inputs=[edit_op, edit_cb, edit_start, edit_end, edit_value, edit_seed, take,
                                              view, spectro_kind, frame],
                         outputs=surgery_outputs_page, concurrency_id="engine", api_visibility="private")
        edit_restore.click(studio.restore, inputs=[take, view, spectro_kind, frame], outputs=surgery_outputs_page,
                           api_visibility="private")
        listen_without.click(studio.listen_without, inputs=[without, take], outputs=[listen_audio],
                             concurrency_id="engine", api_visibility="private")
        pin.click(studio.pin, inputs=[take], outputs=[pinned, ab_text, audio_a, ab_plot, audio_b],
                  api_visibility="private")
        gr.on([], studio.stats_api, inputs=stats_inputs, outputs=stats_output, api_name="codebook_stats")
        gr.on([], studio.surgery_api, inputs=surgery_inputs, outputs=surgery_outputs, api_name="surgery",
              concurrency_id="engine")
        gr.on([], lab.codes, inputs=api_inputs, outputs=api_outputs, api_name="codes", concurrency_id="engine")
    # As many handlers run at once as the engine batches; more wait in a bounded queue.
    return demo.queue(default_concurrency_limit=info["max_batch"], max_size=info["max_waiting"])


def launch_kwargs(args, outputs: OutputDir) -> dict:
    """Arguments for `Blocks.launch`. Host and port only when given, so GRADIO_SERVER_* still work."""
    kwargs = dict(share=args.share, css_paths=[STATIC / "style.css"], allowed_paths=[str(STATIC), str(outputs.root)],
                  max_file_size="5mb", theme=theme(), footer_links=["api"], js=JS)
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
