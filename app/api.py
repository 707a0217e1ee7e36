"""The OpenAI-compatible speech API, served on the page's own server and engine (README: "Use it from
other tools"). Routes only, on the public omni_core API, as the page is.

POST /v1/audio/speech, a JSON body:
  input (required, at most MAX_INPUT_CHARS characters, else 413), model (optional: the loaded model's
  name or path, or an alias in MODEL_ALIASES), voice (a speaker of the model, any case; OpenAI's voice
  names map onto the speakers in OPENAI_VOICES' order, see /v1/audio/voices), response_format (wav, the
  default; pcm: raw 16-bit 24 kHz mono; flac; mp3 through ffmpeg; codes: {"codes": [T][16], "text",
  "stats"}, what no peer gives), speed (only 1.0), stream (true: wav/pcm bytes leave chunked as the
  frames are made, a streamed WAV's header saying "length unknown"; flac, mp3 and codes come whole),
  and the Qwen extensions as vLLM-Omni names them: language, instructions (VoiceDesign), ref_audio
  (a base64 clip or data: URL, never a URL to fetch), ref_text (a Base model's clone) and
  max_new_tokens (the most frames, 80 ms each; default: scaled to the input).
  The request is the page's Generate with the page's defaults, batched beside the page's requests: the
  same text and voice give the page's codes.
GET /v1/audio/voices, GET /v1/models: what to ask for. GET /health: open, never behind the key.

Errors: {"error": {"message", "type", "param", "code"}} with 400 (a bad field: the engine's
RequestError text), 401 (no or a wrong key when --api-key / OMNI_API_KEY is set), 413 (a body over
MAX_BODY_BYTES or input over MAX_INPUT_CHARS), 503 with Retry-After (the engine's waiting line is
full). A client that goes away cancels its request at the engine's next step.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hmac
import io
import json
import logging
import shutil
import threading
from dataclasses import dataclass

import anyio
import soundfile as sf
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.audio_formats import MEDIA_TYPES, STREAMED, EncodeError, encode, pcm_bytes, wav_header
from app.layout import default_predictor
from omni_core import MAX_TEXT_CHARS, AudioChunk, Done, EngineBusy, EngineError, RequestError, SpeechRequest

log = logging.getLogger(__name__)

MAX_INPUT_CHARS = MAX_TEXT_CHARS  # the engine's own limit: longer input is refused (413), never cut
MAX_BODY_BYTES = 16 * 2**20  # room for a 60 s 48 kHz stereo WAV clip as base64 ref_audio
RETRY_AFTER_S = 2
FORMATS = (*MEDIA_TYPES, "codes")
# OpenAI's voices, in its documented order; each maps onto the model's speakers in turn.
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse")
MODEL_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "omni-speech")  # all mean "the loaded model"
# The engine's field names as the API names them, for an error's `param`.
PARAMS = {"text": "input", "speaker": "voice", "language": "language", "instruct": "instructions",
          "reference_audio": "ref_audio", "reference_text": "ref_text", "max_frames": "max_new_tokens"}
QUEUE_EVENTS = 64  # chunks a slow client may leave unread here before the reader thread waits for it
POLL_S = 0.2


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


def routes(pipe, api_key: str | None = None) -> list:
    """The API's routes, for the FastAPI app Gradio serves (ui.launch_kwargs passes them as app_kwargs)."""
    api = SpeechApi(pipe, api_key)
    router = APIRouter()
    router.add_api_route("/v1/audio/speech", api.speech, methods=["POST"])
    router.add_api_route("/v1/audio/voices", api.voices, methods=["GET"])
    router.add_api_route("/v1/models", api.models, methods=["GET"])
    router.add_api_route("/health", api.health, methods=["GET"])
    return router.routes


def answers_errors(handler):
    """A route that turns ApiError into its JSON answer."""
    @functools.wraps(handler)
    async def route(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            return exc.response()
    return route


@dataclass
class Ask:
    """One parsed speech call."""
    request: SpeechRequest
    fmt: str
    stream: bool


class SpeechApi:
    def __init__(self, pipe, api_key: str | None = None):
        self.pipe, self.info = pipe, pipe.info
        self.api_key = api_key or None
        self.predictor = default_predictor(self.info)  # the page's default: the same codes as its Generate
        self.speech = answers_errors(self._speech)
        self.voices = answers_errors(self._voices)
        self.models = answers_errors(self._models)

    # --- routes ---------------------------------------------------------------------------------

    async def _speech(self, request: Request) -> Response:
        self.authorize(request)
        ask = self.parse(await read_json(request))
        events = Events(await self.submit(ask.request))
        if ask.stream and ask.fmt in STREAMED:
            return EngineStream(self.chunks(events, ask.fmt), events, media_type=MEDIA_TYPES[ask.fmt])
        try:
            result = await whole(events, request)
        except EngineError as exc:
            raise ApiError(503, f"the engine failed this request: {exc}", code="engine_down") from None
        if result is None:  # the client went away; its request is cancelled
            return Response(status_code=499)
        if ask.fmt == "codes":
            return JSONResponse({"codes": result.codes.astype(int).tolist(), "text": result.text,
                                 "stats": result.stats.to_dict()})
        try:
            audio = await anyio.to_thread.run_sync(encode, result.audio, result.sample_rate, ask.fmt)
        except EncodeError as exc:
            raise ApiError(500, str(exc), param="response_format") from None
        return Response(audio, media_type=MEDIA_TYPES[ask.fmt])

    async def _voices(self, request: Request) -> Response:
        self.authorize(request)
        info = self.info
        return JSONResponse(dict(voices=list(info["speakers"]), default=info["default_speaker"],
                                 openai_voices=self.openai_voices(), languages=list(info["languages"]),
                                 instructions=bool(info["instruct"]), clone=bool(info["clone"])))

    async def _models(self, request: Request) -> Response:
        self.authorize(request)
        names = [self.info["name"], *MODEL_ALIASES]
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "omni-speech-lab"} for name in names]})

    async def health(self) -> Response:
        return JSONResponse({"status": "ok", "model": self.info["name"], "active": self.pipe.active,
                             "max_batch": self.info["max_batch"], "max_waiting": self.info["max_waiting"]})

    # --- the call, step by step -------------------------------------------------------------------

    def authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.api_key.encode()):
            raise ApiError(401, "this server needs its API key: send the header Authorization: Bearer <key>",
                           code="invalid_api_key")

    def parse(self, body: dict) -> Ask:
        text = field(body, "input", str, "a string")
        if text is None:
            raise ApiError(400, "input is missing: the text to speak", param="input")
        if len(text) > MAX_INPUT_CHARS:
            raise ApiError(413, f"input is {len(text)} characters; the limit is {MAX_INPUT_CHARS}", param="input",
                           code="input_too_long")
        self.check_model(field(body, "model", str, "a string"))
        fmt = self.response_format(field(body, "response_format", str, "a string"))
        speed = field(body, "speed", (int, float), "a number")
        if speed is not None and speed != 1:
            raise ApiError(400, f"speed {speed} is not available: this server speaks at 1.0 only", param="speed")
        if field(body, "stream_format", str, "a string") not in (None, "audio"):
            raise ApiError(400, "stream_format 'sse' is not available: use stream=true for raw audio chunks",
                           param="stream_format")
        request = SpeechRequest(text=text, speaker=self.speaker(field(body, "voice", str, "a string")),
                                predictor=self.predictor, max_frames=field(body, "max_new_tokens", int, "a number"),
                                language=field(body, "language", str, "a string"),
                                instruct=field(body, "instructions", str, "a string"), **reference(body))
        return Ask(request, fmt, bool(field(body, "stream", bool, "true or false")))

    async def submit(self, speech: SpeechRequest):
        """Hand the request to the engine (its checks run here): the stream of its events."""
        try:
            return await anyio.to_thread.run_sync(self.pipe.stream, speech)
        except EngineBusy as exc:
            raise ApiError(503, str(exc), code="engine_busy", headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        except RequestError as exc:
            raise ApiError(400, str(exc), param=param_of(str(exc))) from None
        except EngineError as exc:
            raise ApiError(503, f"the engine is down: {exc}", code="engine_down") from None

    async def chunks(self, events: Events, fmt: str):
        """A streamed body: the WAV header first (wav), then each AudioChunk's samples as they come."""
        if fmt == "wav":
            yield wav_header(self.info["sample_rate"])
        async for event in events:
            if isinstance(event, AudioChunk):
                yield pcm_bytes(event.audio)

    # --- fields --------------------------------------------------------------------------------

    def check_model(self, model: str | None) -> None:
        names = {self.info["name"].lower(), str(self.info["source"]).lower(), *MODEL_ALIASES}
        if model is not None and model.strip().lower() not in names:
            raise ApiError(400, f"unknown model {model!r}: this server serves {self.info['name']!r} (also called "
                                f"{', '.join(MODEL_ALIASES)})", param="model", code="model_not_found")

    def response_format(self, fmt: str | None) -> str:
        fmt = (fmt or "wav").strip().lower()
        if fmt not in FORMATS:
            raise ApiError(400, f"response_format {fmt!r} is not available: choose one of {', '.join(FORMATS)}",
                           param="response_format")
        if fmt == "mp3" and shutil.which("ffmpeg") is None:
            raise ApiError(400, "mp3 needs ffmpeg, which this server does not have: ask for wav, pcm or flac",
                           param="response_format")
        return fmt

    def speaker(self, voice: str | None) -> str | None:
        """A speaker of the model (any case), or OpenAI's voice names mapped onto them; None: the default.
        A model without named speakers (a clone or a designed voice) takes OpenAI's names and ignores them."""
        name = (voice or "").strip().lower()
        speakers = list(self.info["speakers"])
        if not name or name in speakers:
            return name or None
        if name in OPENAI_VOICES:
            return self.openai_voices().get(name)
        choices = ", ".join(speakers) if speakers else "none: leave voice out"
        raise ApiError(400, f"unknown voice {voice!r}: this model's voices are {choices} (OpenAI's voice names "
                            f"map onto them: GET /v1/audio/voices)", param="voice")

    def openai_voices(self) -> dict:
        speakers = list(self.info["speakers"])
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


class Events:
    """A request's AudioChunk and Done events, handed from a reader thread to the event loop. The thread
    reads every event (Frames too); when QUEUE_EVENTS wait unread here it waits, so a client that stops
    reading pauses its request in the engine (max_unread) instead of filling memory."""

    def __init__(self, stream):
        self.stream, self.loop = stream, asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue(QUEUE_EVENTS)
        self.closed = threading.Event()
        threading.Thread(target=self._read, name="api-request", daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                if isinstance(event, (AudioChunk, Done)) and not self._put(event):
                    return
        except Exception as exc:  # EngineError: the reader on the loop raises it
            self._put(exc)

    def _put(self, item) -> bool:
        """Queue the item on the loop; False once the consumer has closed (nobody will read it)."""
        try:
            future = asyncio.run_coroutine_threadsafe(self.queue.put(item), self.loop)
        except RuntimeError:  # the loop is gone (shutdown)
            return False
        while not self.closed.is_set():
            try:
                future.result(timeout=POLL_S)
                return True
            except TimeoutError:
                continue
        future.cancel()
        return False

    async def __aiter__(self):
        while True:
            item = await self.queue.get()
            if isinstance(item, Exception):
                raise item
            yield item
            if isinstance(item, Done):
                return

    async def result(self):
        async for event in self:
            if isinstance(event, Done):
                return event.result
        raise EngineError("the stream ended without a result")

    def close(self) -> None:
        """Stop the request (the engine ends it at its next step) and let the reader thread go."""
        self.closed.set()
        self.stream.close()


class EngineStream(StreamingResponse):
    """A streamed body whose request is cancelled however the response ends: finished, failed, or the
    client gone (Starlette then cancels the body while it waits for the next chunk)."""

    def __init__(self, content, events: Events, **kwargs):
        super().__init__(content, **kwargs)
        self.events = events

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.events.close()


async def whole(events: Events, request: Request):
    """The request's Result, or None when the client goes away first (the request is then cancelled)."""
    result = None
    try:
        async with anyio.create_task_group() as group:
            async def watch() -> None:
                while (await request.receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(watch)
            result = await events.result()
            group.cancel_scope.cancel()
    finally:
        events.close()
    return result
