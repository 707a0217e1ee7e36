"""HTML for the frame inspector, the code-surgery log and the A/B panel."""

from __future__ import annotations

from html import escape

import numpy as np

CONTEXT_S = 0.5  # the inspector plays its frame with this much audio either side


def idle() -> str:
    return ('<div class="inspector idle">Click a column of the heatmap (or move the frame slider) to see that '
            "frame's 16 codes, their probabilities and the top-5 alternatives.</div>")


def frame_html(index: int, frame_s: float, codes: np.ndarray, probs: np.ndarray | None,
               top: np.ndarray | None, top_probs: np.ndarray | None, original: np.ndarray | None = None,
               dropped: np.ndarray | None = None, chosen: np.ndarray | None = None) -> str:
    """One frame: codes [16] (as heard now), probs [16] or None, top / top_probs [16, 5] or None (the
    alternatives to these codes: an edited take's come from scoring it); original [16]: the codes before
    surgery (cells that differ are marked), dropped [16] bool; chosen [16]: the codes to highlight among the
    alternatives (default: the original's, which the generated alternatives are of; after scoring an edit,
    the codes as heard)."""
    mark = chosen if chosen is not None else original if original is not None else codes
    start = index * frame_s
    rows = []
    for g, code in enumerate(codes):
        p = "–" if probs is None else _p(probs[g])
        chips = ""
        if top is not None:
            chips = "".join(
                f'<span class="alt{" chosen" if top[g, i] == mark[g] else ""}"'
                f' title="p = {top_probs[g, i]:.4f}">{int(top[g, i])}<small>{top_probs[g, i]:.3f}</small></span>'
                for i in range(top.shape[1]))
        note = ""
        if original is not None and original[g] != code:
            note = f' <span class="edited">edited (was {int(original[g])})</span>'
        if dropped is not None and dropped[g]:
            note += ' <span class="edited">dropped</span>'
        rows.append(f'<tr><th>CB{g}</th><td class="code">{int(code)}{note}</td><td class="p">{p}</td>'
                    f'<td class="alts">{chips}</td></tr>')
    alternatives = "top-5 alternatives (p)" if top is not None else "no alternatives for these codes"
    return (f'<div class="inspector"><p class="title"><b>frame {index}</b> · {start:.2f}–{start + frame_s:.2f} s'
            f' · playing it with {CONTEXT_S:g} s either side</p>'
            f'<table><thead><tr><th></th><th>code</th><th>p</th><th>{alternatives}</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def _p(p: float) -> str:
    """A probability for the p column: 3 decimals, or 2 significant digits below 0.001 (scored recordings and
    edits are often far less likely than that)."""
    return f"{p:.3f}" if p >= 0.001 or p == 0 else f"{p:.1e}"


def context_window(index: int, num_samples: int, samples_per_frame: int, sample_rate: int) -> slice:
    """The samples of frame `index` with CONTEXT_S seconds either side, clipped to the take."""
    pad = int(CONTEXT_S * sample_rate)
    return slice(max(0, index * samples_per_frame - pad), min(num_samples, (index + 1) * samples_per_frame + pad))


def edit_log(edits: list, notes: list[str] | None = None, footer: str = "") -> str:
    """The edits in order; notes: a line under each (its cells' codes and probabilities, app/scoring.py);
    footer: a closing line."""
    if not edits:
        return '<div class="edit-log idle">No edits: this is the original take.</div>'
    notes = notes or [""] * len(edits)
    items = "".join(f"<li>{escape(e.describe())}"
                    + (f'<br><small class="edit-p">{escape(note)}</small>' if note else "") + "</li>"
                    for e, note in zip(edits, notes))
    closing = f'<p class="edit-footer">{escape(footer)}</p>' if footer else ""
    return (f'<div class="edit-log"><p class="title">{len(edits)} edit{"s" if len(edits) > 1 else ""}, '
            f're-decoded (outlined on the heatmap):</p><ol>{items}</ol>{closing}</div>')


def ab_html(frames_a: int | None, frames_b: int | None, agree: np.ndarray | None = None) -> str:
    if frames_a is None:
        return '<div class="ab idle">Pin a take as A; the next take (or upload) is B, compared cell by cell.</div>'
    if frames_b is None:
        return f'<div class="ab"><b>A</b> pinned: {frames_a} frames. Generate or upload the next take: it is B.</div>'
    if agree is None:
        return (f'<div class="ab"><b>A</b> {frames_a} frames · <b>B</b> {frames_b} frames: different lengths, '
                'so the chart shows each codebook\'s statistics side by side (a cell-by-cell diff needs equal '
                'lengths)</div>')
    mean = float(np.nanmean(agree)) if len(agree) else float("nan")
    return (f'<div class="ab"><b>A</b> {frames_a} frames · <b>B</b> {frames_b} frames · '
            f'codes agree in {100 * mean:.1f}% of common cells (per codebook on the chart)</div>')
