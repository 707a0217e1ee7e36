"""What a request gives back: its Frame events, audio chunks as the codec decodes them,
and the Result at the end, all assembled from the Sequence's state."""

from __future__ import annotations

import time

import numpy as np
import torch

from omni_core.engine.sequence import STAGES, Sequence
from omni_core.engine.speech_model import SpeechModel
from omni_core.events import AudioChunk, Done, Frame, Result
from omni_core.models.sampling import TOP_K_ALTERNATIVES

MAX_CHUNK_FRAMES = 8  # audio chunks of 1, 2, 4, 8, 8, ... frames: the first as soon as one frame
# is decoded, later ones larger (fewer codec calls; 640 ms of audio each).


class EngineError(RuntimeError):
    """The engine cannot serve: its thread died, its steps kept failing, or its pipeline was closed.
    Every request it held gets this error, and so does every later call."""


class Failed:
    """What a request's queue gets instead of Done when it fails; the stream raises `error`."""

    def __init__(self, error: BaseException):
        self.error = error


def add_frame(seq: Sequence, cb0, p0, top0, top0_probs, predicted, other, talker_ms: float, predictor_ms: float,
              batch: int, model: SpeechModel) -> None:
    """One frame: CB0 [1] with probability p0 [1] and alternatives top0, top0_probs [1, 5]; predicted =
    (codes [1, 15], probs [1, 15], embeds [1, 15, C], top codes [1, 15, 5], top probs [1, 15, 5]);
    other: the KV predictor's codes [1, 15] in compare mode."""
    codes, probs, embeds, top, top_probs = predicted
    row = torch.cat([cb0, codes[0]]).cpu().numpy()
    frame = Frame(len(seq.codes), row, torch.cat([p0, probs[0]]).float().cpu().numpy(), talker_ms,
                  predictor_ms, batch=batch, top_codes=torch.cat([top0, top[0]]).cpu().numpy(),
                  top_probs=torch.cat([top0_probs, top_probs[0]]).float().cpu().numpy())
    if other is not None:
        frame.other_codes = np.concatenate([row[:1], other[0].cpu().numpy()])
        frame.mismatch = frame.other_codes != row
        seq.mismatches += int(frame.mismatch.sum())
    seq.codes.append(row), seq.probs.append(frame.probs), seq.batches.append(batch)
    seq.top_codes.append(frame.top_codes), seq.top_probs.append(frame.top_probs)
    seq.last_cb0, seq.last_embeds = cb0, embeds
    seq.emit(frame)
    seq.pending.append(row)


def chunk_frames(sent: int) -> int:
    """The frames of a request's next audio chunk after `sent` chunks: 1, 2, 4, 8, 8, ... (its last chunk: the
    frames left when it finishes)."""
    return min(2 ** sent, MAX_CHUNK_FRAMES)


def audio_due(seq: Sequence) -> bool:
    """Whether the frames waiting for the codec make the request's next chunk (`chunk_frames`)."""
    return seq.decoder is not None and len(seq.pending) >= chunk_frames(seq.chunks_sent)


def codec_groups(seqs: list[Sequence]) -> list[list[Sequence]]:
    """Rows whose chunks can be decoded in one codec call: equal streams' `group_key` (the codec, the codec
    process if any, the codebooks, the position) and chunk length, and a codec that decodes such chunks
    together (`decodes_together`; else each row alone).
    Groups with a request's first audio come first (a newcomer hears itself before the others' pushes)."""
    groups: dict[tuple, list[Sequence]] = {}
    for seq in seqs:
        d = seq.decoder
        alone = None if d.codec.decodes_together(len(seq.pending)) else id(seq)  # else one by one
        groups.setdefault((*d.group_key(), len(seq.pending), alone), []).append(seq)
    return sorted(groups.values(), key=lambda g: g[0].chunks_sent > 0)


def decode(seqs: list[Sequence], model: SpeechModel, last: bool = False) -> list[None]:
    """A `codec_groups` group's pending frames, as each row's next chunk, through their streams in one codec
    call (engine/codec_stream.py); each row's audio comes to `_back` in the engine's thread (bit for bit what
    its own push gives), at once or when its codec process hands it back. A call that raises leaves the
    frames pending (each row may run again alone). last: the rows are finished: Done (or Failed, if a chunk of
    theirs failed) follows their last chunk."""
    G = model.config.num_code_groups
    chunks = [np.stack(s.pending, axis=1) if s.pending else np.zeros((G, 0), np.int64) for s in seqs]  # [G, n]
    firsts = [len(s.codes) - len(s.pending) for s in seqs]  # each chunk's first frame
    streams = [s.decoder for s in seqs]
    streams[0].decode(streams, chunks, last,
                      lambda results, seconds: _back(seqs, firsts, results, seconds, last, model))
    for seq in seqs:
        seq.pending = []
        seq.chunks_sent += 1
    return [None] * len(seqs)


def _back(seqs: list[Sequence], firsts: list[int], results: list, seconds: float, last: bool,
          model: SpeechModel) -> None:
    """In the engine's thread: a group's audio, (wav | None, error | None) per row; the codec's seconds for the
    call are charged to each row. A failed chunk fails its running row at the engine's next step."""
    for seq, first, (wav, error) in zip(seqs, firsts, results):
        seq.spent["codec"] += seconds
        if error is not None and seq.codec_error is None:
            seq.codec_error = error
        if seq.codec_error is None and wav.size:
            _emit_audio(seq, wav, first, model)
        if last:
            _end(seq, model)


def _emit_audio(seq: Sequence, wav: np.ndarray, first: int, model: SpeechModel) -> None:
    """A chunk's audio (its first frame's index): the request's next AudioChunk."""
    seq.audio.append(wav)
    if seq.stats.first_audio_s is None:
        now = time.perf_counter()
        seq.stats.first_audio_s = now - seq.submitted_at
        seq.stats.first_audio_admitted_s = now - seq.admitted_at
    seq.emit(AudioChunk(wav, model.config.sample_rate, first))


def finish(seq: Sequence, reason: str, model: SpeechModel) -> None:
    """Decode what is left, let go of the caches, then send Done (a caller who has read Done finds the request
    released): at once for a stream decoded in the engine's thread, after its last chunk for one in a codec
    process."""
    seq.stats.stopped = reason
    if seq.decoder is None:
        return _end(seq, model)
    decode([seq], model, last=True)
    seq.release()


def _end(seq: Sequence, model: SpeechModel) -> None:
    """The request is over: released, then Done, or Failed when a chunk of its audio failed."""
    seq.release()
    seq.emit(Done(result(seq, model)) if seq.codec_error is None else Failed(seq.codec_error))


def fail(seq: Sequence, error: BaseException) -> None:
    if seq.decoder is not None:  # no last chunk will end its stream
        seq.decoder.drop()
    seq.release()
    seq.emit(Failed(error))


def result(seq: Sequence, model: SpeechModel) -> Result:
    s, G, sample_rate = seq.stats, model.config.num_code_groups, model.config.sample_rate
    s.thinker_s, s.talker_s, s.predictor_s, s.codec_s = (seq.spent[k] for k in STAGES)
    now = time.perf_counter()
    s.total_s, s.frames = now - seq.submitted_at, len(seq.codes)
    s.queue_s = (seq.admitted_at or now) - seq.submitted_at
    audio = np.concatenate(seq.audio) if seq.audio else np.zeros(0, np.float32)
    s.audio_s = len(audio) / sample_rate
    s.rtf = s.total_s / s.audio_s if s.audio_s else None
    s.predictor_ms_per_frame = 1000 * s.predictor_s / s.frames if s.frames else None
    s.batch_max = max(seq.batches, default=0)
    s.batch_mean = float(np.mean(seq.batches)) if seq.batches else None
    if seq.req.predictor == "compare":
        s.mismatches = seq.mismatches
    spoken = seq.reply.spoken
    s.text_tokens = len(spoken)
    if seq.text_wait_since is not None:  # it ended while the talker waited for its caller's text
        s.text_wait_s += now - seq.text_wait_since
    if seq.feed is not None:  # live text: all that came
        text = seq.reply.text
    else:
        text = seq.req.text if seq.req.mode == "speak" else model.tokenizer.decode(spoken, skip_special_tokens=True)
    k = TOP_K_ALTERNATIVES
    return Result(stacked(seq.codes, (0, G), np.int64), audio.astype(np.float32), text, list(seq.prompt_ids),
                  spoken, s, stacked(seq.probs, (0, G), np.float32), sample_rate,
                  stacked(seq.top_codes, (0, G, k), np.int64), stacked(seq.top_probs, (0, G, k), np.float32))


def stacked(rows: list, empty_shape: tuple, dtype) -> np.ndarray:
    return (np.stack(rows) if rows else np.zeros(empty_shape)).astype(dtype)
