"""The codec in a process of its own (engine/codec_process.py), or in several (engine/codec_pool.py): every
request's audio is bit for bit what the engine's own thread decodes (one kernel thread each), chunks come
back in order and before Done, a chunk that fails fails its request alone, and a codec process that dies
fails the requests it held (the other processes' go on) while later requests get a new one."""

from __future__ import annotations

import os
import shutil
import signal
import time

import numpy as np
import pytest
import torch

from omni_core import AudioChunk, Done, Frame, SpeechRequest, load_pipeline
from omni_core.engine import codec_pool, codec_process, output
from omni_core.engine.codec_pool import CodecPool
from omni_core.engine.codec_stream import LocalCodec
from omni_core.engine.codec_process import CodecProcess, CodecProcessError
from omni_core.engine.sequence import Sequence

from .conftest import our_pipeline
from .test_engine import MIX, assert_same, collect, staggered
from .test_tts_engine import CLONES
from .tts_oracle import checkpoint


@pytest.fixture(scope="module")
def split():
    """The tiny model with its codec in a process of one kernel thread (this test process runs one)."""
    with load_pipeline("tiny", device="cpu", codec_threads=1) as pipe:
        yield pipe


def test_requests_get_the_audio_the_engines_thread_decodes(split):
    solo = [our_pipeline("tiny").generate(r) for r in MIX[:5]]
    for got, want in zip(staggered(split, MIX[:5]), solo):
        assert_same(got, want)  # codes, and the audio bit for bit
        assert got.stats.codec_s > 0  # the process's time, charged when the audio is back


def test_streams_spread_over_two_processes_get_the_audio_the_engines_thread_decodes():
    """Two codec processes: the streams alternate between them, a step's groups are cut by process, and
    every request's audio is still its solo decode's, bit for bit."""
    with load_pipeline("tiny", device="cpu", codec_processes=2) as pipe:
        pool = pipe.engine.runner.codec
        assert len(pool.members) == 2 and pipe.engine.codec_threads == 1
        solo = [our_pipeline("tiny").generate(r) for r in MIX[:5]]
        for got, want in zip(staggered(pipe, MIX[:5]), solo):
            assert_same(got, want)
        assert all(member.next_tag > 0 for member in pool.members)  # both decoded chunks


def test_a_codec_process_that_dies_fails_its_own_streams_alone():
    """Of two processes, the one killed fails the request whose stream it held; the other request, in the
    other process, gets all its audio (its solo decode's); the next request opens in a new process."""
    requests = [SpeechRequest("Cut short.", max_frames=200), SpeechRequest("Goes on.", max_frames=30, seed=1)]
    with load_pipeline("tiny", device="cpu", codec_processes=2) as pipe:
        pool = pipe.engine.runner.codec
        doomed, going = pipe.stream_together(requests)  # opened in members 0 and 1
        for event in doomed:
            if isinstance(event, AudioChunk):
                break
        killed = pool.members[0]
        os.kill(killed._process.pid, signal.SIGKILL)
        with pytest.raises(CodecProcessError, match="the codec process (ended|is gone)"):
            for _ in doomed:
                pass
        assert_same(collect(going), our_pipeline("tiny").generate(requests[1]))
        after = SpeechRequest("After the crash.", max_frames=9)
        assert_same(pipe.generate(after), our_pipeline("tiny").generate(after))
        assert pool.members[0] is not killed and not killed.alive and pool.members[1].alive


def test_when_no_new_codec_process_can_start_the_streams_open_in_the_one_left(monkeypatch):
    """A codec process died and no other can start (here: the system refuses new processes): later requests
    decode in the process still alive (the same audio), not fail."""
    with load_pipeline("tiny", device="cpu", codec_processes=2) as pipe:
        pool = pipe.engine.runner.codec
        dead, alive = pool.members
        dead.close()

        def refused(*args):
            raise OSError("[Errno 11] Resource temporarily unavailable")

        monkeypatch.setattr(codec_pool, "CodecProcess", refused)
        requests = [SpeechRequest("Still heard.", max_frames=5), SpeechRequest("Heard too.", max_frames=4, seed=2)]
        for request in requests:
            assert_same(pipe.generate(request), our_pipeline("tiny").generate(request))
        assert pool.members[1] is alive and pool.members[0] is dead and alive.next_tag >= 4


def test_a_clones_reference_codes_go_first_in_the_process():
    """Qwen3-TTS Base: a clone's reference codes open its stream in the process (their audio is dropped)."""
    with load_pipeline(checkpoint("base"), device="cpu") as here, \
            load_pipeline(checkpoint("base"), device="cpu", codec_threads=1) as there:
        solo = [here.generate(r) for r in CLONES]
        for got, want in zip([collect(s) for s in there.stream_together(CLONES)], solo):
            assert_same(got, want)


def test_audio_chunks_follow_their_frames_and_come_before_done(split):
    events = list(split.stream(SpeechRequest("In order, please.", max_frames=21)))
    assert isinstance(events[-1], Done)
    frames, firsts = 0, []
    for event in events[:-1]:
        if isinstance(event, Frame):
            frames += 1
        elif isinstance(event, AudioChunk):
            assert event.first_frame < frames  # never ahead of the frames made
            firsts.append(event.first_frame)
    assert firsts == [0, 1, 3, 7, 15] and frames == 21  # chunks of 1, 2, 4, 8, and the 6 left at the end


class SlowCodec(torch.nn.Module):
    """The tiny codec, `delay` seconds slower a call (60 ms: slower than the engine's step)."""

    def __init__(self, codec, delay: float = 0.06):
        super().__init__()
        self.inner, self.cfg, self.dtype, self.delay = codec, codec.cfg, codec.dtype, delay

    def decodes_together(self, frames: int) -> bool:
        return True

    def num_samples(self, num_frames: int) -> int:
        return self.inner.num_samples(num_frames)

    def forward(self, *args, **kwargs):
        time.sleep(self.delay)
        return self.inner(*args, **kwargs)


def test_the_engine_waits_for_a_slow_codec_one_step_behind():
    """A step sends its chunks only once the chunks of the steps before it are back: with a codec slower
    than the step, the engine never has more than that step's chunk and a finished row's last one out."""
    with load_pipeline("tiny", device="cpu", codec_threads=1) as pipe:
        runner = pipe.engine.runner
        runner.codec.close()
        runner.codec = CodecPool(SlowCodec(pipe.code2wav), threads=1, wake=pipe.engine.wake)
        process = runner.codec.members[0]
        out, real = [], process.push

        def push(items, callback):
            out.append(process.outstanding)
            real(items, callback)

        process.push = push
        request = SpeechRequest("Pacing.", max_frames=40)  # chunks of 1, 2, 4, 8, 8, 8, 8, then 1 at the end
        assert_same(pipe.generate(request), our_pipeline("tiny").generate(request))
    assert len(out) == 8 and out[:-1] == [0] * 7 and out[-1] <= 1, out


def test_a_chunk_that_fails_fails_its_stream_alone():
    """A group whose call raises is decoded stream by stream: the healthy stream gets its audio (what it
    gets alone), the bad one an error, and its later chunks an error too."""
    codec = our_pipeline("tiny").code2wav
    process = CodecProcess(codec, threads=1)
    try:
        good, bad, alone = (process.open(None) for _ in range(3))
        codes = np.random.default_rng(0).integers(0, 100, (16, 2))
        wrong = codes.copy()
        wrong[3, 1] = 10 ** 6  # no such code
        results = []
        process.push([(good, codes, False), (bad, wrong, False)], lambda r, s: results.append(r))
        process.push([(alone, codes, False)], lambda r, s: results.append(r))
        process.push([(bad, codes, False)], lambda r, s: results.append(r))
        process.wait_for(process.next_tag)
        (good_wav, none), (nothing, error) = results[0]
        assert none is None and nothing is None and "IndexError" in error
        np.testing.assert_array_equal(good_wav, results[1][0][0])
        assert results[2] == [(None, "an earlier chunk of this stream failed")]
    finally:
        process.close()
    assert not process._process.is_alive()


def test_a_failed_requests_stream_is_dropped_in_the_process():
    """A request that fails gets no last chunk: its stream is dropped in the process, not kept for good."""
    pipe = our_pipeline("tiny")
    process = CodecProcess(pipe.code2wav, threads=1)
    try:
        seq = Sequence(SpeechRequest("Fails."), [], pipe.device, pipe.dtype)
        stream = seq.decoder = process.open(None)
        output.fail(seq, RuntimeError("its prompt was bad"))
        results = []
        process.push([(stream, np.zeros((16, 1), np.int64), False)], lambda r, s: results.append(r))
        process.wait_for(process.next_tag)
        assert results == [[(None, "an earlier chunk of this stream failed")]]  # no such stream any more
    finally:
        process.close()


def test_a_codec_process_that_dies_fails_its_requests_and_a_new_one_serves_the_next(split):
    stream = split.stream(SpeechRequest("Cut short.", max_frames=200))
    for event in stream:
        if isinstance(event, AudioChunk):
            break
    process = split.engine.runner.codec.members[0]
    os.kill(process._process.pid, signal.SIGKILL)
    with pytest.raises(CodecProcessError, match="the codec process (ended|is gone)"):
        for _ in stream:
            pass
    deadline = time.monotonic() + 30
    while split.engine.has_thread and not stream.released and time.monotonic() < deadline:
        time.sleep(0.05)
    request = SpeechRequest("After the crash.", max_frames=9)
    assert_same(split.generate(request), our_pipeline("tiny").generate(request))
    assert split.engine.runner.codec.members[0] is not process


def test_a_hung_codec_process_is_ended_and_its_request_fails(monkeypatch):
    """Pushes out and nothing back for STALL_S: the engine ends the process; the request fails with the
    reason and the next one gets a new process."""
    monkeypatch.setattr(codec_process, "STALL_S", 1.0)
    with load_pipeline("tiny", device="cpu", codec_threads=1) as pipe:
        pool = pipe.engine.runner.codec
        pool.members[0].close()
        hung = pool.members[0] = CodecProcess(SlowCodec(pipe.code2wav, delay=3600), threads=1)  # replaced by the codec
        with pytest.raises(CodecProcessError, match="ended"):
            pipe.generate(SpeechRequest("Never heard.", max_frames=5))
        assert not hung._process.is_alive()
        monkeypatch.setattr(codec_process, "STALL_S", 120.0)  # the new process takes seconds to start
        request = SpeechRequest("Heard.", max_frames=5)
        assert_same(pipe.generate(request), our_pipeline("tiny").generate(request))


def test_closing_the_pipeline_ends_its_codec_process():
    pipe = load_pipeline("tiny", device="cpu", codec_threads=1)
    pipe.generate(SpeechRequest("Short.", max_frames=3))
    process = pipe.engine.runner.codec.members[0]._process
    pipe.close()
    assert not process.is_alive()


def test_a_bad_thread_count_is_refused():
    with pytest.raises(ValueError, match="codec_threads must be a positive number"):
        load_pipeline("tiny", device="cpu", codec_threads=0)
    with pytest.raises(ValueError, match="codec_processes must be a positive number"):
        load_pipeline("tiny", device="cpu", codec_processes=0)


def test_without_room_in_shared_memory_the_engine_decodes_in_its_thread(monkeypatch, caplog):
    """A container's small /dev/shm cannot take the codec's weights: the engine says so and decodes in its
    own thread (the same audio)."""
    monkeypatch.setattr(codec_process.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(64 << 20, 64 << 20, 0))
    request = SpeechRequest("No room.", max_frames=5)
    with load_pipeline("tiny", device="cpu", codec_threads=1) as pipe:
        assert isinstance(pipe.engine.runner.codec, LocalCodec) and pipe.engine.codec_threads is None
        assert "decoded in the engine's thread: /dev/shm has 0 MiB free" in caplog.text
        assert_same(pipe.generate(request), our_pipeline("tiny").generate(request))
