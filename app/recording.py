"""Bring your own audio: a recording or an uploaded clip, encoded with the loaded model's codec.

Its codes become the current take (heatmap, statistics, inspector, surgery, A/B all work on
it); the panel plays the original beside its re-decode, says how close they are, and draws
what dropping each codebook costs (the recording's ablation curve).
"""

from __future__ import annotations

from typing import NamedTuple

import gradio as gr
import numpy as np

from app import charts, panels, roundtrip
from app.files import OutputDir, to_int16, write_codes, write_wav
from app.handlers import reports_errors
from app.take import Take


class EncodeOut(NamedTuple):
    """What `encode` sets: the UI wires these outputs in this order."""
    heatmap: object = gr.skip()
    stats: object = gr.skip()
    take: object = gr.skip()
    roundtrip: object = gr.skip()
    ablation: object = gr.skip()
    audio_original: object = gr.skip()
    audio_redecoded: object = gr.skip()
    files: object = gr.skip()


class Recording:
    def __init__(self, pipe, outputs: OutputDir, figure):
        self.pipe, self.info, self.outputs = pipe, pipe.info, outputs
        self.figure = figure  # Lab.figure: the heatmap as the rest of the page draws it

    def available(self) -> bool:
        return bool(self.info.get("can_encode"))

    @reports_errors
    def encode(self, audio, view: str):
        """(rate, samples) from the record/upload component → the take, the measures and the ablation."""
        if audio is None:
            raise gr.Error("Record or upload a clip first.", print_exception=False)
        codes, original, decoded = self._round_trip(audio)
        rate = self.info["sample_rate"]
        measured = roundtrip.measures(original, decoded, rate)
        full = roundtrip.mel_distance(original, decoded, rate)
        costs = [c - full for c in self._ablation(codes, original)]
        take = Take.from_codes(codes, decoded, view=view)
        take.text = "(your recording)"
        folder = self.outputs.new()
        files = [write_wav(folder, decoded, rate, "redecoded.wav"),
                 *write_codes(folder, codes, take.text, {"roundtrip": measured})]
        return EncodeOut(self.figure(take), panels.encoded(take.frames, self.info["frame_ms"] / 1000, measured),
                         take, panels.roundtrip(measured, roundtrip.MEANING),
                         charts.ablation(costs), (rate, to_int16(original)),
                         (rate, to_int16(decoded)), [str(p) for p in files])

    @reports_errors
    def encode_api(self, audio):
        """The `encode` API: a clip → {"codes": [[16 ints] per frame], "snr_db", "mel_distance"} and the
        re-decoded WAV."""
        if audio is None:
            raise gr.Error("pass an audio file", print_exception=False)
        codes, original, decoded = self._round_trip(audio)
        rate = self.info["sample_rate"]
        wav = write_wav(self.outputs.new(), decoded, rate, "redecoded.wav")
        return {"codes": codes.astype(int).tolist(), **roundtrip.measures(original, decoded, rate)}, str(wav)

    def _round_trip(self, audio) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """codes [T, 16], the clip as the codec heard it (mono, at the model's rate), and its re-decode."""
        if not self.available():
            raise gr.Error("This model's codec has no encoder (Qwen3-Omni publishes none): load a Qwen3-TTS "
                           "model to turn audio into codes.", print_exception=False)
        rate, samples = audio
        codes = self.pipe.encode(samples, int(rate))
        original = self.pipe.prepare_audio(samples, int(rate))
        return codes, original, self.pipe.decode(codes)

    def _ablation(self, codes: np.ndarray, original: np.ndarray) -> list[float]:
        """Per codebook j: the log-mel distance to the original of the re-decode without CBj."""
        costs = []
        for j in range(codes.shape[1]):
            drop = np.zeros(codes.shape, bool)
            drop[:, j] = True
            costs.append(roundtrip.mel_distance(original, self.pipe.decode(codes, drop=drop), self.info["sample_rate"]))
        return costs
