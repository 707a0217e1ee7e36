"""WS /v1/audio/speech/stream (app/api_ws.py, issue 62) on a real `python app.py` server on 127.0.0.1, through a
real WebSocket client (`websockets`): text sent in pieces comes back as the whole text's codes and audio, the
key applies (header or query), bad messages get the speech API's errors, a dropped connection frees its place,
a text never ended is stopped by the time budget, and 16 clients at once each get their solo run."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from app.audio_formats import pcm_bytes, wav_header
from omni_core import SpeechRequest

from .conftest import launch_app, our_pipeline

KEY = "ws-key"
BUDGET_S = 4  # the server's time budget: a text never ended is stopped after it


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> str:
    with launch_app(tmp_path_factory.mktemp("ws"), args=("--time-budget", str(BUDGET_S)),
                    OMNI_MODEL="tiny-tts", OMNI_API_KEY=KEY) as url:
        yield url


def socket(server: str, key: str | None = KEY, query: bool = False):
    url = server.replace("http://", "ws://") + "v1/audio/speech/stream"
    if query:
        return connect(f"{url}?api_key={key}", open_timeout=30)
    return connect(url, additional_headers={"Authorization": f"Bearer {key}"} if key else {}, open_timeout=30)


def speak(ws, pieces: list[str], end: bool = True, pause_s: float = 0.0, **start) -> dict:
    """Start, send the pieces (then end), and read to the end: audio bytes, frames' codes, texts, done, error."""
    ws.send(json.dumps({"type": "start", "voice": "ryan", "codes": True, **start}))
    for piece in pieces:
        ws.send(json.dumps({"type": "text", "text": piece}))
        time.sleep(pause_s)
    if end:
        ws.send(json.dumps({"type": "end"}))
    return read(ws)


def read(ws) -> dict:
    got = dict(audio=[], codes=[], text="", done=None, error=None, close=None)
    try:
        while True:
            message = ws.recv(timeout=60)
            if isinstance(message, bytes):
                got["audio"].append(message)
                continue
            message = json.loads(message)
            if message["type"] == "frame":
                got["codes"].append(message["codes"])
            elif message["type"] == "text":
                got["text"] += message["text"]
            else:
                got[message["type"]] = message
    except ConnectionClosed as closed:
        got["close"] = closed.rcvd.code if closed.rcvd else None
    return got


def library(text: str, frames: int):
    pipe = our_pipeline("tiny-tts")
    return pipe.generate(SpeechRequest(text, speaker="ryan", predictor="kv", text_input="streaming", max_frames=frames))


def active(server: str) -> int:
    with urllib.request.urlopen(f"{server}health", timeout=10) as answer:
        return json.load(answer)["active"]


TEXT = "Hello there, this is a socket."


def test_pieces_come_back_as_the_whole_texts_codes_and_audio(server):
    want = library(TEXT, 20)
    with socket(server) as ws:
        got = speak(ws, ["Hel", "lo the", "re, this is", " a socket."], pause_s=0.02, max_new_tokens=20)
    assert got["error"] is None and got["close"] == 1000
    np.testing.assert_array_equal(np.array(got["codes"]), want.codes)
    assert b"".join(got["audio"]) == pcm_bytes(want.audio)
    assert got["text"] == TEXT and got["done"]["text"] == TEXT and got["done"]["stats"]["frames"] == 20


def test_wav_starts_with_a_header_of_unknown_length_and_the_key_may_come_in_the_query(server):
    want = library("Short one.", 6)
    with socket(server, query=True) as ws:
        got = speak(ws, ["Short", " one."], response_format="wav", max_new_tokens=6)
    assert got["audio"][0] == wav_header(24000) and b"".join(got["audio"][1:]) == pcm_bytes(want.audio)


@pytest.mark.parametrize("key, query", [(None, False), ("wrong", False), ("wrong", True)])
def test_without_the_key_the_socket_is_refused(server, key, query):
    with socket(server, key, query) as ws:
        got = read(ws)  # refused before its first message
    assert got["error"]["error"]["code"] == "invalid_api_key" and got["close"] == 1008 and not got["audio"]


@pytest.mark.parametrize("messages, param, message", [
    (['{"type": "text", "text": "Hi"}'], "type", "first message is"),
    (["not json"], "type", "JSON object"),
    (['{"type": "start", "voice": "nobody"}'], "voice", "unknown voice"),
    (['{"type": "start", "response_format": "mp3"}'], "response_format", "cannot stream"),
    (['{"type": "start", "text_input": "whole", "mode": "chat"}', '{"type": "text", "text": 5}'], "text",
     "must be a string"),
    (['{"type": "start"}', '{"type": "shout"}'], "type", "unknown message type"),
])
def test_a_bad_message_gets_the_apis_error_and_a_close(server, messages, param, message):
    with socket(server) as ws:
        for m in messages:
            ws.send(m)  # the server answers a bad one when it reads it
        got = read(ws)
    error = got["error"]["error"]
    assert error["param"] == param and message in error["message"] and got["close"] == 1003
    wait_idle(server)


def wait_idle(server: str, within_s: float = 5.0) -> None:
    deadline = time.perf_counter() + within_s
    while active(server):
        assert time.perf_counter() < deadline, f"{active(server)} requests still held"
        time.sleep(0.02)


def test_a_dropped_connection_frees_its_place(server):
    ws = socket(server)
    ws.send(json.dumps({"type": "start", "voice": "ryan", "input": "A long text that the client never"}))
    assert isinstance(ws.recv(timeout=60), str)  # the first settled tokens: it runs
    ws.close()
    wait_idle(server, 2.0)


def test_a_text_never_ended_is_stopped_by_the_time_budget(server):
    with socket(server) as ws:
        got = speak(ws, ["Still writing"], end=False)
    assert got["done"]["stats"]["stopped"] == "time_budget" and got["done"]["stats"]["text_wait_s"] > 1
    assert any("time budget" in w for w in got["done"]["stats"]["warnings"])


def test_sixteen_clients_at_once_each_get_their_solo_run(server):
    texts = [f"Client {i}: {'la ' * (i % 3)}done." for i in range(16)]
    wants = [library(t, 10) for t in texts]
    results = [None] * 16

    def client(i):
        with socket(server) as ws:
            words = texts[i].split(" ")
            results[i] = speak(ws, [w + " " for w in words[:-1]] + words[-1:], pause_s=0.002 * (i % 4),
                               max_new_tokens=10)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for got, want in zip(results, wants):
        np.testing.assert_array_equal(np.array(got["codes"]), want.codes)
        assert b"".join(got["audio"]) == pcm_bytes(want.audio)
    assert max(r["done"]["stats"]["batch_max"] for r in results) > 1
