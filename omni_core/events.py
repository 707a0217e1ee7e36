"""What `Pipeline.stream()` yields, in order: TextDelta*, then Frame / AudioChunk
interleaved as frames are made, then one Done carrying the whole `Result`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass
class TextDelta:
    text: str  # decoded text of the new token(s)
    token_ids: list[int]


@dataclass
class Frame:
    index: int  # frame number; frame i covers [i*80 ms, (i+1)*80 ms)
    codes: np.ndarray  # int64 [16]: CB0 from the talker, CB1..CB15 from the code predictor
    probs: np.ndarray  # float32 [16]: probability of each chosen code under its (processed) distribution
    talker_ms: float
    predictor_ms: float
    mismatch: np.ndarray | None = None  # compare mode: bool [16], where the KV predictor disagreed
    other_codes: np.ndarray | None = None  # compare mode: the KV predictor's codes
    batch: int = 1  # requests that shared the engine step that made this frame
    top_codes: np.ndarray | None = None  # int64 [16, 5]: each codebook's 5 most probable codes, most probable first
    top_probs: np.ndarray | None = None  # float32 [16, 5]: their probabilities (the distribution `probs` is from)


@dataclass
class AudioChunk:
    audio: np.ndarray  # float32 mono at `sample_rate`, the next stretch of the utterance
    sample_rate: int
    first_frame: int  # first frame this chunk belongs to


@dataclass
class Stats:
    thinker_s: float = 0.0
    talker_s: float = 0.0
    predictor_s: float = 0.0
    codec_s: float = 0.0
    total_s: float = 0.0  # from submission to the end: queue_s included
    queue_s: float = 0.0  # waiting for a batch slot, from submission to admission
    first_audio_s: float | None = None  # from submission to the first AudioChunk (what a user feels)
    first_audio_admitted_s: float | None = None  # from admission to the first AudioChunk (the engine's part)
    frames: int = 0
    audio_s: float = 0.0
    rtf: float | None = None  # total_s / audio_s (queue included): below 1 is faster than real time
    predictor_ms_per_frame: float | None = None
    text_tokens: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    predictor: str = "reprefill"
    cuda_graph: bool = False
    mismatches: int | None = None  # compare mode: codes where the two predictors differ
    batch_max: int = 0  # the most requests that shared an engine step with this one's frames
    batch_mean: float | None = None  # requests per step, averaged over this request's frames
    text_wait_s: float = 0.0  # text still being written (Pipeline.stream_text): how long the talker waited for it
    stopped: str = "max_frames"  # "eos" | "max_frames" | "cancelled" | "time_budget" | "stalled"
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Result:
    codes: np.ndarray  # int64 [T, 16]
    audio: np.ndarray  # float32 [samples], 24 kHz
    text: str  # what was spoken
    prompt_ids: list[int]  # thinker input ids
    text_ids: list[int]  # the ids that were spoken
    stats: Stats
    probs: np.ndarray | None = None  # float32 [T, 16]
    sample_rate: int = 24000
    top_codes: np.ndarray | None = None  # int64 [T, 16, 5]: Frame.top_codes of every frame
    top_probs: np.ndarray | None = None  # float32 [T, 16, 5]


@dataclass
class Done:
    result: Result


Event = TextDelta | Frame | AudioChunk | Done
