"""The figures that hang off the heatmap's axes: codebook statistics (beside it, one row per
codebook), the aligned spectrogram / waveform (under it, the same time range) and the A/B
diff of two takes (the same grid)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import spectrum
from app.figures import FONT, _colorbar_trace, _layout, empty, grid_image, time_axis

STATS_HEIGHT = 400
SPECTRO_HEIGHT = 220
SPECTRO_SCALE = "Magma"
DIFF_SCALE = [[0.0, "#e2e8f0"], [1.0, "#dc2626"]]
STAT_PANELS = (("utilization", "used", "#6366f1"), ("entropy_bits", "bits", "#0ea5e9"),
               ("mean_prob", "mean p", "#f59e0b"), ("repeat_rate", "repeat", "#10b981"))


def cbstats(stats: dict | None) -> go.Figure:
    """Four small bar charts side by side, one bar per codebook, CB0 on top (as in the heatmap)."""
    if not stats:
        fig = empty("Codebook statistics appear here")
        fig.update_layout(height=STATS_HEIGHT)
        return fig
    G = len(stats["utilization"])
    rows = [f"CB{g}" for g in range(G)]
    fig = make_subplots(rows=1, cols=len(STAT_PANELS), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[label for _, label, _ in STAT_PANELS])
    for i, (key, label, colour) in enumerate(STAT_PANELS, start=1):
        values = [np.nan if v is None else v for v in stats[key]]
        fig.add_trace(go.Bar(x=values, y=rows, orientation="h", marker_color=colour, name=label,
                             hovertemplate=f"%{{y}} · {label} %{{x:.3f}}<extra></extra>"), row=1, col=i)
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=10))
    fig.update_xaxes(showticklabels=False, showgrid=True)  # the values are in the hover labels
    fig.update_xaxes(range=[0, 11], row=1, col=2)
    fig.update_xaxes(range=[0, 1], row=1, col=3)
    fig.update_xaxes(range=[0, 1], row=1, col=4)
    fig.update_layout(height=STATS_HEIGHT, margin=dict(l=44, r=8, t=64, b=30), showlegend=False,
                      font=dict(family=FONT, size=11), template="plotly_white", bargap=0.15,
                      paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
                      title=dict(text=f"per codebook · {stats['frames']} frames<br><sup>used = distinct/2048 · "
                                      "entropy bits · mean p · repeat rate</sup>", x=0.01, font=dict(size=13)))
    fig.update_annotations(font_size=11)
    return fig


def spectrogram(audio: np.ndarray, sample_rate: int, frames: int, frame_ms: float, kind: str = "mel") -> go.Figure:
    """The take's log-mel spectrogram (or waveform envelope) on the heatmap's time axis:
    x from 0 to max(frames · frame, 1 s), exactly as `figures.heatmap`."""
    if audio is None or len(audio) == 0:
        fig = empty("The spectrogram of the take appears here, aligned with the codes")
        fig.update_layout(height=SPECTRO_HEIGHT)
        return fig
    hop = spectrum.hop_for(len(audio), int(round(sample_rate * frame_ms / 1000)))
    col_s = hop / sample_rate
    if kind == "wave":
        low, high = spectrum.envelope(audio, hop)
        t = (np.arange(len(low)) + 0.5) * col_s
        fig = go.Figure([go.Scatter(x=t, y=np.round(high, 4), mode="lines", line=dict(width=0.8, color="#6366f1"),
                                    hoverinfo="skip"),
                         go.Scatter(x=t, y=np.round(low, 4), mode="lines", fill="tonexty", hoverinfo="skip",
                                    line=dict(width=0.8, color="#6366f1"), fillcolor="rgba(99,102,241,0.35)")])
        fig.add_trace(_colorbar_trace(SPECTRO_SCALE, 1, "amplitude"))  # keeps the plot area the heatmap's width
        fig.update_yaxes(range=[-1, 1], title_text="amplitude")
        title = "waveform"
    else:
        mel = spectrum.log_mel(audio, sample_rate, hop)
        top = float(mel.max())
        levels = np.clip((mel - (top - 80)) / 80 * 255, 0, 255)[::-1].astype(np.uint8)  # 80 dB range, low at bottom
        fig = grid_image(levels, SPECTRO_SCALE, col_s, hover="t = %{x:.2f} s<extra></extra>")
        fig.add_trace(_colorbar_trace(SPECTRO_SCALE, 80, "dB (rel.)"))
        fig.update_yaxes(range=[len(levels) - 0.5, -0.5], showticklabels=False, title_text="mel")
        title = "log-mel spectrogram"
    _layout(fig, f"{title} · {len(audio) / sample_rate:.2f} s")
    fig.update_layout(height=SPECTRO_HEIGHT, showlegend=False, margin=dict(l=48, r=16, t=36, b=40))
    time_axis(fig, frames * frame_ms / 1000)
    return fig


def diff(a: np.ndarray, b: np.ndarray, differ: np.ndarray, agree: np.ndarray, frame_ms: float) -> go.Figure:
    """Where take B's codes differ from A's (red), over their common frames; each row's label carries
    that codebook's agreement."""
    T, G = differ.shape
    if T == 0:
        return empty("A and B have no frames in common")
    frame_s = frame_ms / 1000
    fig = grid_image((differ.T * 255).astype(np.uint8), DIFF_SCALE, frame_s,
                     hover="t = %{x:.2f} s · CB%{y}<extra></extra>")
    fig.add_trace(_colorbar_trace(DIFF_SCALE, 1, "differs"))
    lengths = "" if len(a) == len(b) else f" (A {len(a)}, B {len(b)} frames)"
    _layout(fig, f"A/B: {int(differ.sum())} of {differ.size} codes differ · {T} common frames{lengths}")
    time_axis(fig, T * frame_s)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(G)), range=[G - 0.5, -0.5],
                     ticktext=[f"CB{g} {100 * agree[g]:.0f}%" for g in range(G)], tickfont=dict(size=10))
    fig.update_layout(margin=dict(l=80, r=16, t=44, b=40))
    return fig


def ablation(costs: list[float] | None) -> go.Figure:
    """What dropping each codebook costs a recording's re-decode: one bar per codebook, how much the
    log-mel distance to the original grows without it (dB)."""
    if not costs:
        return empty("Encode a recording: what dropping each codebook costs shows here")
    names = [f"CB{g}" for g in range(len(costs))]
    fig = go.Figure(go.Bar(x=names, y=costs, marker_color="#6366f1",
                           hovertemplate="without %{x}: +%{y:.2f} dB<extra></extra>"))
    fig.update_layout(height=240, margin=dict(l=48, r=12, t=48, b=36), showlegend=False, template="plotly_white",
                      font=dict(family=FONT, size=11), paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
                      title=dict(text="Ablation: how much farther from the original without each codebook "
                                      "(log-mel dB)", x=0.01, font=dict(size=13)))
    return fig


def side_by_side(a: dict, b: dict) -> go.Figure:
    """Two takes of different lengths: their per-codebook statistics as paired bars (a cell diff would
    compare unrelated moments)."""
    G = len(a["utilization"])
    rows = [f"CB{g}" for g in range(G)]
    panels = [p for p in STAT_PANELS if p[0] != "mean_prob"]  # recordings have no probabilities
    fig = make_subplots(rows=1, cols=len(panels), shared_yaxes=True, horizontal_spacing=0.05,
                        subplot_titles=[label for _, label, _ in panels])
    for i, (key, label, _) in enumerate(panels, start=1):
        for name, stats, colour in (("A", a, "#6366f1"), ("B", b, "#f59e0b")):
            values = [np.nan if v is None else v for v in stats[key]]
            fig.add_trace(go.Bar(x=values, y=rows, orientation="h", marker_color=colour, name=name,
                                 legendgroup=name, showlegend=i == 1,
                                 hovertemplate=f"{name} · %{{y}} · {label} %{{x:.3f}}<extra></extra>"), row=1, col=i)
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=10))
    fig.update_layout(height=STATS_HEIGHT, margin=dict(l=44, r=8, t=64, b=30), barmode="group",
                      font=dict(family=FONT, size=11), template="plotly_white", bargap=0.2,
                      paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
                      title=dict(text=f"A {a['frames']} frames · B {b['frames']} frames: lengths differ, so "
                                      "per-codebook statistics side by side", x=0.01, font=dict(size=13)))
    return fig
