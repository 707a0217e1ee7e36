"""Handlers that look inside a take: the frame inspector, codebook statistics, the aligned
spectrogram, code surgery and A/B takes. All of them read the session's `Take` (and the
pinned A); only re-decoding calls the engine. Errors go through `handlers.reports_errors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import gradio as gr
import numpy as np

from app import charts, figures, inspector, scoring
from app.codestats import agreement, codebook_stats
from app.files import OutputDir, to_int16, write_codes, write_wav
from app.handlers import reports_errors
from app.surgery import Edit, apply
from app.take import Take
from omni_core import check_codes

NO_TAKE = "No take yet: generate something or upload a codes file first."


@dataclass(frozen=True)
class Pinned:
    """Take A of an A/B comparison: its codes (as heard) and audio."""
    codes: np.ndarray
    audio: np.ndarray


class AfterTake(NamedTuple):
    """What `after_take` sets once a take is finished: the UI wires these outputs in this order."""
    cbstats: object = gr.skip()
    spectrogram: object = gr.skip()
    frame: object = gr.skip()
    frame_view: object = gr.skip()
    ab_plot: object = gr.skip()
    ab_text: object = gr.skip()
    audio_b: object = gr.skip()
    edit_log: object = gr.skip()
    edit_audio: object = gr.skip()
    score_status: object = gr.skip()


class SurgeryOut(NamedTuple):
    """What an edit or a restore sets: the UI wires these outputs in this order."""
    heatmap: object = gr.skip()
    edit_audio: object = gr.skip()
    edit_files: object = gr.skip()
    edit_log: object = gr.skip()
    cbstats: object = gr.skip()
    spectrogram: object = gr.skip()
    take: object = gr.skip()
    frame_view: object = gr.skip()
    frame_audio: object = gr.skip()


def last_if_unset(end):
    """The page's "to frame" box: empty or negative (the box starts at -1) means the take's last frame.
    (Gradio's number box shows an empty value as 0, which would edit frame 0 alone.)"""
    if end in (None, ""):
        return None
    try:
        return None if float(end) < 0 else end
    except (TypeError, ValueError):
        return end  # Edit.checked says what is wrong with it


class Studio:
    def __init__(self, pipe, outputs: OutputDir):
        self.pipe, self.info, self.outputs = pipe, pipe.info, outputs

    # --- after every take (generated, stopped or uploaded) ------------------------------------

    @reports_errors
    def after_take(self, take: Take | None, pinned: Pinned | None, kind: str):
        """Statistics, spectrogram, the frame slider's range and the A/B diff for the new take."""
        if take is None or take.frames == 0 or not take.finished:
            return AfterTake()
        T = take.frames
        codes, probs, _ = take.arrays()
        slider = gr.Slider(minimum=0, maximum=max(T - 1, 1), value=0, step=1, interactive=True)
        ab, ab_text, audio_b = self._ab(take, pinned)
        return AfterTake(charts.cbstats(codebook_stats(codes, probs, self.info["codebook_size"])),
                         self._spectrogram(take, kind), slider, self._inspect(0, take), ab, ab_text, audio_b,
                         inspector.edit_log([]), None, scoring.status(take))

    # --- the frame inspector --------------------------------------------------------------------

    @reports_errors
    def inspect(self, index, take: Take | None):
        """That frame's codes, probabilities and alternatives, and its audio with 0.5 s either side."""
        if take is None or take.frames == 0:
            return inspector.idle(), None
        return self._inspect(index, take), self._frame_audio(index, take)

    def _inspect(self, index, take: Take) -> str:
        i = self._frame(index, take)
        codes, probs, _ = take.arrays()
        alternatives = take.alternatives()
        top, top_probs = alternatives if alternatives is not None else (None, None)
        edited = take.edited_codes is not None
        return inspector.frame_html(i, self.frame_s, codes[i], None if probs is None else probs[i],
                                    None if top is None else top[i], None if top is None else top_probs[i],
                                    take.codes_array()[i] if edited else None, take.drop[i] if edited else None,
                                    chosen=codes[i] if take.codes_changed() else None)  # scored edit: its own

    def _frame_audio(self, index, take: Take):
        i = self._frame(index, take)
        audio = take.current_audio()
        window = inspector.context_window(i, len(audio), self.info["samples_per_frame"], self.info["sample_rate"])
        return self.info["sample_rate"], to_int16(audio[window])

    # --- spectrogram ------------------------------------------------------------------------------

    @reports_errors
    def spectrogram(self, kind: str, take: Take | None):
        if take is None or take.frames == 0 or not take.finished:
            return charts.spectrogram(None, self.info["sample_rate"], 0, self.info["frame_ms"])
        return self._spectrogram(take, kind)

    def _spectrogram(self, take: Take, kind: str):
        audio = take.current_audio()
        return charts.spectrogram(audio, self.info["sample_rate"], take.frames, self.info["frame_ms"], kind)

    # --- code surgery -----------------------------------------------------------------------------

    @reports_errors
    def edit(self, op, codebook, start, end, value, seed, take: Take | None, view: str, kind: str, index=0):
        """Apply one edit on top of the earlier ones, re-decode, redraw (the inspected frame `index` too),
        and write the edited files."""
        if take is None or take.frames == 0:
            raise gr.Error(NO_TAKE, print_exception=False)
        if not take.finished:
            raise gr.Error("The take is still being generated: edit it when it is finished.", print_exception=False)
        edit = Edit(op, codebook, start, last_if_unset(end), value if value is not None else 0,
                    seed if seed is not None else 0).checked(take.frames, self.info["num_code_groups"],
                                                             self.info["codebook_size"])
        codes = take.current_codes()
        drop = take.drop if take.drop is not None else np.zeros_like(codes, bool)
        take.edited_codes, take.drop = apply(codes, drop, edit)
        if not np.array_equal(codes, take.edited_codes):  # new codes: their scores come from scoring them
            take.edited_probs = take.edited_top = None
        take.edits = [*take.edits, edit]
        take.edited_audio = self.pipe.decode(take.edited_codes, drop=take.drop)
        return self._surgery_outputs(take, view, kind, index)

    @reports_errors
    def restore(self, take: Take | None, view: str, kind: str, index=0):
        """Back to the original codes and audio."""
        if take is None or take.frames == 0:
            raise gr.Error(NO_TAKE, print_exception=False)
        take.edited_codes = take.drop = take.edited_audio = take.edited_probs = take.edited_top = None
        take.edits = []
        return self._surgery_outputs(take, view, kind, index)

    def _surgery_outputs(self, take: Take, view: str, kind: str, index=0):
        """heatmap, edited audio, edited files, edit log, statistics, spectrogram, take, and the inspected
        frame's table and audio (its edited cells marked, its audio the edited take's)."""
        try:
            index = min(max(int(index), 0), take.frames - 1)
        except (TypeError, ValueError):
            index = 0
        codes, probs, mismatch = take.arrays()
        heatmap = figures.heatmap(codes, probs, mismatch, view, frame_ms=self.info["frame_ms"],
                                  codebook_size=self.info["codebook_size"], edited=take.edited_mask())
        stats = charts.cbstats(codebook_stats(codes, probs, self.info["codebook_size"]))
        if take.edited_audio is None:
            return SurgeryOut(heatmap, None, None, scoring.edit_log(take), stats, self._spectrogram(take, kind), take,
                              self._inspect(index, take), self._frame_audio(index, take))
        folder = self.outputs.new()
        files = [write_wav(folder, take.edited_audio, self.info["sample_rate"], "edited.wav"),
                 *write_codes(folder, codes, take.text, {"edits": [e.describe() for e in take.edits]})]
        audio = self.info["sample_rate"], to_int16(take.edited_audio)
        return SurgeryOut(heatmap, audio, [str(p) for p in files], scoring.edit_log(take), stats,
                          self._spectrogram(take, kind), take, self._inspect(index, take),
                          self._frame_audio(index, take))

    @reports_errors
    def listen_without(self, codebook, take: Take | None):
        """The take decoded with codebook j contributing nothing (the edits, if any, kept)."""
        if take is None or take.frames == 0:
            raise gr.Error(NO_TAKE, print_exception=False)
        edit = Edit("drop", codebook).checked(take.frames, self.info["num_code_groups"])
        codes = take.current_codes()
        drop = take.drop if take.drop is not None else np.zeros_like(codes, bool)
        _, drop = apply(codes, drop, edit)
        return self.info["sample_rate"], to_int16(self.pipe.decode(codes, drop=drop))

    # --- A/B ------------------------------------------------------------------------------------------

    @reports_errors
    def pin(self, take: Take | None):
        """Pin the current take (as heard: with its edits) as A."""
        if take is None or take.frames == 0 or not take.finished:
            raise gr.Error(NO_TAKE, print_exception=False)
        audio = take.current_audio()
        pinned = Pinned(take.current_codes().copy(), audio)
        return (pinned, inspector.ab_html(len(pinned.codes), None), (self.info["sample_rate"], to_int16(audio)),
                figures.empty("A is pinned: the next take is B"), None)

    def _ab(self, take: Take, pinned: Pinned | None):
        if pinned is None:
            return gr.skip(), gr.skip(), gr.skip()
        b, audio = take.current_codes(), take.current_audio()
        playable = self.info["sample_rate"], to_int16(audio)
        if len(b) != len(pinned.codes):  # different moments: compare statistics, not cells
            size = self.info["codebook_size"]
            figure = charts.side_by_side(codebook_stats(pinned.codes, None, size), codebook_stats(b, None, size))
            return figure, inspector.ab_html(len(pinned.codes), len(b)), playable
        differ, agree = agreement(pinned.codes, b)
        return (charts.diff(pinned.codes, b, differ, agree, self.info["frame_ms"]),
                inspector.ab_html(len(pinned.codes), len(b), agree), playable)

    # --- API (stateless, for scripts) -------------------------------------------------------------

    @reports_errors
    def stats_api(self, codes, probs=None):
        """{"codes": [[16 ints] per frame]} or a list of frames (+ optional probs [T][16]) → statistics."""
        codes = self._codes(codes)
        if probs is not None and probs != [] and probs != {}:
            probs = np.asarray(probs.get("probs", probs) if isinstance(probs, dict) else probs, np.float64)
            if probs.shape != codes.shape:
                raise gr.Error(f"probs must have the codes' shape {list(codes.shape)}, got {list(probs.shape)}",
                               print_exception=False)
        else:
            probs = None
        return codebook_stats(codes, probs, self.info["codebook_size"])

    @reports_errors
    def surgery_api(self, codes, op: str = "drop", codebook: int = 0, start: int = 0, end: int | None = None,
                    value: int = 0, seed: int = 0):
        """Apply one edit to the given codes and decode: ({"codes", "dropped", "changed"}, WAV path)."""
        original = self._codes(codes)
        edit = Edit(op, codebook, start, end, value, seed).checked(len(original), self.info["num_code_groups"],
                                                                  self.info["codebook_size"])
        edited, drop = apply(original, np.zeros_like(original, bool), edit)
        folder = self.outputs.new()
        wav = write_wav(folder, self.pipe.decode(edited, drop=drop), self.info["sample_rate"], "edited.wav")
        changed = np.argwhere((edited != original) | drop)
        return ({"codes": edited.astype(int).tolist(), "dropped": drop.astype(int).tolist(),
                 "changed": changed.astype(int).tolist(), "edit": edit.describe()}, str(wav))

    # --- helpers --------------------------------------------------------------------------------------

    @property
    def frame_s(self) -> float:
        return self.info["frame_ms"] / 1000

    def _frame(self, index, take: Take) -> int:
        try:
            i = int(index)
        except (TypeError, ValueError):
            raise gr.Error(f"frame must be a whole number, got {index!r}", print_exception=False) from None
        if not 0 <= i < take.frames:
            raise gr.Error(f"frame {i} is out of range: this take has frames 0..{take.frames - 1}",
                           print_exception=False)
        return i

    def _codes(self, codes) -> np.ndarray:
        """JSON codes (a list of frames or {"codes": [...]}) → [T, 16] int64, checked as codes files are."""
        if isinstance(codes, dict):
            codes = codes.get("codes")
        if not isinstance(codes, list):
            raise gr.Error('codes must be a list of frames, or {"codes": [[16 ints] per frame]}',
                           print_exception=False)
        try:
            np.asarray(codes)
        except ValueError:
            raise gr.Error("every frame must be a list of 16 codes", print_exception=False) from None
        return check_codes(codes)
