"""The errors a caller's request can meet before it runs: the message says what to change."""

from __future__ import annotations


class RequestError(ValueError):
    """A request that cannot run; the message says what to change."""


class EngineBusy(RequestError):
    """The waiting line is full (max_waiting): the request is fine, try again shortly (HTTP 503, not 400)."""
