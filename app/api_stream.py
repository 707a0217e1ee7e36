"""The speech API's response side (api.py): a request's events handed from the engine's stream to the
event loop (`Events`), a streamed body that cancels its request however it ends (`EngineStream`), and the
whole result of a request whose client may go away (`whole`)."""

from __future__ import annotations

import asyncio
import threading

import anyio
from fastapi import Request
from fastapi.responses import StreamingResponse

from omni_core import AudioChunk, Done, EngineError

QUEUE_EVENTS = 64  # chunks a slow client may leave unread here before the reader thread waits for it
POLL_S = 0.2


class Events:
    """A request's AudioChunk and Done events (or `kinds`), handed from a reader thread to the event loop. The thread
    reads every event (Frames too); when QUEUE_EVENTS wait unread here it waits, so a client that stops
    reading pauses its request in the engine (max_unread) instead of filling memory."""

    def __init__(self, stream, kinds: tuple = (AudioChunk, Done)):
        """kinds: the events handed over (the WebSocket's: TextDelta and Frame too); Done always ends them."""
        self.stream, self.kinds, self.loop = stream, kinds, asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue(QUEUE_EVENTS)
        self.closed = threading.Event()
        threading.Thread(target=self._read, name="api-request", daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                if isinstance(event, self.kinds) and not self._put(event):
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
