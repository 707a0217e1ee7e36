"""The OpenAI-compatible speech API (app/api.py) on a real `python app.py` server on 127.0.0.1, through the
`openai` client and plain HTTP: every format decoded and checked, streaming, the page's codes, bad fields,
the key, the limits, a full waiting line and a dropped stream.

One server for the module: tiny-tts (Qwen3-TTS CustomVoice, speakers dylan, ryan, vivian), an API key,
and a small engine (2 running, 1 waiting) so that the line fills with a few requests.
"""

from __future__ import annotations

import io
import json
import time
import urllib.request

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from gradio_client import Client

from .conftest import launch_app

KEY = "test-key"
TEXT = "Hello from the speech API."
SAMPLES_PER_FRAME = 1920  # 80 ms at 24 kHz
FRAMES = 24  # per take: short, so the file runs fast
LONG = 1000  # frames: a request that runs for a while


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> str:
    with launch_app(tmp_path_factory.mktemp("api"), args=("--max-batch", "2", "--max-waiting", "1"),
                    OMNI_MODEL="tiny-tts", OMNI_API_KEY=KEY) as url:
        yield url


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def codes(client) -> np.ndarray:
    """The take's codes [T, 16], as the API's `codes` format gives them."""
    return np.array(json.loads(speak(client, "codes"))["codes"])


def speak(client, fmt: str, voice: str = "ryan", **kw) -> bytes:
    return client.audio.speech.create(model="tiny-tts", voice=voice, input=TEXT, response_format=fmt,
                                      extra_body={"max_new_tokens": FRAMES}, **kw).content


def post(server: str, body, key: str | None = KEY, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server}v1/audio/speech", content=content, headers=headers, timeout=120, **kw)


def active(server: str) -> int:
    with urllib.request.urlopen(f"{server}health", timeout=10) as answer:
        return json.load(answer)["active"]


def held_stream(server: str, text: str, held: list, first_audio: bool = True):
    """A long streamed request left open (appended to `held` as (client, response)) after its first audio
    (first_audio: it is running then) or its headers (it may still wait); its client reads no further."""
    http = httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
    request = http.build_request("POST", f"{server}v1/audio/speech", json=dict(
        input=text, voice="dylan", response_format="pcm", stream=True, max_new_tokens=LONG))
    response = http.send(request, stream=True)
    body = response.iter_raw()  # kept: a dropped iterator closes the response
    held.append((http, response, body))
    assert response.status_code == 200, response.read()
    if first_audio:
        next(body)


def let_go(held: list) -> None:
    for http, response, _ in held:
        response.close()
        http.close()


def wait_idle(server: str, within_s: float) -> float:
    start = time.perf_counter()
    while active(server):
        assert time.perf_counter() - start < within_s, f"still {active(server)} requests after {within_s} s"
        time.sleep(0.02)
    return time.perf_counter() - start


# --- the formats ---------------------------------------------------------------------------------

def test_codes_are_the_pages_take_for_the_same_request(server, codes):
    page = Client(server, verbose=False)  # the page stays open without the key
    take, _ = page.predict(TEXT, "speak", "ryan", "kv", False, 0, FRAMES, api_name="/codes")
    assert codes.shape == (FRAMES, 16)
    np.testing.assert_array_equal(codes, np.array(take["codes"]))


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3"])
def test_each_format_decodes_to_the_take(client, codes, fmt):
    audio, rate = sf.read(io.BytesIO(speak(client, fmt)), dtype="int16")
    pcm = np.frombuffer(speak(client, "pcm"), "<i2")
    assert rate == 24000 and audio.ndim == 1
    assert len(audio) == len(pcm) == len(codes) * SAMPLES_PER_FRAME
    assert np.abs(pcm).max() > 0
    if fmt == "mp3":  # lossy: the same sound, not the same samples
        assert np.corrcoef(audio.astype(float), pcm.astype(float))[0, 1] > 0.9
    else:
        np.testing.assert_array_equal(audio, pcm)


def test_streaming_sends_chunks_as_frames_are_made_with_the_same_audio(client, codes):
    chunks = []
    with client.audio.speech.with_streaming_response.create(
            model="tiny-tts", voice="ryan", input=TEXT, response_format="pcm",
            extra_body={"stream": True, "max_new_tokens": FRAMES}) as answer:
        assert answer.headers["content-type"] == "audio/pcm"
        assert answer.headers.get("transfer-encoding") == "chunked"
        chunks = list(answer.iter_bytes())
    assert len(chunks) >= 2, "the audio came in one piece"
    assert b"".join(chunks) == speak(client, "pcm")


def test_a_streamed_wav_has_a_header_of_unknown_length_then_the_samples(client, codes):
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="RYAN", input=TEXT, response_format="wav",
            extra_body={"stream": True, "max_new_tokens": FRAMES}) as answer:
        body = answer.read()
    assert body[:4] == b"RIFF" and body[8:16] == b"WAVEfmt " and body[36:40] == b"data"
    assert body[40:44] == b"\xff\xff\xff\xff"
    assert body[44:] == speak(client, "pcm")
    assert len(body[44:]) == 2 * len(codes) * SAMPLES_PER_FRAME


def test_voices_models_and_health(server, client):
    assert [m.id for m in client.models.list()][:2] == ["tiny-tts", "tts-1"]
    voices = httpx.get(f"{server}v1/audio/voices", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert voices["voices"] == ["dylan", "ryan", "vivian"] and voices["openai_voices"]["alloy"] == "dylan"
    assert httpx.get(f"{server}health").json()["status"] == "ok"  # open without the key
    assert speak(client, "pcm", voice="alloy") == speak(client, "pcm", voice="Dylan")


# --- errors --------------------------------------------------------------------------------------

BAD_FIELDS = [  # (fields, param, what the message says)
    (dict(voice="nobody"), "voice", "unknown voice"),
    (dict(input="   "), "input", "text is empty"),
    (dict(model="gpt-9"), "model", "unknown model"),
    (dict(response_format="opus"), "response_format", "choose one of"),
    (dict(speed=1.5), "speed", "1.0 only"),
    (dict(extra_body={"language": "klingon"}), "language", "unknown language"),
    (dict(instructions="whisper"), "instructions", "takes no instruction"),
    (dict(extra_body={"ref_audio": "https://example.com/a.wav"}), "ref_audio", "fetches no URLs"),
    (dict(extra_body={"stream": "yes"}), "stream", "true or false"),
    (dict(extra_body={"max_new_tokens": -2}), "max_new_tokens", "max_frames must be at least 1"),
]


@pytest.mark.parametrize("fields, param, message", BAD_FIELDS, ids=[p for _, p, _ in BAD_FIELDS])
def test_a_bad_field_is_a_400_naming_it(client, fields, param, message):
    args = {**dict(model="tiny-tts", voice="ryan", input=TEXT, response_format="wav", extra_body={"max_new_tokens": 4}),
            **fields}
    with pytest.raises(openai.BadRequestError, match=message) as refused:
        client.audio.speech.create(**args)
    error = refused.value.body
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_without_the_key_every_v1_call_is_a_401_and_the_page_stays_open(server):
    wrong = openai.OpenAI(base_url=f"{server}v1", api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.audio.speech.create(model="tiny-tts", voice="ryan", input=TEXT)
    assert post(server, {"input": TEXT}, key=None).status_code == 401
    for path in ("v1/models", "v1/audio/voices"):
        answer = httpx.get(f"{server}{path}")
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(server).status_code == 200


def test_too_large_a_body_or_input_is_a_413(server, client):
    from app.api_request import MAX_BODY_BYTES, MAX_INPUT_CHARS

    answer = post(server, b'{"input": "' + b"a" * MAX_BODY_BYTES + b'"}')
    assert answer.status_code == 413 and "limit" in answer.json()["error"]["message"]
    with pytest.raises(openai.APIStatusError) as refused:
        client.audio.speech.create(model="tiny-tts", voice="ryan", input="a" * (MAX_INPUT_CHARS + 1))
    assert refused.value.status_code == 413 and refused.value.body["param"] == "input"
    assert post(server, b"not json").status_code == 400


def test_a_full_line_is_a_503_with_retry_after_and_then_clears(server, client):
    held = []
    try:
        for i in range(2):
            held_stream(server, f"Holding slot {i}.", held)  # the two running (max-batch 2)
        held_stream(server, "Waiting in line.", held, first_audio=False)  # the one waiting (max-waiting 1)
        answer = post(server, {"input": TEXT, "voice": "ryan"})
        assert answer.status_code == 503 and int(answer.headers["retry-after"]) >= 1
        assert "busy" in answer.json()["error"]["message"] and answer.json()["error"]["code"] == "engine_busy"
    finally:
        let_go(held)
    wait_idle(server, within_s=5)
    assert len(speak(client, "pcm")) > 0  # served again


def test_a_dropped_stream_is_cancelled_at_once_and_the_next_request_is_served(server, client, codes):
    held = []
    held_stream(server, "A stream nobody listens to.", held)
    assert active(server) == 1
    let_go(held)
    released = wait_idle(server, within_s=2)  # long before its 1000 frames (80 s of audio) are made
    assert released < 1.0
    assert np.array_equal(np.array(json.loads(speak(client, "codes"))["codes"]), codes)


def test_a_whole_request_whose_client_goes_away_is_cancelled_too(server):
    """Not streamed: the server still notices the closed connection while the take is being made."""
    http = httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=0.5)
    with pytest.raises(httpx.TimeoutException):
        http.post(f"{server}v1/audio/speech", json=dict(input="Nobody waits for this.", max_new_tokens=LONG))
    http.close()  # the timed-out client closes its connection
    assert wait_idle(server, within_s=2) < 1.0
