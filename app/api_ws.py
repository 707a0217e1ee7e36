"""WS /v1/audio/speech/stream: speech for text still being written (an LLM's reply as it comes), on the
speech API's server, engine and key (api.py). The engine reads each token once it has settled
(`Pipeline.stream_text`), so the voice starts after the first words and the audio is the whole text's.

The client sends JSON text messages:
  {"type": "start", ...}   first: the speech body's fields but stream (voice, language, instructions,
                           ref_audio, max_new_tokens, model, response_format: pcm (default) or wav,
                           input: a first piece) and "codes": true for each frame's 16 codes
  {"type": "text", "text": "..."}   a piece of the text, any number
  {"type": "end"}          the text is complete
The server sends binary messages of audio (16-bit 24 kHz mono PCM; for wav a header first, its length
unknown) and JSON text messages: {"type": "text", "text", "token_ids"} as the talker's tokens settle,
{"type": "frame", "index", "codes"} (when asked), then {"type": "done", "text", "stats"} and a normal close.
Errors are the speech API's {"type": "error", "error": {"message", "type", "param", "code"}}, then a close
(1008 for the key, 1011 for the engine, else 1003). The key: the header Authorization: Bearer <key>, or
?api_key=<key> (a browser's WebSocket sends no headers). A client that goes away cancels its request at the
engine's next step; one that never ends its text is stopped by the time budget.
"""

from __future__ import annotations

import json

import anyio
from fastapi import WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketState

from app.api_request import ApiError, authorize, hand_over, parse
from app.api_stream import Events
from app.audio_formats import STREAMED, pcm_bytes, wav_header
from omni_core import AudioChunk, Done, EngineError, Frame, RequestError, TextDelta

CLOSE_CODES = {401: 1008, 503: 1011, 500: 1011}  # an error's close code by its status; else 1003


class SpeechSocket:
    def __init__(self, pipe, info: dict, predictor: str, api_key: str | None):
        self.pipe, self.info, self.predictor, self.api_key = pipe, info, predictor, api_key

    async def __call__(self, ws: WebSocket) -> None:
        await ws.accept()
        events = None
        try:
            authorize(self.api_key, ws, query=True)
            start, events = await self.start(ws)
            async with anyio.create_task_group() as group:
                group.start_soon(self.listen, ws, events, group.cancel_scope)
                await self.speak(ws, events, start)
                group.cancel_scope.cancel()
            if ws.application_state != WebSocketState.DISCONNECTED:  # not closed by an error of the client's
                await ws.close()
        except ApiError as exc:
            await send_error(ws, exc)
        except (WebSocketDisconnect, RuntimeError, OSError):  # the client went away while we sent
            pass
        finally:
            if events is not None:
                events.close()  # the request stops at the engine's next step, however this ended

    async def start(self, ws: WebSocket) -> tuple[dict, Events]:
        """The start message → (its fields, the request's events)."""
        start = await receive(ws)
        if start.get("type") != "start":
            raise ApiError(400, 'the first message is {"type": "start", ...}: the voice and the format', param="type")
        start["response_format"] = start.get("response_format") or "pcm"
        ask = parse({**start, "input": start.get("input") or "", "stream": None}, self.info, self.predictor)
        if ask.fmt not in STREAMED:
            raise ApiError(400, f"response_format {ask.fmt!r} cannot stream: choose pcm or wav (and \"codes\": true "
                                "for the codes)", param="response_format")
        stream = await hand_over(self.pipe.stream_text, ask.request)
        return {**start, "fmt": ask.fmt}, Events(stream, (TextDelta, Frame, AudioChunk, Done))

    async def listen(self, ws: WebSocket, events: Events, scope: anyio.CancelScope) -> None:
        """The client's pieces and end, into the request; a bad message or the client gone stops it (and the
        speaking, through `scope`)."""
        try:
            while True:
                message = await receive(ws)
                kind = message.get("type")
                if kind == "text":
                    append(events.stream, message.get("text"))
                elif kind == "end":
                    events.stream.end()
                else:
                    raise ApiError(400, f'unknown message type {kind!r}: send {{"type": "text", "text": ...}} or '
                                        '{"type": "end"}', param="type")
        except ApiError as exc:
            events.close()
            await send_error(ws, exc)
        except (WebSocketDisconnect, RuntimeError):  # gone (RuntimeError: it closed while we waited)
            events.close()
        scope.cancel()

    async def speak(self, ws: WebSocket, events: Events, start: dict) -> None:
        """The request's audio, tokens and (when asked) codes, as they come; then done."""
        if start["fmt"] == "wav":
            await ws.send_bytes(wav_header(self.info["sample_rate"]))
        try:
            async for event in events:
                await send_event(ws, event, bool(start.get("codes")))
        except EngineError as exc:
            raise ApiError(503, f"the engine failed this request: {exc}", code="engine_down") from None


async def send_event(ws: WebSocket, event, codes: bool) -> None:
    if isinstance(event, AudioChunk):
        await ws.send_bytes(pcm_bytes(event.audio))
    elif isinstance(event, TextDelta):
        await ws.send_json({"type": "text", "text": event.text, "token_ids": list(event.token_ids)})
    elif isinstance(event, Frame) and codes:
        await ws.send_json({"type": "frame", "index": event.index, "codes": event.codes.astype(int).tolist()})
    elif isinstance(event, Done):
        await ws.send_json({"type": "done", "text": event.result.text, "stats": event.result.stats.to_dict()})


def append(stream, text) -> None:
    try:
        stream.append(text)
    except RequestError as exc:
        raise ApiError(400, str(exc).replace("text must", "a text message's text must"), param="text") from None


async def receive(ws: WebSocket) -> dict:
    """The client's next message, a JSON object (ApiError if not)."""
    raw = await ws.receive_text()
    try:
        message = json.loads(raw)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        raise ApiError(400, "each message is a JSON object with a type: start, text or end", param="type")
    return message


async def send_error(ws: WebSocket, exc: ApiError) -> None:
    """The speech API's error body, then the close (nothing when the client has gone already)."""
    error = dict(message=exc.message, type=exc.TYPES.get(exc.status, "server_error"), param=exc.param, code=exc.code)
    try:
        await ws.send_json({"type": "error", "error": error})
        await ws.close(code=CLOSE_CODES.get(exc.status, 1003), reason=exc.message[:120])
    except (WebSocketDisconnect, RuntimeError):
        pass
