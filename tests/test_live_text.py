"""Text still being written (`Pipeline.stream_text`, issue 62): a request whose text arrives in pieces makes the
codes and audio of the same text given whole in streaming text input, bit for bit, however it is cut and however
slowly it comes; the talker waits for text it has not got, and the wait is counted; a text never ended is stopped
by the time budget; bad input gets a message."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest

from omni_core import SpeechRequest, TextDelta
from omni_core.errors import RequestError
from tests.test_engine import assert_same, collect
from tests.tts_oracle import our_tts, tone

TEXT = "Hello world, this is live text. 你好，世界 12 don't stop!"


def cuts(text: str, how: str) -> list[str]:
    """The text cut into pieces: a character each, a word each (with its space), at fixed odd places, or whole."""
    if how == "chars":
        return list(text)
    if how == "words":
        return [w + " " for w in text.split(" ")[:-1]] + [text.split(" ")[-1]]
    if how == "odd":
        at = [0, 3, 4, 11, 12, 25, 33, 40, len(text)]
        return [text[a:b] for a, b in zip(at, at[1:])]
    return [text]


def feed(stream, pieces: list[str], pause_s: float = 0.0, end: bool = True) -> threading.Thread:
    """Send the pieces from a thread of their own (as a client would), `pause_s` apart, then end the text."""
    def send():
        for piece in pieces:
            stream.append(piece)
            time.sleep(pause_s)
        if end:
            stream.end()
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def pipe():
    return our_tts("custom_voice", exact=False)  # shared with other files (cached): never closed here


REQUESTS = [
    SpeechRequest(TEXT, speaker="vivian", predictor="kv", max_frames=40),
    SpeechRequest(TEXT, speaker="ryan", do_sample=True, seed=3, top_k=20, max_frames=30),
    SpeechRequest("Speak slowly here.", speaker="ryan", instruct="Slowly.", predictor="compare"),
]


@pytest.mark.parametrize("how", ["chars", "words", "odd", "whole"])
@pytest.mark.parametrize("i", range(len(REQUESTS)))
def test_pieces_give_the_codes_of_the_whole_text(pipe, how, i):
    req = REQUESTS[i]
    want = pipe.generate(dataclasses.replace(req, text_input="streaming"))
    stream = pipe.stream_text(dataclasses.replace(req, text=""))
    feed(stream, cuts(req.text, how), pause_s=0.002)
    got = collect(stream)
    assert_same(got, want)
    assert got.text == req.text and got.prompt_ids == want.prompt_ids


@pytest.mark.parametrize("exact", [False, True])
def test_a_cloned_voice_and_exact_mode(exact):
    """A Base model's x-vector clone. In exact mode each matmul is one call of its rows, as the official code makes
    it: the whole text's tokens are projected in one call, the pieces' as they settle, and a GEMM's last bits
    depend on its rows: the same codes, the floats within float32's last bits."""
    base = our_tts("base", exact=exact)
    req = SpeechRequest("Is a test of the clone", reference_audio=(24000, tone(1.2)), predictor="kv", max_frames=20)
    want = base.generate(dataclasses.replace(req, text_input="streaming"))
    stream = base.stream_text(dataclasses.replace(req, text="Is a"))
    feed(stream, cuts(req.text[4:], "odd"), pause_s=0.01)
    got = collect(stream)
    if not exact:
        return assert_same(got, want)
    np.testing.assert_array_equal(got.codes, want.codes)
    assert got.text_ids == want.text_ids
    np.testing.assert_allclose(got.probs, want.probs, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(got.audio, want.audio, rtol=1e-4, atol=1e-5)


def test_the_talker_waits_for_text_it_has_not_got(pipe):
    """'Hello wor': 'Hello' is settled ('wor' may still grow), so the talker makes the prompt's frame and one a
    token after it and waits; the wait shows in the stats; the rest and the end let it finish as the whole text."""
    want = pipe.generate(SpeechRequest("Hello world", speaker="vivian", text_input="streaming", max_frames=30))
    stream = pipe.stream_text(SpeechRequest("Hello wor", speaker="vivian", max_frames=30))
    delta = next(stream)
    assert isinstance(delta, TextDelta) and delta.text == "Hello"
    settled = len(delta.token_ids)  # the checkpoint's Qwen2 tokenizer: "Hello" is one token
    while next(stream) and stream.frames_made < settled:
        pass
    time.sleep(0.3)
    assert stream.frames_made == settled  # no next frame without the next token
    stream.append("ld")
    stream.end()
    result = collect(stream)
    assert_same(result, want)
    assert result.text == "Hello world"
    assert 0.2 < result.stats.text_wait_s < 1.0  # counted from the first step that found the talker waiting


def test_text_never_ended_is_stopped_by_the_time_budget(pipe):
    # The budget counts from admission, the wait from the frame that used up the text: the frames before it
    # took 0.25 s of a 0.5 s budget on a loaded 2-core Zen 3, so the budget leaves the wait most of 2 s.
    before = pipe.time_budget_s
    pipe.time_budget_s = 2.0
    try:
        stream = pipe.stream_text(SpeechRequest("Still writing", speaker="vivian"))
        t0 = time.perf_counter()
        result = collect(stream)
    finally:
        pipe.time_budget_s = before
    assert result.stats.stopped == "time_budget" and time.perf_counter() - t0 < 6
    assert result.stats.text_wait_s > 1.0 and pipe.active == 0


def test_a_closed_stream_frees_its_place(pipe):
    stream = pipe.stream_text(SpeechRequest("Hello there", speaker="vivian"))
    assert isinstance(next(stream), TextDelta)  # "Hello" settled; the talker is speaking or waiting for more
    stream.close()
    deadline = time.perf_counter() + 5
    while not stream.released and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert stream.released and stream.stopped == "cancelled" and pipe.active == 0


def test_an_empty_text_ended_speaks_nothing(pipe):
    stream = pipe.stream_text(SpeechRequest("", speaker="vivian"))
    stream.end()
    result = collect(stream)
    assert result.codes.shape == (0, 16) and result.stats.stopped == "eos"
    assert any("nothing to speak" in w for w in result.stats.warnings)


def test_sixteen_clients_at_once_each_get_their_solo_run(pipe):
    texts = [f"Client {i} says: {'la ' * (i % 4)}hello." for i in range(16)]
    requests = [SpeechRequest(t, speaker="vivian", predictor=("kv", "reprefill")[i % 2], max_frames=12)
                for i, t in enumerate(texts)]
    solo = [pipe.generate(dataclasses.replace(r, text_input="streaming")) for r in requests]
    streams = [pipe.stream_text(dataclasses.replace(r, text="")) for r in requests]
    for i, (stream, req) in enumerate(zip(streams, requests)):
        feed(stream, cuts(req.text, ("chars", "words", "odd")[i % 3]), pause_s=0.001 * (i % 5))
    together = [collect(s) for s in streams]
    for got, want in zip(together, solo):
        assert_same(got, want)
    assert max(r.stats.batch_max for r in together) > 1


def test_bad_input_gets_a_message(pipe):
    stream = pipe.stream_text(SpeechRequest("Hi", speaker="vivian", max_frames=3))
    with pytest.raises(RequestError, match="must be a string"):
        stream.append(3)
    stream.end()
    with pytest.raises(RequestError, match="already ended"):
        stream.append(" more")
    assert collect(stream).text == "Hi"
    for bad, match in [(dict(text_input="whole"), "text_input='streaming'"), (dict(mode="chat"), "mode='speak'")]:
        with pytest.raises(RequestError, match=match):
            pipe.stream_text(SpeechRequest("Hi", speaker="vivian", **bad))
    assert pipe.active == 0


def test_a_qwen3_omni_model_says_it_streams_its_own_reply():
    from tests.conftest import our_pipeline

    with pytest.raises(RequestError, match="needs a Qwen3-TTS model"):
        our_pipeline("tiny").stream_text(SpeechRequest("Hi"))


@pytest.mark.parametrize("text", ["Good morning", "Good morning world, this text runs on past the clip's codes."])
def test_an_in_context_clone_waits_for_the_text_its_prompt_holds(text):
    """An ICL clone's prompt holds the transcript and text over the clip's codes (16 rows for 1.2 s): it starts once
    that much text has settled (or the text ended shorter), then reads the rest a token a frame."""
    base = our_tts("base", exact=False)
    req = SpeechRequest(text, reference_audio=(24000, tone(1.2)), reference_text="Hello the voice", max_frames=24)
    want = base.generate(dataclasses.replace(req, text_input="streaming"))
    stream = base.stream_text(dataclasses.replace(req, text=""))
    feed(stream, cuts(text, "words"), pause_s=0.01)
    assert_same(collect(stream), want)


def test_a_text_cut_at_the_limit_says_so(pipe):
    from omni_core.request import MAX_TEXT_CHARS

    stream = pipe.stream_text(SpeechRequest("a" * (MAX_TEXT_CHARS - 2), speaker="vivian", max_frames=2))
    stream.append("bcd")
    stream.end()
    result = collect(stream)
    assert result.text == "a" * (MAX_TEXT_CHARS - 2) + "bc"
    assert any("passed 2000 characters" in w for w in result.stats.warnings)
    np.testing.assert_array_equal(result.codes.shape, (2, 16))
