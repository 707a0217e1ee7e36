"""Plotly figures of the 16 codebooks: rows CB0 (top) .. CB15, one column per 80 ms frame.

Three views of the same frames: the code values (fixed colour range 0..codebook_size-1),
the probability the sampler gave each chosen code, and where the re-prefill and KV
predictors disagreed (compare mode).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

VIEWS = ("codes", "confidence", "disagreement")
HEIGHT = 400
FONT = "Inter, ui-sans-serif, system-ui, sans-serif"
CODES_SCALE = "Viridis"
CONFIDENCE_SCALE = "Magma"
DISAGREE_SCALE = [[0.0, "#e2e8f0"], [0.5, "#e2e8f0"], [0.5, "#dc2626"], [1.0, "#dc2626"]]


def empty(message: str = "Press Generate: the 16 codebooks fill in here as frames arrive") -> go.Figure:
    fig = go.Figure()
    _layout(fig, "")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=14, color="#64748b"))
    return fig


def heatmap(codes: np.ndarray | None, probs: np.ndarray | None = None, mismatch: np.ndarray | None = None,
            view: str = "codes", *, frame_ms: int = 80, codebook_size: int = 2048,
            live: bool = False) -> go.Figure:
    """codes, probs, mismatch: [T, 16] (or None). Returns the figure for `view`."""
    if codes is None or len(codes) == 0:
        return empty()
    T, G = codes.shape
    frame_s = frame_ms / 1000
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
            return empty("No confidence for these codes (uploaded codes carry no probabilities)")
        trace = go.Heatmap(z=probs.T, zmin=0.0, zmax=1.0, colorscale=CONFIDENCE_SCALE,
                           colorbar=_colorbar("p(code)"), **common)
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
    fig.update_xaxes(title_text="time (s)", range=[0, max(seconds, 1.0)], ticksuffix=" s")
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=rows, ticktext=rows,
                     tickfont=dict(size=10))
    return fig


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
