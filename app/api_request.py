"""The speech API's request side (api.py): the body read and checked field by field into the engine's
SpeechRequest, and the errors answered in OpenAI's JSON shape (`ApiError`). Limits and names: api.py's
docstring."""

from __future__ import annotations

import base64
import binascii
import hmac
import io
import json
import shutil
from dataclasses import dataclass

import anyio
import soundfile as sf
from fastapi import Request
from starlette.requests import HTTPConnection
from fastapi.responses import JSONResponse

from app.audio_formats import MEDIA_TYPES
from omni_core import MAX_TEXT_CHARS, EngineBusy, EngineError, RequestError, SpeechRequest

MAX_INPUT_CHARS = MAX_TEXT_CHARS  # the engine's own limit: longer input is refused (413), never cut
MAX_BODY_BYTES = 16 * 2**20  # room for a 60 s 48 kHz stereo WAV clip as base64 ref_audio
FORMATS = (*MEDIA_TYPES, "codes")
# OpenAI's voices, in its documented order; each maps onto the model's speakers in turn.
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse")
MODEL_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "omni-speech")  # all mean "the loaded model"
# The engine's field names as the API names them, for an error's `param`.
PARAMS = {"text": "input", "speaker": "voice", "language": "language", "instruct": "instructions",
          "reference_audio": "ref_audio", "reference_text": "ref_text", "max_frames": "max_new_tokens"}


class ApiError(Exception):
    """An error answered in OpenAI's JSON shape."""

    TYPES = {400: "invalid_request_error", 401: "authentication_error", 413: "invalid_request_error",
             503: "server_busy"}

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers

    def response(self) -> JSONResponse:
        error = dict(message=self.message, type=self.TYPES.get(self.status, "server_error"), param=self.param,
                     code=self.code)
        return JSONResponse({"error": error}, status_code=self.status, headers=self.headers)


@dataclass
class Ask:
    """One parsed speech call."""
    request: SpeechRequest
    fmt: str
    stream: bool


def parse(body: dict, info: dict, predictor: str) -> Ask:
    """A speech call's body → the engine's SpeechRequest, the format and whether to stream (`info`: the
    pipeline's; `predictor`: the page's default); ApiError for a field refused before the engine sees it."""
    text = field(body, "input", str, "a string")
    if text is None:
        raise ApiError(400, "input is missing: the text to speak", param="input")
    if len(text) > MAX_INPUT_CHARS:
        raise ApiError(413, f"input is {len(text)} characters; the limit is {MAX_INPUT_CHARS}", param="input",
                       code="input_too_long")
    check_model(info, field(body, "model", str, "a string"))
    fmt = response_format(field(body, "response_format", str, "a string"))
    speed = field(body, "speed", (int, float), "a number")
    if speed is not None and speed != 1:
        raise ApiError(400, f"speed {speed} is not available: this server speaks at 1.0 only", param="speed")
    if field(body, "stream_format", str, "a string") not in (None, "audio"):
        raise ApiError(400, "stream_format 'sse' is not available: use stream=true for raw audio chunks",
                       param="stream_format")
    request = SpeechRequest(text=text, speaker=speaker(info, field(body, "voice", str, "a string")),
                            predictor=predictor, max_frames=field(body, "max_new_tokens", int, "a number"),
                            language=field(body, "language", str, "a string"),
                            instruct=field(body, "instructions", str, "a string"), **reference(body))
    return Ask(request, fmt, bool(field(body, "stream", bool, "true or false")))


def check_model(info: dict, model: str | None) -> None:
    names = {info["name"].lower(), str(info["source"]).lower(), *MODEL_ALIASES}
    if model is not None and model.strip().lower() not in names:
        raise ApiError(400, f"unknown model {model!r}: this server serves {info['name']!r} (also called "
                            f"{', '.join(MODEL_ALIASES)})", param="model", code="model_not_found")


def response_format(fmt: str | None) -> str:
    fmt = (fmt or "wav").strip().lower()
    if fmt not in FORMATS:
        raise ApiError(400, f"response_format {fmt!r} is not available: choose one of {', '.join(FORMATS)}",
                       param="response_format")
    if fmt == "mp3" and shutil.which("ffmpeg") is None:
        raise ApiError(400, "mp3 needs ffmpeg, which this server does not have: ask for wav, pcm or flac",
                       param="response_format")
    return fmt


def speaker(info: dict, voice: str | None) -> str | None:
    """A speaker of the model (any case), or OpenAI's voice names mapped onto them; None: the default.
    A model without named speakers (a clone or a designed voice) takes OpenAI's names and ignores them."""
    name = (voice or "").strip().lower()
    speakers = list(info["speakers"])
    if not name or name in speakers:
        return name or None
    if name in OPENAI_VOICES:
        return openai_voices(info).get(name)
    choices = ", ".join(speakers) if speakers else "none: leave voice out"
    raise ApiError(400, f"unknown voice {voice!r}: this model's voices are {choices} (OpenAI's voice names "
                        f"map onto them: GET /v1/audio/voices)", param="voice")


def openai_voices(info: dict) -> dict:
    speakers = list(info["speakers"])
    return {name: speakers[i % len(speakers)] if speakers else None for i, name in enumerate(OPENAI_VOICES)}


def field(body: dict, name: str, kind, what: str):
    """body[name] when given (None when not), checked to be of `kind`."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ApiError(400, f"{name} must be {what}, not {type(value).__name__}", param=name)
    return value


def reference(body: dict) -> dict:
    """ref_audio (base64, or a data: URL) and ref_text → the request's reference_audio and reference_text."""
    clip = field(body, "ref_audio", str, "a base64-encoded audio file")
    text = field(body, "ref_text", str, "a string")
    fields = {} if text is None else {"reference_text": text}
    if clip is None:
        return fields
    if clip.startswith("data:"):
        clip = clip.partition(",")[2]
    elif "://" in clip[:16]:
        raise ApiError(400, "ref_audio must be the clip itself, base64-encoded: this server fetches no URLs",
                       param="ref_audio")
    try:
        samples, rate = sf.read(io.BytesIO(base64.b64decode(clip, validate=True)), dtype="float32")
    except (binascii.Error, ValueError, RuntimeError, sf.LibsndfileError):
        raise ApiError(400, "ref_audio is not a base64-encoded audio file this server reads (wav, flac, ogg)",
                       param="ref_audio") from None
    return {**fields, "reference_audio": (rate, samples)}


def param_of(message: str) -> str | None:
    """The API field an engine message is about: the first engine field name it mentions."""
    places = {PARAMS[name]: message.find(name) for name in PARAMS if name in message}
    return min(places, key=places.get) if places else None


async def read_json(request: Request) -> dict:
    """The body as a JSON object; 413 past MAX_BODY_BYTES (read no further than that)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"the body is {int(declared)} bytes; the limit is {MAX_BODY_BYTES}",
                       code="body_too_large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise ApiError(413, f"the body is over the limit of {MAX_BODY_BYTES} bytes", code="body_too_large")
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not JSON: send a JSON object such as {\"input\": \"Hello\"}") from None
    if not isinstance(value, dict):
        raise ApiError(400, "the body must be a JSON object such as {\"input\": \"Hello\"}")
    return value


def authorize(api_key: str | None, connection: HTTPConnection, query: bool = False) -> None:
    """ApiError 401 unless the call carries the key (none set: every call does): the header Authorization: Bearer,
    or with `query` (a browser's WebSocket, which can send no header) ?api_key=."""
    if api_key is None:
        return
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else connection.query_params.get("api_key", "") if query else ""
    if not hmac.compare_digest(token.encode(), api_key.encode()):
        raise ApiError(401, "this server needs its API key: send the header Authorization: Bearer <key>"
                       + (", or ?api_key=<key>" if query else ""), code="invalid_api_key")


async def hand_over(submit, speech: SpeechRequest, retry_after_s: int = 2):
    """submit(speech) (the pipeline's stream or stream_text; its checks run there) in a worker thread → its stream;
    the engine's refusals as ApiError: 400 a bad field, 503 a full line (with Retry-After) or an engine down."""
    try:
        return await anyio.to_thread.run_sync(submit, speech)
    except EngineBusy as exc:
        raise ApiError(503, str(exc), code="engine_busy", headers={"Retry-After": str(retry_after_s)}) from None
    except RequestError as exc:
        raise ApiError(400, str(exc), param=param_of(str(exc))) from None
    except EngineError as exc:
        raise ApiError(503, f"the engine is down: {exc}", code="engine_down") from None
