"""Event handlers: plain functions and generators mapping pipeline events to component values.

`Lab` holds what is fixed at start (the pipeline, the output folder, whether audio can
stream). What belongs to one person lives in a `Take` kept in their gr.State, so
nothing is shared between requests. Every handler reports errors through `user_error`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import re
import threading
import time
from pathlib import Path
from typing import NamedTuple

import gradio as gr
import numpy as np

from app import figures, panels
from app.files import OutputDir, to_int16, wav_bytes, write_codes, write_wav
from app.take import Take
from omni_core import AudioChunk, Done, Frame, SpeechRequest, TextDelta, load_codes

log = logging.getLogger(__name__)

UPDATE_EVERY = 4  # frames (320 ms of audio) between live updates: enough to look live, light for the browser
MAX_UPDATES = 40  # for long utterances the gap grows so an update never redraws more than ~T/40 new frames

def user_error(exc: Exception) -> gr.Error:
    """The one place that turns an exception into what the person sees: a message, never a traceback."""
    if isinstance(exc, gr.Error):
        return exc
    if isinstance(exc, ValueError):  # RequestError, CheckpointError and bad values: the message says what to change
        return gr.Error(str(exc), title="Cannot do that", print_exception=False)
    log.exception("handler failed")
    return gr.Error(f"Something went wrong ({type(exc).__name__}: {exc}). The server log has the details.",
                    print_exception=False)


def reports_errors(fn):
    """Wrap a handler (function or generator) so every exception goes through `user_error`."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except Exception as exc:
                raise user_error(exc) from None
        return generator

    @functools.wraps(fn)
    def function(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise user_error(exc) from None
    return function


class SynthOut(NamedTuple):
    """What one step of `synthesize` sets: the UI wires these outputs in this order."""
    audio: object = gr.skip()
    heatmap: object = gr.skip()
    stats: object = gr.skip()
    files: object = gr.skip()
    take: object = gr.skip()


class Lab:
    def __init__(self, pipe, outputs: OutputDir, streaming: bool):
        self.pipe = pipe
        self.info = pipe.info
        self.outputs = outputs
        self.streaming = streaming  # False: no ffmpeg, so the player gets the whole WAV at the end

    # --- generate ---------------------------------------------------------------------------

    @reports_errors
    def synthesize(self, text, mode, speaker, predictor, cuda_graph, do_sample, temperature, top_k, top_p,
                   seed, max_frames, view, language=None, instruct=None, text_input=None, ref_audio=None,
                   ref_text=None, feed_rate=None):
        """Stream one utterance: audio chunks, a live heatmap and live stats, then the downloads.
        The last six follow the loaded model (Qwen3-TTS: language, instruction, text input, a voice clip
        and its transcript, live text's words per second); what the model cannot use is left out."""
        request = self.request(text, mode, speaker, predictor, cuda_graph, do_sample, temperature, top_k,
                               top_p, seed, max_frames, voice=self.voice(language, instruct, text_input, ref_audio,
                                                                         ref_text))
        live = text_input == "live" and bool(self.info.get("live_text"))
        request, _ = self.pipe.check(request)  # a bad request fails here, before the page is cleared
        if live:
            self.pipe.check(request, live=True)
        take = Take(view=view, request=request)  # its probabilities are under this request
        start = time.perf_counter()
        events = None
        pending: list[np.ndarray] = []  # audio not yet sent to the player
        drawn = 0  # frames in the last heatmap update
        try:
            yield SynthOut(audio=None, heatmap=figures.empty("Waiting for the first frame…"),
                           stats=panels.running(request.predictor, 0, self.frame_s, 0.0, None, ""), files=None,
                           take=take)
            events = self._open(request, take, feed_rate if live else None)
            for event in events:
                if isinstance(event, TextDelta):
                    take.text += event.text
                elif isinstance(event, Frame):
                    take.add_frame(event)
                elif isinstance(event, AudioChunk):
                    take.add_audio(event.audio)
                    pending.append(event.audio)
                    if take.first_audio_s is None:
                        take.first_audio_s = time.perf_counter() - start
                elif isinstance(event, Done):
                    yield from self._finish(take, event.result, pending)
                    return
                first_audio = bool(pending) and len(take.audio) == len(pending)
                due = first_audio or take.frames - drawn >= max(UPDATE_EVERY, take.frames // MAX_UPDATES)
                # Stopped: the frames still queued are read without drawing, so the last update comes at once
                if due and not take.cancel.is_set():
                    drawn = take.frames
                    yield SynthOut(audio=self._chunk(pending), heatmap=self.figure(take, live=True),
                                   stats=panels.running(request.predictor, take.frames, self.frame_s,
                                                        time.perf_counter() - start, take.first_audio_s,
                                                        take.text, take.batch), take=take)
        finally:
            take.cancel.set()  # also when Gradio closes this generator (a closed tab): the engine stops
            if events is not None:
                events.close()

    def _open(self, request: SpeechRequest, take: Take, feed_rate: float | None):
        """The request's events; with a feed rate, its text fed word by word at that many words a second from a
        thread of its own, as a writer would send it (`Pipeline.stream_text`), until it ends or is stopped."""
        if feed_rate is None:
            return self.pipe.stream(request, take.cancel)
        stream = self.pipe.stream_text(dataclasses.replace(request, text=""), take.cancel)
        words = re.findall(r"\s*\S+\s*", request.text) or [request.text]
        threading.Thread(target=feed, args=(stream, words, 1.0 / max(float(feed_rate), 0.1), take.cancel),
                         name="live-text", daemon=True).start()
        return stream

    def _finish(self, take: Take, result, pending: list[np.ndarray]):
        """After Done (finished or stopped): the final heatmap, stats and downloads."""
        stats = result.stats.to_dict()
        take.finish(result)
        for warning in stats.get("warnings") or []:
            gr.Warning(warning)
        files = self._write(take, stats)
        audio = self._chunk(pending) if self.streaming else self._playable(result.audio)
        yield SynthOut(audio=audio, heatmap=self.figure(take), stats=panels.finished(stats, result.text),
                       files=files, take=take)

    def stop(self, take: Take | None) -> None:
        """Ask this session's running request to stop: the engine ends it within a frame, and the
        request draws what it made so far as its last update."""
        if take is not None:
            take.cancel.set()

    # --- redraw, re-decode, upload ----------------------------------------------------------

    @reports_errors
    def redraw(self, view: str, take: Take | None):
        if take is None or take.frames == 0:
            return figures.empty()
        take.view = view  # a running request draws its next updates in this view too
        return self.figure(take, live=not take.finished)

    @reports_errors
    def listen(self, num_codebooks, take: Take | None):
        """Re-decode the current codes from the first k codebooks only."""
        if take is None or take.frames == 0:
            raise gr.Error("No codes yet: generate something or upload a codes file first.", print_exception=False)
        return self._playable(self.pipe.decode(take.codes_array(), num_codebooks=int(num_codebooks)))

    @reports_errors
    def upload(self, path: str | None, view: str):
        """Decode and draw an uploaded codes file (.npy or .json, [T, 16])."""
        if not path:
            return (gr.skip(),) * 6
        codes = load_codes(path)
        audio = self.pipe.decode(codes)
        take = Take.from_codes(codes, audio, view=view)
        files = self._write(take, {})
        return (self.figure(take), panels.uploaded(take.frames, self.frame_s, Path(path).name),
                self._playable(audio), self.info["num_code_groups"], files, take)

    # --- the non-streaming API ----------------------------------------------------------------

    @reports_errors
    def codes(self, text: str, mode: str = "speak", speaker: str | None = None, predictor: str = "reprefill",
              do_sample: bool = False, seed: int = 0, max_frames: int | None = None, language: str | None = None,
              instruct: str | None = None):
        """One utterance, whole: ({"codes": [[16 ints] per frame], "text", "stats"}, path of its WAV).
        language and instruct: for models that take them (Qwen3-TTS); empty: left out; given to a model
        that cannot use them, refused with what the model supports."""
        request = SpeechRequest(text=text, mode=mode, speaker=speaker or None, predictor=predictor,
                                do_sample=bool(do_sample), seed=seed if seed is not None else 0,
                                max_frames=max_frames, language=language or None, instruct=instruct or None)
        result = self.pipe.generate(request)
        stats = result.stats.to_dict()
        folder = self.outputs.new()
        wav = write_wav(folder, result.audio, result.sample_rate)
        return {"codes": result.codes.astype(int).tolist(), "text": result.text, "stats": stats}, str(wav)

    # --- helpers ----------------------------------------------------------------------------------

    @property
    def frame_s(self) -> float:
        return self.info["frame_ms"] / 1000

    def request(self, text, mode, speaker, predictor, cuda_graph, do_sample, temperature, top_k, top_p, seed,
                max_frames, voice: dict | None = None) -> SpeechRequest:
        """Component values → a SpeechRequest. The engine checks the values and says what is wrong."""
        return SpeechRequest(
            text=text if text is not None else "", mode=mode or "speak", speaker=speaker or None,
            predictor=predictor, cuda_graph=bool(cuda_graph) if self.info["cuda_available"] else None,
            do_sample=bool(do_sample), temperature=temperature, top_k=top_k, top_p=top_p,
            seed=seed if seed is not None else 0, max_frames=max_frames or None,  # 0 / empty: automatic
            **(voice or {}))

    def voice(self, language=None, instruct=None, text_input=None, ref_audio=None, ref_text=None) -> dict:
        """The request fields the loaded model takes, from the page's voice controls (hidden controls
        keep values the model cannot use: those are left out)."""
        info, fields = self.info, {}
        if info.get("languages") and language:
            fields["language"] = language
        if info.get("instruct") and instruct and instruct.strip():
            fields["instruct"] = instruct
        if len(info.get("text_input") or []) > 1 and text_input:
            fields["text_input"] = "streaming" if text_input == "live" else text_input  # live reads as streaming
        if info.get("clone") and ref_audio is not None:
            fields["reference_audio"] = ref_audio
            fields["reference_text"] = ref_text if ref_text and ref_text.strip() else None
        return fields

    def _chunk(self, pending: list[np.ndarray]):
        """The audio collected since the last update, as one chunk for the streaming player: WAV bytes
        (files.wav_bytes says why not a (rate, samples) tuple)."""
        if not self.streaming or not pending:
            return gr.skip()
        audio = np.concatenate(pending)
        pending.clear()
        return wav_bytes(audio, self.info["sample_rate"])

    def _playable(self, audio: np.ndarray):
        """(sample_rate, int16 samples): what the players take."""
        return self.info["sample_rate"], to_int16(audio)

    def figure(self, take: Take, live: bool = False):
        """The heatmap of a take as the page draws it (live: while frames still arrive)."""
        codes, probs, mismatch = take.arrays()
        return figures.heatmap(codes, probs, mismatch, take.view, frame_ms=self.info["frame_ms"],
                               codebook_size=self.info["codebook_size"], live=live, edited=take.edited_mask())

    def _write(self, take: Take, stats: dict) -> list[str]:
        folder = self.outputs.new()
        codes = take.codes_array()
        paths = [write_wav(folder, take.audio_array(), self.info["sample_rate"]),
                 *write_codes(folder, codes, take.text, stats)]
        return [str(p) for p in paths]


def feed(stream, words: list[str], pause_s: float, cancel) -> None:
    """Send the words one by one, `pause_s` apart, then end the text (stop early once the take is stopped)."""
    for i, word in enumerate(words):
        if i and cancel.wait(pause_s):
            break
        stream.append(word)
    stream.end()
