"""The inspector's HTML (app/inspector.py): one frame's 16 codes with probabilities and top-5
alternatives, edited and dropped cells marked, the frame's audio window, the edit log, the A/B line."""

from __future__ import annotations

import json

import numpy as np

from app import inspector
from app.codestats import codebook_stats
from app.surgery import Edit

from .conftest import our_pipeline


def test_inspector_shows_the_frame_codes_and_alternatives():
    result = our_pipeline("tiny").generate(__import__("omni_core").SpeechRequest("Inspect me.", max_frames=4))
    html = inspector.frame_html(2, 0.08, result.codes[2], result.probs[2], result.top_codes[2], result.top_probs[2])
    assert "frame 2" in html and "0.16–0.24 s" in html and html.count("<tr>") == 17  # header + 16 codebooks
    assert html.count('class="alt chosen"') == 16  # greedy: every chosen code is among (first in) its top 5
    assert str(result.top_codes[2, 7, 3]) in html
    window = inspector.context_window(0, 100_000, 1920, 24000)
    assert (window.start, window.stop) == (0, 1920 + 12000)
    window = inspector.context_window(20, 100_000, 1920, 24000)
    assert (window.start, window.stop) == (20 * 1920 - 12000, 21 * 1920 + 12000)
    json.dumps(codebook_stats(result.codes, result.probs))  # the API returns it as JSON


def test_edited_and_dropped_cells_are_marked_and_chips_follow_the_original():
    codes = np.arange(16)
    original = codes.copy()
    original[3] = 99
    top = np.tile(np.arange(16)[:, None], (1, 5))  # each codebook's top-5 is its own index
    top[3, 0] = 99
    dropped = np.zeros(16, bool)
    dropped[5] = True
    html = inspector.frame_html(0, 0.08, codes, None, top, np.full((16, 5), 0.2), original, dropped)
    assert "edited (was 99)" in html and html.count("dropped") == 1
    assert html.count('class="alt chosen"') == 15 * 5 + 1  # CB3: only the original's chip is chosen
    assert "<td class=\"p\">–</td>" in html  # no probabilities
    plain = inspector.frame_html(0, 0.08, codes, None, None, None)
    assert "no alternatives for these codes" in plain and "edited" not in plain


def test_window_is_clipped_to_the_take():
    window = inspector.context_window(3, 4 * 1920, 1920, 24000)
    assert (window.start, window.stop) == (0, 4 * 1920)


def test_edit_log_and_ab_lines():
    assert "original take" in inspector.edit_log([])
    log = inspector.edit_log([Edit("drop", 2, 0, 3), Edit("set", 1, 4, 4, value=7)])
    assert "2 edits" in log and "CB2 frames 0..3: dropped" in log and "CB1 frame 4: set to 7" in log
    assert "1 edit," in inspector.edit_log([Edit("drop", 2, 0, 3)])
    assert "Pin a take" in inspector.ab_html(None, None)
    assert "pinned: 7 frames" in inspector.ab_html(7, None)
    assert "agree in 75.0%" in inspector.ab_html(7, 5, np.array([0.5, 1.0]))
    assert "idle" in inspector.idle()
