"""HTML for the header (what is loaded) and the stats panel (timings, counts, spoken text)."""

from __future__ import annotations

from html import escape

PREDICTOR_NAMES = {"reprefill": "re-prefill", "kv": "KV cache", "compare": "compare (re-prefill vs KV)"}
STOPPED = {"eos": "finished (end of speech)", "max_frames": "reached the frame limit",
           "cancelled": "Stopped: what was made so far is drawn and can be downloaded"}
STAGES = ("thinker", "talker", "predictor", "codec")



FAMILIES = {  # the stages drawn in the header, and a line about the family
    "qwen3_omni": (("text", "thinker", "talker · CB0", "code predictor · CB1–15", "Code2Wav"),
                   "Qwen3-Omni's speech path, heard as it is made and drawn codebook by codebook."),
    "qwen3_tts": (("text", "talker · CB0", "code predictor · CB1–15", "12 Hz codec"),
                  "Qwen3-TTS, heard as it is made and drawn codebook by codebook."),
}
REAL_MODELS = {"qwen3_omni": "python app.py --model Qwen/Qwen3-Omni-30B-A3B-Instruct --device cuda",
               "qwen3_tts": "python app.py --model Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"}


def header(info: dict, streaming: bool) -> str:
    """The page title, the speech path, and a plain statement of which model is loaded."""
    family = info.get("family", "qwen3_omni")
    stages, lead = FAMILIES.get(family, FAMILIES["qwen3_omni"])
    path = "".join(f'<span class="stage">{escape(s)}</span><span class="arrow">→</span>' for s in stages)
    compiled = (", compiling: eager until it is ready" if info.get("compiling") else
                ", torch.compile'd" if info.get("compiled") else "")
    voices = f'{len(info["speakers"])} speakers · ' if info.get("speakers") else ""
    loaded = (f'<b>{escape(info["name"])}</b> on <b>{escape(info["device"])}</b> ({escape(info["dtype"])}{compiled}) · '
              f'{voices}{info["num_code_groups"]} codebooks × {info["codebook_size"]} codes · '
              f'{info["frame_ms"]:g} ms per frame · {info["sample_rate"] // 1000} kHz')
    parts = [
        '<div class="lab-header">',
        '<h1>Omni Speech Lab</h1>',
        f'<p class="lead">{escape(lead)}</p>',
        f'<div class="path">{path}<span class="stage out">{info["sample_rate"] // 1000} kHz audio</span></div>',
        f'<p class="loaded">Loaded: {loaded}</p>',
    ]
    if info.get("random_weights"):
        parts.append(
            '<div class="callout warn"><b>Random weights.</b> This model has the exact architecture but random '
            'weights: the codes are structurally real (16 codebooks, 2048 codes each, 12.5 frames per second), '
            'the audio is not speech. To hear speech, start the app on a real checkpoint: '
            f'<code>{escape(REAL_MODELS.get(family, REAL_MODELS["qwen3_omni"]))}</code></div>')
    if not streaming:
        parts.append(
            '<div class="callout">ffmpeg is not installed, so audio cannot stream: the player gets the whole '
            'utterance when it is finished. Install ffmpeg (<code>apt-get install ffmpeg</code>) for streaming.</div>')
    parts.append("</div>")
    return "".join(parts)


def idle() -> str:
    return '<div class="stats idle">Timings, counts and the spoken text appear here.</div>'


def running(predictor: str, frames: int, frame_s: float, elapsed_s: float, first_audio_s: float | None,
            text: str, batch: int = 1) -> str:
    """The panel while frames are still arriving; `batch`: requests in the engine's last step."""
    first = "…" if first_audio_s is None else _ms(first_audio_s)
    cards = [("frames", str(frames)), ("audio", f"{frames * frame_s:.2f} s"),
             ("elapsed", f"{elapsed_s:.2f} s"), ("first audio", first), ("sharing the step", _sharing(batch))]
    return _panel(f"Generating with the <b>{escape(PREDICTOR_NAMES.get(predictor, predictor))}</b> predictor…",
                  cards, "", [], text)


def finished(stats: dict, text: str) -> str:
    """The panel for a finished (or stopped) request, from `Stats.to_dict()`."""
    predictor = PREDICTOR_NAMES.get(stats["predictor"], stats["predictor"])
    graph = " + CUDA graph" if stats.get("cuda_graph") else ""
    status = STOPPED.get(stats.get("stopped"), stats.get("stopped") or "")
    title = (f'<b>{escape(predictor)}</b> predictor{graph} · {escape(stats["device"])} · '
             f'{escape(stats["dtype"])} · {escape(status)}')
    per_frame = stats.get("predictor_ms_per_frame")
    cards = [
        ("first audio", _ms(stats.get("first_audio_s"))),
        ("real-time factor", "–" if stats.get("rtf") is None else f'{stats["rtf"]:.2f}×'),
        ("frames · audio", f'{stats["frames"]} · {stats["audio_s"]:.2f} s'),
        ("predictor / frame", "–" if per_frame is None else f"{per_frame:.2f} ms"),
    ]
    if stats.get("batch_max"):
        shared = ("alone" if stats["batch_max"] <= 1
                  else f'up to {stats["batch_max"]} · mean {stats["batch_mean"]:.1f}')
        cards.append(("requests per engine step", shared))
    if stats.get("mismatches") is not None:
        cards.append(("predictor mismatches", str(stats["mismatches"])))
    if stats.get("text_wait_s"):  # live text: the talker caught up with the writer
        cards.append(("waited for text", f'{stats["text_wait_s"]:.2f} s'))
    return _panel(title, cards, _stage_bar(stats), stats.get("warnings") or [], text)


def _sharing(batch: int) -> str:
    """How many requests the engine advanced together (this one included)."""
    return "alone" if batch <= 1 else f"{batch} requests"


def uploaded(frames: int, frame_s: float, name: str) -> str:
    cards = [("frames", str(frames)), ("audio", f"{frames * frame_s:.2f} s")]
    return _panel(f"Uploaded codes <b>{escape(name)}</b>, decoded with all 16 codebooks", cards, "", [], "")


def encoded(frames: int, frame_s: float, measured: dict) -> str:
    """The stats panel for a recording turned into codes by the codec's encoder."""
    cards = [("frames", str(frames)), ("audio", f"{frames * frame_s:.2f} s"),
             ("log-mel distance", f'{measured["mel_distance"]:.2f} dB'), ("SNR", _db(measured["snr_db"]))]
    return _panel("Your recording, encoded with the codec's encoder and re-decoded from its 16 codebooks "
                  "(for each code's probability under the model: type what it says in Text and press Score this take)", cards, "", [], "")


def roundtrip(measured: dict, meaning: str) -> str:
    """The round trip's measures with a sentence on what they mean."""
    return (f'<div class="roundtrip"><p><b>Round trip</b>: log-mel distance <b>{measured["mel_distance"]:.2f} dB</b> · '
            f'SNR <b>{escape(_db(measured["snr_db"]))}</b></p><p class="meaning">{escape(meaning)}</p></div>')


def _db(value: float | None) -> str:
    return "exact" if value is None else f"{value:.1f} dB"


def _panel(title: str, cards: list[tuple[str, str]], bar: str, warnings: list[str], text: str) -> str:
    card_html = "".join(f'<div class="card"><span class="value">{escape(v)}</span>'
                        f'<span class="label">{escape(k)}</span></div>' for k, v in cards)
    warn_html = "".join(f'<li>{escape(w)}</li>' for w in warnings)
    parts = [f'<div class="stats"><p class="title">{title}</p><div class="cards">{card_html}</div>{bar}']
    if warn_html:
        parts.append(f'<ul class="warnings">{warn_html}</ul>')
    if text:
        parts.append(f'<blockquote class="spoken"><span class="label">spoken text</span>{escape(text)}</blockquote>')
    parts.append("</div>")
    return "".join(parts)


def _stage_bar(stats: dict) -> str:
    """Time per stage as a stacked bar, with the numbers underneath."""
    times = {s: max(float(stats.get(f"{s}_s") or 0.0), 0.0) for s in STAGES}
    total = sum(times.values()) or 1.0
    segments = "".join(f'<span class="seg {s}" style="width:{100 * t / total:.1f}%" title="{s} {_ms(t)}"></span>'
                       for s, t in times.items())
    legend = "".join(f'<span class="key"><i class="dot {s}"></i>{s} {_ms(t)}</span>' for s, t in times.items())
    total_s = stats.get("total_s")
    total_html = f'<span class="key total">total {_ms(total_s)}</span>' if total_s else ""
    return f'<div class="bar">{segments}</div><div class="legend">{legend}{total_html}</div>'


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"
