"""The page's layout: every component, placed, and nothing wired (ui.py wires them).

`page(info, streaming)` builds the components inside the caller's `gr.Blocks` and returns
them as one namespace, `p.text`, `p.heatmap`, … so that the wiring reads them by name.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from app import charts, figures, inspector, panels, scoring
from app.surgery import OPS
from omni_core import MAX_FRAMES, MAX_TEXT_CHARS

EXAMPLES = [
    "Hello there! This is Omni Speech Lab.",
    "The quick brown fox jumps over the lazy dog.",
    "Sixteen codebooks, one frame every eighty milliseconds.",
]
PREDICTORS = [("re-prefill", "reprefill"), ("KV", "kv"), ("compare", "compare")]
VIEWS = [("codes", "codes"), ("confidence", "confidence"), ("disagreement", "disagreement")]
SPECTRO_KINDS = [("log-mel", "mel"), ("waveform", "wave")]


def page(info: dict, streaming: bool) -> SimpleNamespace:
    p = SimpleNamespace()
    p.header = gr.HTML(panels.header(info, streaming), elem_id="header", js_on_load=None)
    p.take = gr.State(None)
    p.pinned = gr.State(None)  # take A of an A/B comparison
    with gr.Row(equal_height=False, elem_id="main"):
        with gr.Column(scale=4, min_width=320, elem_id="controls"):
            controls(p, info, streaming)
            own_audio(p, info)
        with gr.Column(scale=6, min_width=340, elem_id="results"):
            hub(p, info)
            tools(p, info)
    api(p, info)
    return p


def controls(p: SimpleNamespace, info: dict, streaming: bool) -> None:
    """Text, voice and decoding choices, Generate / Stop, the player and the downloads."""
    cuda = bool(info["cuda_available"])
    p.text = gr.Textbox(label="Text", lines=3, max_lines=8, max_length=MAX_TEXT_CHARS,
                        placeholder="Type what to say (speak) or what to ask (chat)…",
                        value=EXAMPLES[0], elem_id="text")
    gr.Examples(EXAMPLES, inputs=[p.text], label="Examples")
    voice(p, info)
    p.predictor = gr.Radio(PREDICTORS, value=default_predictor(info), label="Code predictor",
                           info="re-prefill (CUDA-graph friendly) · KV cache · compare runs both",
                           elem_id="predictor")
    p.cuda_graph = gr.Checkbox(value=cuda, interactive=cuda, label="CUDA graph for the predictor",
                               info=None if cuda else "CUDA is not available here: the predictor runs eagerly.",
                               elem_id="cuda-graph")
    p.max_frames = gr.Slider(0, MAX_FRAMES, value=0, step=1, label="Max frames",
                             info="0 = automatic (scales with the text) · 12.5 frames per second",
                             elem_id="max-frames")
    with gr.Accordion("Sampling (greedy unless turned on)", open=False, elem_id="sampling"):
        p.do_sample = gr.Checkbox(value=False, label="Sample (off = greedy)", elem_id="do-sample")
        with gr.Row():
            p.temperature = gr.Slider(0.05, 2.0, value=0.9, step=0.05, label="Temperature")
            p.top_k = gr.Slider(0, 200, value=50, step=1, label="Top-k", info="0 = off")
        with gr.Row():
            p.top_p = gr.Slider(0.01, 1.0, value=1.0, step=0.01, label="Top-p")
            p.seed = gr.Number(value=0, precision=0, minimum=0, label="Seed")
    with gr.Row(elem_id="actions"):
        p.generate = gr.Button("Generate", variant="primary", elem_id="generate", scale=3)
        p.stop = gr.Button("Stop", variant="stop", elem_id="stop", scale=1)
    p.audio = gr.Audio(label="Audio" if streaming else "Audio (whole file, at the end: no ffmpeg)",
                       streaming=streaming, autoplay=True, interactive=False, elem_id="audio",
                       buttons=["download"])
    p.files = gr.File(label="Downloads", file_count="multiple",
                      interactive=False, elem_id="downloads")


def default_predictor(info: dict) -> str:
    """Re-prefill where it replays as a CUDA graph; elsewhere KV: on a CPU it does 16 positions of work a
    frame instead of 135, its compiled frames batch the rows (re-prefill's run one row at a time), and
    many requests at once go faster with it (docs/benchmarks-history.md (m), (n))."""
    return "reprefill" if info["cuda_available"] else "kv"


def hub(p: SimpleNamespace, info: dict) -> None:
    """The heatmap with the spectrogram under it, codebook statistics, the frame inspector, stats."""
    with gr.Row(equal_height=False, elem_id="view-row"):
        p.view = gr.Radio(VIEWS, value="codes", label="Heatmap view", elem_id="view", scale=4,
                          info="codes · the predictor's confidence · where re-prefill and KV disagree")
        p.score_take = gr.Button("Score this take", elem_id="score-take", scale=1, min_width=150,
                                 size="md")
    p.score_status = gr.HTML(scoring.status(None), elem_id="score-status", js_on_load=None)
    with gr.Row(equal_height=False, elem_id="hub"):
        with gr.Column(scale=5, min_width=300):
            p.heatmap = gr.Plot(figures.empty(), label="heatmap", show_label=False, elem_id="heatmap")
            p.spectrogram = gr.Plot(charts.spectrogram(None, info["sample_rate"], 0, info["frame_ms"]),
                                    label="spectrogram", show_label=False, elem_id="spectrogram")
            p.spectro_kind = gr.Radio(SPECTRO_KINDS, value="mel", show_label=False, container=False,
                                      elem_id="spectro-kind")
        with gr.Column(scale=3, min_width=260):
            p.cbstats = gr.Plot(charts.cbstats(None), label="codebook statistics", show_label=False,
                                elem_id="cbstats")
    with gr.Row(equal_height=False, elem_id="inspect-row"):
        with gr.Column(scale=3, min_width=300):
            p.frame = gr.Slider(0, 1, value=0, step=1, label="Frame",
                                info="click a heatmap column, or move this", elem_id="frame")
            p.frame_view = gr.HTML(inspector.idle(), elem_id="inspector", js_on_load=None)
        with gr.Column(scale=1, min_width=220):
            p.frame_audio = gr.Audio(label="This frame ± 0.5 s", interactive=False, elem_id="frame-audio",
                                     buttons=["download"])
    p.stats = gr.HTML(panels.idle(), label="stats", elem_id="stats", js_on_load=None)


def voice(p: SimpleNamespace, info: dict) -> None:
    """What the loaded model can vary: mode (Qwen3-Omni), speaker, language, instruction (VoiceDesign),
    how the text is fed, and a voice to clone (a Base model). What it cannot use is hidden."""
    speakers, languages = info.get("speakers") or [], info.get("languages") or []
    # live: the text fed word by word as it is "written" (Pipeline.stream_text), at the rate below
    text_inputs = (info.get("text_input") or ["streaming"]) + (["live"] if info.get("live_text") else [])
    with gr.Row():
        p.mode = gr.Radio([("speak", "speak"), ("chat", "chat")], value="speak", label="Mode",
                          info="speak: say this text · chat: the model replies", elem_id="mode",
                          min_width=200, visible=info.get("chat", True))
        p.speaker = gr.Dropdown(speakers, value=info.get("default_speaker") if speakers else None, label="Speaker",
                                elem_id="speaker", min_width=140, visible=bool(speakers))
        p.language = gr.Dropdown(["auto", *[lang for lang in languages if lang != "auto"]], value="auto",
                                 label="Language", elem_id="language", min_width=140, visible=bool(languages))
    p.instruct = gr.Textbox(label="Voice instruction", lines=2, max_length=MAX_TEXT_CHARS, elem_id="instruct",
                            placeholder="Describe the voice: e.g. a calm, low voice, speaking slowly",
                            visible=bool(info.get("instruct")))
    p.text_input = gr.Radio(text_inputs, value=info.get("default_text_input", text_inputs[0]), label="Text input",
                            info="whole: all the text in the prompt · streaming: one text token per frame · "
                                 "live: streaming, the text fed word by word as if still being written",
                            elem_id="text-input", visible=len(text_inputs) > 1)
    p.feed_rate = gr.Slider(1, 20, value=4, step=1, label="Live text: words per second", elem_id="feed-rate",
                            visible=bool(info.get("live_text")))
    with gr.Accordion("Voice to clone", open=True, elem_id="clone-voice", visible=bool(info.get("clone"))):
        p.ref_audio = gr.Audio(sources=["upload", "microphone"], type="numpy", label="Reference clip",
                               elem_id="reference-audio")
        p.ref_text = gr.Textbox(label="Its transcript (empty: clone the voice alone)", lines=2,
                                elem_id="reference-text")


def own_audio(p: SimpleNamespace, info: dict) -> None:
    """Bring your own audio: record or upload, encode, hear the round trip, see the ablation, clone."""
    can = bool(info.get("can_encode"))
    with gr.Accordion("Your own audio: record or upload, see its codes", open=can, elem_id="own-audio"):
        if not can:
            gr.HTML('<div class="callout">This model\'s codec has no encoder (Qwen3-Omni publishes none), so '
                    'audio cannot be turned into codes here. Load a Qwen3-TTS model, e.g. '
                    '<code>python app.py --model tiny-tts</code>.</div>', elem_id="no-encoder")
        p.audio_in = gr.Audio(sources=["upload", "microphone"], type="numpy", label="Record or upload a clip",
                              elem_id="audio-in", interactive=can,
                              waveform_options=gr.WaveformOptions(show_recording_waveform=True))
        with gr.Row():
            p.encode = gr.Button("Encode into codes", variant="primary", elem_id="encode", interactive=can)
            p.clone = gr.Button("Clone this voice: say the text box", elem_id="clone",
                                visible=bool(info.get("clone")))
        p.clone_text = gr.Textbox(label="What the clip says (for the clone; empty: the voice alone)",
                                  elem_id="clone-text", visible=bool(info.get("clone")))
        p.roundtrip = gr.HTML('<div class="roundtrip idle">Encode a clip: how close its re-decode is shows here.</div>',
                              elem_id="roundtrip", js_on_load=None)
        with gr.Row():
            p.audio_original = gr.Audio(label="Original (as the codec hears it)", interactive=False,
                                        elem_id="audio-original")
            p.audio_redecoded = gr.Audio(label="Re-decoded from its codes", interactive=False,
                                         elem_id="audio-redecoded")
        p.ablation = gr.Plot(charts.ablation(None), show_label=False, elem_id="ablation")


def tools(p: SimpleNamespace, info: dict) -> None:
    """First-k listening, code surgery, A/B takes, decoding a codes file."""
    with gr.Accordion("Listen with the first k codebooks", open=True, elem_id="listen"):
        with gr.Row(equal_height=False, elem_id="listen-row"):
            p.k = gr.Slider(1, info["num_code_groups"], value=4, step=1, label="k codebooks",
                            info="CB0 alone is coarse; each codebook refines the residual",
                            elem_id="k", scale=4)
            p.listen = gr.Button("Re-decode", size="md", elem_id="listen-button", scale=1,
                                 min_width=120)
        with gr.Row(equal_height=False):
            p.without = gr.Number(0, precision=0, minimum=0, maximum=info["num_code_groups"] - 1,
                                  label="Listen without codebook j", elem_id="without", scale=4)
            p.listen_without = gr.Button("Without CBj", size="md", elem_id="listen-without", scale=1,
                                         min_width=120)
        p.listen_audio = gr.Audio(label="First k codebooks / without CBj", interactive=False,
                                  elem_id="audio-k", buttons=["download"])
    with gr.Accordion("Code surgery: edit codes and hear them", open=False, elem_id="surgery"):
        with gr.Row(equal_height=False):
            p.edit_op = gr.Radio(list(OPS), value="drop", label="Edit", elem_id="edit-op",
                                 info="set a value · random codes · drop (contributes nothing)")
            p.edit_cb = gr.Number(0, precision=0, label="Codebook (0..15)", elem_id="edit-codebook")
        with gr.Row(equal_height=False):
            p.edit_start = gr.Number(0, precision=0, label="From frame", elem_id="edit-start")
            p.edit_end = gr.Number(-1, precision=0, label="To frame (-1: the last)", elem_id="edit-end")
            p.edit_value = gr.Number(0, precision=0, label="Code (set)", elem_id="edit-value")
            p.edit_seed = gr.Number(0, precision=0, label="Seed (random)", elem_id="edit-seed")
        with gr.Row():
            p.edit_apply = gr.Button("Apply and re-decode", variant="primary", elem_id="edit-apply")
            p.edit_restore = gr.Button("Restore original", elem_id="edit-restore")
        p.edit_log = gr.HTML(inspector.edit_log([]), elem_id="edit-log", js_on_load=None)
        p.edit_audio = gr.Audio(label="Edited take", interactive=False, elem_id="audio-edit",
                                buttons=["download"])
        p.edit_files = gr.File(label="Edited take: WAV and codes", file_count="multiple", interactive=False,
                               elem_id="edit-downloads")
    with gr.Accordion("A/B takes", open=True, elem_id="ab"):
        p.pin = gr.Button("Pin this take as A", elem_id="pin")
        p.ab_text = gr.HTML(inspector.ab_html(None, None), elem_id="ab-summary", js_on_load=None)
        p.ab_plot = gr.Plot(figures.empty("Pin a take, then make another: their differences show here"),
                            show_label=False, elem_id="ab-diff")
        with gr.Row():
            p.audio_a = gr.Audio(label="A", interactive=False, elem_id="audio-a")
            p.audio_b = gr.Audio(label="B", interactive=False, elem_id="audio-b")
    with gr.Accordion("Decode a codes file", open=False, elem_id="upload-section"):
        p.upload = gr.File(label="Upload codes ([T, 16], .npy or .json)", file_types=[".npy", ".json"],
                           type="filepath", elem_id="upload")


def api(p: SimpleNamespace, info: dict) -> None:
    # The `codes` API: whole-utterance, no streaming. Plain text inputs so the engine, not a
    # dropdown, says what a bad value is.
    with gr.Column(visible=False):
        p.api_inputs = [gr.Textbox(label="text"), gr.Textbox(value="speak", label="mode"),
                        gr.Textbox(value=info["default_speaker"], label="speaker"),
                        gr.Textbox(value="reprefill", label="predictor"), gr.Checkbox(False, label="do_sample"),
                        gr.Number(0, precision=0, label="seed"), gr.Number(None, precision=0, label="max_frames"),
                        gr.Textbox(None, label="language"), gr.Textbox(None, label="instruct")]
        p.api_outputs = [gr.JSON(label="result"), gr.File(label="wav")]
        p.stats_inputs = [gr.JSON(label="codes"), gr.JSON(None, label="probs")]
        p.stats_output = gr.JSON(label="statistics")
        p.surgery_inputs = [gr.JSON(label="codes"), gr.Textbox(value="drop", label="op"),
                            gr.Number(0, precision=0, label="codebook"), gr.Number(0, precision=0, label="start"),
                            gr.Number(None, precision=0, label="end"), gr.Number(0, precision=0, label="value"),
                            gr.Number(0, precision=0, label="seed")]
        p.surgery_outputs = [gr.JSON(label="result"), gr.File(label="wav")]
        p.encode_inputs = [gr.Audio(type="numpy", label="audio")]
        p.encode_outputs = [gr.JSON(label="result"), gr.File(label="wav")]
        p.score_inputs = [gr.File(label="codes", type="filepath", file_types=[".npy", ".json"]),
                          gr.Textbox(label="text"), gr.Textbox(value="speak", label="mode"),
                          gr.Textbox(value=info["default_speaker"], label="speaker"),
                          gr.Textbox(value="reprefill", label="predictor"), gr.Checkbox(False, label="do_sample"),
                          gr.Number(None, label="temperature"), gr.Number(None, precision=0, label="top_k"),
                          gr.Number(None, label="top_p"), gr.Textbox(None, label="language"),
                          gr.Textbox(None, label="instruct"), gr.Number(5, precision=0, label="k")]
        p.score_output = gr.JSON(label="scores")

