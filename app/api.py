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
WS /v1/audio/speech/stream: text still being written in, audio (and codes) out as it is spoken (api_ws.py).

Errors: {"error": {"message", "type", "param", "code"}} with 400 (a bad field: the engine's
RequestError text), 401 (no or a wrong key when --api-key / OMNI_API_KEY is set), 413 (a body over
MAX_BODY_BYTES or input over MAX_INPUT_CHARS), 503 with Retry-After (the engine's waiting line is
full). A client that goes away cancels its request at the engine's next step.

Here: the routes and the call, step by step (authorize, parse, submit, answer). The body's fields are
read and checked in api_request.py; the engine's events reach the client through api_stream.py.
"""

from __future__ import annotations

import functools

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.api_request import MODEL_ALIASES, ApiError, authorize, hand_over, openai_voices, parse, read_json
from app.api_stream import EngineStream, Events, whole
from app.api_ws import SpeechSocket
from app.audio_formats import MEDIA_TYPES, STREAMED, EncodeError, encode, pcm_bytes, wav_header
from app.layout import default_predictor
from omni_core import AudioChunk, EngineError, SpeechRequest


RETRY_AFTER_S = 2


def routes(pipe, api_key: str | None = None) -> list:
    """The API's routes, for the FastAPI app Gradio serves (ui.launch_kwargs passes them as app_kwargs)."""
    api = SpeechApi(pipe, api_key)
    router = APIRouter()
    router.add_api_route("/v1/audio/speech", api.speech, methods=["POST"])
    router.add_api_route("/v1/audio/voices", api.voices, methods=["GET"])
    router.add_api_route("/v1/models", api.models, methods=["GET"])
    router.add_api_route("/health", api.health, methods=["GET"])
    router.add_api_websocket_route("/v1/audio/speech/stream", SpeechSocket(pipe, api.info, api.predictor, api.api_key))
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
        ask = parse(await read_json(request), self.info, self.predictor)
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
                                 openai_voices=openai_voices(info), languages=list(info["languages"]),
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
        authorize(self.api_key, request)

    async def submit(self, speech: SpeechRequest):
        """Hand the request to the engine (its checks run here): the stream of its events."""
        return await hand_over(self.pipe.stream, speech, RETRY_AFTER_S)

    async def chunks(self, events: Events, fmt: str):
        """A streamed body: the WAV header first (wav), then each AudioChunk's samples as they come."""
        if fmt == "wav":
            yield wav_header(self.info["sample_rate"])
        async for event in events:
            if isinstance(event, AudioChunk):
                yield pcm_bytes(event.audio)
