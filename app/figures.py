"""Plotly figures of the 16 codebooks: rows CB0 (top) .. CB15, one column per 80 ms frame.

Three views of the same frames: the code values (fixed colour range 0..codebook_size-1),
the probability the sampler gave each chosen code, and where the re-prefill and KV
predictors disagreed (compare mode).

Payload: a plotly heatmap with hover data costs ~650 bytes per frame, and Gradio resends
the whole figure at every live update. Up to HOVER_FRAMES frames the figure is a heatmap
with full hover (frame, time, code, probability); longer takes, and every live update, are
drawn as a palette PNG of the grid (1 byte per cell before compression; live updates at
most LIVE_COLUMNS columns wide), and the frame inspector shows a frame's values on demand.
Edited cells (code surgery) are outlined.
"""

from __future__ import annotations

import base64
import io
import textwrap

import numpy as np
import plotly.graph_objects as go
from PIL import Image
from plotly.colors import sample_colorscale

VIEWS = ("codes", "confidence", "disagreement")
HEIGHT = 400
FONT = "Inter, ui-sans-serif, system-ui, sans-serif"
CODES_SCALE = "Viridis"
CONFIDENCE_SCALE = "Magma"
DISAGREE_SCALE = [[0.0, "#e2e8f0"], [0.5, "#e2e8f0"], [0.5, "#dc2626"], [1.0, "#dc2626"]]
HOVER_FRAMES = 120  # up to this many frames: a heatmap with per-cell hover (≈ 80 KB)
LIVE_COLUMNS = 400  # live updates: at most this many image columns (frames are strided beyond)
MAX_MARKS = 200  # edited-cell outlines drawn at most
EDIT_COLOUR = "#f43f5e"
# Confidence is drawn on a log scale, 10^LOG_FLOOR (clipped below) .. 1: a model's p(code) spans decades
# (random weights give every code about 1/2048), and a linear scale draws everything under 0.1 black.
LOG_FLOOR = -4
LOG_TICKS = dict(tickvals=list(range(LOG_FLOOR, 1)), ticktext=["1e-4", "0.001", "0.01", "0.1", "1"])
NO_CONFIDENCE = ("No confidence for these codes yet: they were not generated here (a recording, a codes file, or "
                 "an edit). Press Score this take to score them under the model")
EMPTY_LINE_CHARS = 38  # an empty figure's message: ~270 px a line at 14 px


def empty(message: str = "Press Generate: the 16 codebooks fill in here as frames arrive") -> go.Figure:
    fig = go.Figure()
    _layout(fig, "")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    # Plotly never wraps an annotation: short lines, so the message fits a phone-wide plot too.
    fig.add_annotation(text="<br>".join(textwrap.wrap(message, EMPTY_LINE_CHARS)), showarrow=False, x=0.5, y=0.5,
                       xref="paper", yref="paper",
                       font=dict(size=14, color="#64748b"))
    return fig


def heatmap(codes: np.ndarray | None, probs: np.ndarray | None = None, mismatch: np.ndarray | None = None,
            view: str = "codes", *, frame_ms: int = 80, codebook_size: int = 2048,
            live: bool = False, edited: np.ndarray | None = None) -> go.Figure:
    """codes, probs, mismatch, edited: [T, 16] (or None). Returns the figure for `view`."""
    if codes is None or len(codes) == 0:
        return empty()
    T, G = codes.shape
    frame_s = frame_ms / 1000
    if live or T > HOVER_FRAMES:
        return _image_heatmap(codes, probs, mismatch, view, frame_s, codebook_size, live, edited)
    rows = [f"CB{g}" for g in range(G)]
    # customdata [G, T, 3]: frame index, code, probability, for the hover label
    frame_idx = np.broadcast_to(np.arange(T), (G, T))
    p = probs if probs is not None else np.full((T, G), np.nan, np.float32)
    custom = np.stack([frame_idx, codes.T, np.round(p.T * 1000) / 1000], axis=-1)
    hover = ("frame %{customdata[0]} · t = %{x:.2f} s<br>%{y} · code %{customdata[1]}"
             "<br>p = %{customdata[2]:.3f}<extra></extra>")
    common = dict(x0=frame_s / 2, dx=frame_s, y=rows, customdata=custom, hovertemplate=hover,
                  xgap=0, ygap=1)
    seconds = T * frame_s
    state = "generating… " if live else ""

    if view == "confidence":
        if probs is None:
            return empty(NO_CONFIDENCE)
        trace = go.Heatmap(z=log_p(probs).T, zmin=LOG_FLOOR, zmax=0, colorscale=CONFIDENCE_SCALE,
                           colorbar=_colorbar("p(code), log", **LOG_TICKS), **common)
        title = f"{state}confidence p(code) · {T} frames · {seconds:.2f} s"
    elif view == "disagreement":
        if mismatch is None:
            return empty("Disagreement needs predictor = compare: run with 'compare' to see it")
        count = int(mismatch.sum())
        where = "nowhere" if count == 0 else f"in {count} of {mismatch.size} codes"
        trace = go.Heatmap(z=mismatch.T.astype(np.int8), zmin=0, zmax=1, colorscale=DISAGREE_SCALE,
                           colorbar=_colorbar("", tickvals=[0.25, 0.75], ticktext=["same", "differs"]),
                           **common)
        title = f"{state}re-prefill vs KV: differ {where} · {T} frames"
    else:
        trace = go.Heatmap(z=codes.T, zmin=0, zmax=codebook_size - 1, colorscale=CODES_SCALE,
                           colorbar=_colorbar("code"), **common)
        title = f"{state}codes · {T} frames · {seconds:.2f} s"

    fig = go.Figure(trace)
    _layout(fig, title)
    time_axis(fig, T * frame_s)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=rows, ticktext=rows,
                     tickfont=dict(size=10))
    _mark(fig, edited, frame_s, rows)
    return fig


def log_p(probs: np.ndarray) -> np.ndarray:
    """log10 of the probabilities, clipped to LOG_FLOOR..0 (what the confidence view draws)."""
    return np.clip(np.log10(np.maximum(probs, 10.0 ** LOG_FLOOR)), LOG_FLOOR, 0)


def _image_heatmap(codes, probs, mismatch, view, frame_s, codebook_size, live, edited) -> go.Figure:
    """The same views as one palette PNG (colours quantised to 256 levels), strided to LIVE_COLUMNS
    columns while live. Hover names the time and codebook; the inspector has the values."""
    T, G = codes.shape
    state = "generating… " if live else ""
    if view == "confidence":
        if probs is None:
            return empty(NO_CONFIDENCE)
        levels, scale, zmax, label = (1 - log_p(probs) / LOG_FLOOR) * 255, CONFIDENCE_SCALE, None, "p(code), log"
        title = f"{state}confidence p(code) · {T} frames · {T * frame_s:.2f} s"
    elif view == "disagreement":
        if mismatch is None:
            return empty("Disagreement needs predictor = compare: run with 'compare' to see it")
        levels, scale, zmax, label = mismatch * 255, DISAGREE_SCALE, 1, ""
        count = int(mismatch.sum())
        where = "nowhere" if count == 0 else f"in {count} of {mismatch.size} codes"
        title = f"{state}re-prefill vs KV: differ {where} · {T} frames"
    else:
        levels, scale, zmax, label = codes * 256 // codebook_size, CODES_SCALE, codebook_size - 1, "code"
        title = f"{state}codes · {T} frames · {T * frame_s:.2f} s"
    stride = -(-T // LIVE_COLUMNS) if live else 1
    fig = grid_image(levels[::stride].T.astype(np.uint8), scale, stride * frame_s,
                     hover="t = %{x:.2f} s · CB%{y}<br>click: this frame's codes<extra></extra>")
    fig.add_trace(_colorbar_trace(scale, zmax, label))
    _layout(fig, title)
    fig.update_layout(template="none", font_color="#334155")  # plotly_white's ~6.5 KB template, resent at
    # every update, is a third of a live update; the image needs none of it
    time_axis(fig, T * frame_s)
    rows = list(range(G))
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=rows, ticktext=[f"CB{g}" for g in rows],
                     tickfont=dict(size=10), range=[G - 0.5, -0.5])
    _mark(fig, edited, frame_s, rows)
    return fig


def grid_image(levels: np.ndarray, scale, col_s: float, hover: str) -> go.Figure:
    """levels [rows, cols] uint8 (0..255 along `scale`) → a figure holding them as one PNG image:
    column c spans [c·col_s, (c+1)·col_s) seconds, row r sits at y = r."""
    fig = go.Figure(go.Image(source=png_uri(levels, scale), x0=col_s / 2, dx=col_s, y0=0, dy=1,
                             hovertemplate=hover))
    fig.update_yaxes(scaleanchor=False)  # an image keeps square pixels unless told not to: fill the plot
    fig.update_xaxes(constrain="range")
    return fig


def png_uri(levels: np.ndarray, scale) -> str:
    """levels [H, W] uint8 → a data: URI of a palette PNG coloured by the plotly colour scale."""
    image = Image.fromarray(np.ascontiguousarray(levels), mode="P")
    image.putpalette(_palette(scale))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _palette(scale) -> list[int]:
    colours = sample_colorscale(scale, np.linspace(0, 1, 256), colortype="tuple")
    return [round(255 * c) for rgb in colours for c in rgb[:3]]


def _colorbar_trace(scale, zmax, label: str) -> go.Scatter:
    """An invisible trace that draws the colour bar a PNG image cannot have (zmax None: confidence's log scale)."""
    low, high, ticks = (LOG_FLOOR, 0, LOG_TICKS) if zmax is None else (0, zmax, {})
    return go.Scatter(x=[None], y=[None], mode="markers", hoverinfo="skip", showlegend=False,
                      marker=dict(colorscale=scale, cmin=low, cmax=high, color=[low], showscale=True,
                                  colorbar=_colorbar(label, **ticks)))


def time_axis(fig: go.Figure, seconds: float) -> None:
    """The shared x-axis: seconds from 0; the heatmap and the spectrogram use the same range."""
    fig.update_xaxes(title_text="time (s)", range=[0, max(seconds, 1.0)], ticksuffix=" s")


def _mark(fig: go.Figure, edited: np.ndarray | None, frame_s: float, rows: list) -> None:
    """Outline each run of edited cells (per codebook) with a rectangle."""
    if edited is None or not edited.any():
        return
    shapes = []
    for g in range(edited.shape[1]):
        cells = np.flatnonzero(edited[:, g])
        if not len(cells):
            continue
        breaks = np.flatnonzero(np.diff(cells) > 1)
        for first, last in zip(cells[np.r_[0, breaks + 1]], cells[np.r_[breaks, len(cells) - 1]]):
            shapes.append(dict(type="rect", x0=first * frame_s, x1=(last + 1) * frame_s, y0=g - 0.5, y1=g + 0.5,
                               line=dict(color=EDIT_COLOUR, width=2), fillcolor="rgba(244,63,94,0.25)"))
    fig.update_layout(shapes=shapes[:MAX_MARKS])
    fig.update_layout(title_text=f"{fig.layout.title.text} · {int(edited.sum())} edited cells (outlined)")


def _colorbar(title: str, **ticks) -> dict:
    return dict(title=dict(text=title, side="right"), thickness=12, len=0.9, outlinewidth=0, **ticks)


def _layout(fig: go.Figure, title: str) -> None:
    fig.update_layout(
        title=dict(text=title, x=0.01, xanchor="left", font=dict(size=14)),
        height=HEIGHT, margin=dict(l=48, r=16, t=44, b=40),
        font=dict(family=FONT, size=12), template="plotly_white",
        paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
        hoverlabel=dict(font=dict(family=FONT)),
    )
