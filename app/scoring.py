"""A score for any take: teacher-forced probabilities (`pipe.score`) of codes the page did not generate.

An encoded recording, an uploaded codes file and an edited take have no probabilities of their own; scored
under the model, they get the confidence view, the inspector's p column and top-5 alternatives, and the
codebook statistics' mean p, as a generated take has. The numbers are `pipe.score`'s, never recomputed here.

When: on a button (Score this take), not on every encode or upload, for two reasons. A score is of the codes
*as some text* said by some speaker: a recording has no text of its own, so the person types what it says
in the Text box first (the page's text, speaker, language, sampling settings are the request; an empty text
is refused with the engine's message). And on a CPU it costs about what generating the take costs (a talker
step and 15 predictor steps a frame), so it runs when asked, with a status line saying so.

Code surgery on a take that has probabilities (generated or scored) is scored by itself, right after the
edit is heard (a chained event: the audio never waits for the score), under the request the original's
probabilities are under, so each edited cell's p before and after compare like with like.
"""

from __future__ import annotations

import math
import time
from html import escape
from typing import NamedTuple

import gradio as gr
import numpy as np

from app import charts, inspector
from app.codestats import codebook_stats
from app.handlers import reports_errors
from app.take import Take
from omni_core import SpeechRequest, load_codes

MAX_CELLS = 6  # edited cells listed per edit in the log (the rest summarised)
NO_TAKE = "No take yet: generate something, encode a clip or upload a codes file first."


class ScoreOut(NamedTuple):
    """What scoring sets: the UI wires these outputs in this order."""
    heatmap: object = gr.skip()
    cbstats: object = gr.skip()
    frame_view: object = gr.skip()
    score_status: object = gr.skip()
    edit_log: object = gr.skip()
    take: object = gr.skip()


class Scorer:
    def __init__(self, pipe, lab, studio):
        self.pipe, self.info = pipe, pipe.info
        self.lab, self.studio = lab, studio  # Lab.request / voice / figure; Studio's inspector

    # --- the page -------------------------------------------------------------------------------

    @reports_errors
    def score_take(self, take: Take | None, index, text, mode, speaker, predictor, cuda_graph, do_sample,
                   temperature, top_k, top_p, seed, max_frames, view, language=None, instruct=None,
                   text_input=None, ref_audio=None, ref_text=None):
        """Score the current take (and its edited codes, if surgery wrote any) under the page's settings."""
        if take is None or take.frames == 0:
            raise gr.Error(NO_TAKE, print_exception=False)
        if not take.finished:
            raise gr.Error("The take is still being generated: score it when it is finished.", print_exception=False)
        request = self.lab.request(text, mode, speaker, predictor, cuda_graph, do_sample, temperature, top_k, top_p,
                                   seed, max_frames, voice=self.lab.voice(language, instruct, text_input, ref_audio,
                                                                          ref_text))
        request, _ = self.pipe.check(request)  # a bad request (an empty text) fails here, with what to change
        frames = take.frames * (2 if take.codes_changed() else 1)
        yield ScoreOut(score_status=_status("busy", f"Scoring {frames} frames under the model as "
                                                    f"{_said(request)}…"))
        start = time.perf_counter()
        take.set_score(self.pipe.score(take.codes_array(), request), request)
        if take.codes_changed():
            take.set_edited_score(self.pipe.score(take.edited_codes, request))
        take.view = view
        yield self._outputs(take, index, status(take, time.perf_counter() - start))

    @reports_errors
    def score_edit(self, take: Take | None, view, index):
        """After an edit: score the edited codes under the original's request (when the original has
        probabilities and the edit wrote codes); the edit log then shows each edited cell's p before → after."""
        if (take is None or not take.codes_changed() or take.edited_probs is not None or not take.has_probs()
                or take.request is None):
            yield ScoreOut()
            return
        codes = take.edited_codes
        take.set_edited_score(self.pipe.score(codes, take.request))
        if take.edited_codes is not codes:  # another edit or a restore came meanwhile: its own event scores it
            take.edited_probs = take.edited_top = None
            yield ScoreOut()
            return
        take.view = view
        yield self._outputs(take, index, gr.skip())

    def _outputs(self, take: Take, index, score_status) -> ScoreOut:
        codes, probs, _ = take.arrays()
        try:
            index = min(max(int(index), 0), take.frames - 1)
        except (TypeError, ValueError):
            index = 0
        return ScoreOut(self.lab.figure(take), charts.cbstats(codebook_stats(codes, probs, self.info["codebook_size"])),
                        self.studio._inspect(index, take), score_status, edit_log(take), take)

    # --- the API ------------------------------------------------------------------------------------

    @reports_errors
    def score_api(self, codes_file, text: str, mode: str = "speak", speaker: str | None = None,
                  predictor: str = "reprefill", do_sample: bool = False, temperature: float | None = None,
                  top_k: int | None = None, top_p: float | None = None, language: str | None = None,
                  instruct: str | None = None, k: int | None = 5):
        """A codes file (.npy / .json, [T, 16]) and a request → every code's log-probability and probability
        under the model, and its top-k alternatives (`pipe.score`), as JSON."""
        if not codes_file:
            raise gr.Error("pass a codes file (.npy or .json, [T, 16])", print_exception=False)
        path = codes_file if isinstance(codes_file, str) else getattr(codes_file, "name", None) or codes_file["path"]
        codes = load_codes(path)
        defaults = SpeechRequest("")
        request = SpeechRequest(
            text=text or "", mode=mode or "speak", speaker=speaker or None, predictor=predictor or "reprefill",
            do_sample=bool(do_sample), temperature=defaults.temperature if temperature is None else temperature,
            top_k=defaults.top_k if top_k is None else int(top_k), top_p=defaults.top_p if top_p is None else top_p,
            language=language or None, instruct=instruct or None)
        score = self.pipe.score(codes, request, k=5 if k in (None, "") else int(k))
        return score_json(score, request)


def score_json(score, request) -> dict:
    """A `Score` as JSON: log-probabilities that are -inf (a code the distribution excludes) become null."""
    logprobs = [[None if math.isinf(v) else v for v in row] for row in score.logprobs.astype(float).tolist()]
    mean = score.mean_logprob
    return {"frames": int(len(score.codes)), "k": int(score.top_codes.shape[-1]) if score.top_codes.ndim == 3 else 0,
            "text": request.text, "mode": request.mode, "speaker": request.speaker, "language": request.language,
            "mean_logprob": None if not math.isfinite(mean) else mean,
            "codes": score.codes.astype(int).tolist(), "logprobs": logprobs,
            "probs": score.probs.astype(float).tolist(),
            "top_codes": score.top_codes.astype(int).tolist(), "top_probs": score.top_probs.astype(float).tolist()}


# --- HTML: the status line and the edit log -------------------------------------------------------

def status(take: Take | None, elapsed_s: float | None = None) -> str:
    """Where the current take's probabilities come from, and what Score this take does."""
    if take is None or take.frames == 0:
        return _status("idle", "Score this take: how likely the model finds the current codes, code by code.")
    if not take.finished:
        return _status("idle", "Generating: the engine reports each code's probability as it goes.")
    if not take.has_probs():
        return _status("idle", "Not scored: these codes were not generated here, so they have no probabilities. "
                               "Type what they say in Text, pick the speaker, and press Score this take (on a CPU it "
                               "takes about as long as generating them).")
    if not take.scored:
        return _status("idle", "Probabilities: the engine's, from generating this take. Score this take re-scores it "
                               "under the page's current text and settings.")
    probs = np.stack(take.probs)
    with np.errstate(divide="ignore"):
        mean = float(np.log(probs).mean())
    took = f" in {elapsed_s:.1f} s" if elapsed_s is not None else ""
    return _status("done", f"Scored {take.frames} frames{took} under the model as {_said(take.request)}: mean "
                           f"log-probability {mean:.3f} per code (mean p {_p(float(probs.mean()))}). The confidence "
                           f"view, the inspector and the statistics show these probabilities.")


def _said(request) -> str:
    who = f" by {request.speaker}" if request.speaker else ""
    language = f" ({request.language})" if request.language and request.language != "auto" else ""
    text = request.text if len(request.text) <= 60 else request.text[:57] + "…"
    return f"“{text}” said{who}{language}"


def _status(kind: str, message: str) -> str:
    return f'<div class="score-status {kind}">{escape(message, quote=False)}</div>'


def _p(p: float) -> str:
    return "0" if p == 0 else f"{p:.2g}"


def edit_notes(take: Take) -> tuple[list[str], str]:
    """Per edit, its changed cells with their codes and probabilities before → after (each cell under the last
    edit that wrote it); and a closing line (the take's mean log-probability, or what to do to see it)."""
    original, edited = take.codes_array(), take.current_codes()
    before = np.stack(take.probs) if take.has_probs() else None
    after = take.edited_probs if take.codes_changed() else before
    owner = np.full(original.shape, -1)
    for i, e in enumerate(take.edits):
        if e.op != "drop":
            owner[e.start:e.end + 1, e.codebook] = i
    notes = []
    for i, e in enumerate(take.edits):
        if e.op == "drop":
            notes.append("codes unchanged, so their scores are too: only the decode leaves them out")
            continue
        cells = np.argwhere((owner == i) & (edited != original))
        if not len(cells):
            notes.append("no code changed" if (owner == i).any() else "overwritten by a later edit")
            continue
        lines = []
        for t, g in cells[:MAX_CELLS]:
            p = "" if before is None else f", p {_p(before[t, g])} → {'…' if after is None else _p(after[t, g])}"
            lines.append(f"CB{g} frame {t}: {original[t, g]} → {edited[t, g]}{p}")
        if len(cells) > MAX_CELLS:
            rest = f"… and {len(cells) - MAX_CELLS} more"
            if before is not None and after is not None:
                t, g = cells[:, 0], cells[:, 1]
                rest += f" (mean p over all {len(cells)}: {_p(before[t, g].mean())} → {_p(after[t, g].mean())})"
            lines.append(rest)
        notes.append("; ".join(lines))
    if not take.codes_changed():
        footer = ""
    elif before is None:
        footer = "Press Score this take to see how likely each edit is under the model."
    elif after is None:
        footer = "Scoring the edited take under the model…"
    else:
        with np.errstate(divide="ignore"):
            footer = (f"p: each code's probability under the model (teacher-forced, as {_said(take.request)}); the "
                      f"take's mean log-probability per code {np.log(before).mean():.3f} → "
                      f"{np.log(after).mean():.3f}.")
    return notes, footer


def edit_log(take: Take) -> str:
    if not take.edits:
        return inspector.edit_log([])
    notes, footer = edit_notes(take)
    return inspector.edit_log(take.edits, notes, footer)
