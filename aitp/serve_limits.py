"""Bounds on what a client may make `aitp serve` hold: body size, time to send a request, parsed bodies at once.

Before these, a large body was read whole and parsed (into many times its size; a few at once were
OOM-killed: `benchmarks/results/2026-11-28-hostile-inputs.md`), a client sending a byte a second held
its connection for ever, and a body shorter than its Content-Length got no answer. uvicorn (h11) offers
no limit on any of these, so:

- `BodyLimit`, an ASGI middleware, answers 413 from the Content-Length header before reading a
  byte, or as soon as a chunked body passes the cap, and lets only a few requests be parsed and
  served at once (the model serves one at a time anyway, so queueing parsed bodies gains nothing).
- `bounded_protocol` makes uvicorn's h11 protocol give each request `timeout_s` to arrive whole,
  headers and body (a slow or idle client is answered 408, or 400 when its body stopped short of
  its Content-Length), and answer 400 when a client closes its side mid-body.

The protocol subclass leans on uvicorn's H11Protocol internals (`cycle`, `conn`, `transport`),
checked against uvicorn 0.54; tests/policies/test_serve_limits.py drives it over real sockets.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_REQUEST_TIMEOUT_S = 60.0
MAX_REQUESTS_IN_FLIGHT = 4

Scope = dict[str, Any]


def _error_body(message: str) -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    return json.dumps({"error": error}).encode()


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            return int(value)  # h11 has already refused a malformed one with 400
    return None


class BodyLimit:
    """ASGI middleware: bodies up to `max_bytes` (413 past it), at most MAX_REQUESTS_IN_FLIGHT served at once."""

    def __init__(self, app: Any, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes
        self.slots: asyncio.Semaphore | None = None  # made in the server's event loop, on first use

    async def _refuse(self, send: Any, status: int, message: str) -> None:
        body = _error_body(message)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        # no `connection: close`: h11 then reads and drops the rest of the body, so a client still
        # sending it gets this answer instead of a reset (the request deadline bounds the draining)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = (
            f"the request body is larger than this server's limit of {self.max_bytes} bytes: "
            "send less (or start `aitp serve` with a larger --max-body-bytes)"
        )
        declared = _content_length(scope["headers"])
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send, 413, too_large)  # before reading a byte of it
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left, or the protocol answered for it (too slow, cut short)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send, 413, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()  # the body was read whole: what follows is the disconnect
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        if self.slots is None:
            self.slots = asyncio.Semaphore(MAX_REQUESTS_IN_FLIGHT)
        async with self.slots:
            await self.app(scope, replay, send)


class _BoundedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request to arrive whole, and an answer to a cut-short body."""

    timeout_s = DEFAULT_REQUEST_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _settle(self) -> None:
        if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE):
            self._disarm()  # the request arrived whole: no deadline while the model works on it

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._settle()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request on this connection gets its own deadline
            self._settle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _answer_and_close(self, status: int, message: str) -> None:
        """Answer outside h11 (it cannot answer a request whose headers never ended), then close."""
        cycle = self.cycle
        if cycle is not None and self.conn.their_state is h11.SEND_BODY:
            if cycle.response_started:
                status = 0  # too late for an answer: only close
            cycle.disconnected = True  # the app's receive() now says so; its sends go nowhere
            cycle.message_event.set()
        if status:
            body = _error_body(message)
            head = (
                f"HTTP/1.1 {status} {'Request Timeout' if status == 408 else 'Bad Request'}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
            )
            self.transport.write(head.encode() + body)
        self.transport.close()

    def _too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        state, pending = self.conn.their_state, self.conn.trailing_data[0]
        if state is h11.IDLE and not pending:
            self.transport.close()  # a connection that never began a request: nothing to answer
            return
        declared = _content_length(self.headers or []) if state is h11.SEND_BODY else None
        if declared is not None:
            self._answer_and_close(
                400,
                f"the request body stopped short of its Content-Length of {declared} bytes "
                f"(or came slower than {self.timeout_s:g} s): send the whole body",
            )
        else:
            self._answer_and_close(408, f"the request did not arrive whole within {self.timeout_s:g} s: send it faster")

    def eof_received(self) -> None:
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            declared = _content_length(self.headers or [])
            expected = f"its Content-Length of {declared} bytes" if declared is not None else "its last chunk"
            self._answer_and_close(400, f"the client closed its side before the request body reached {expected}")


def bounded_protocol(timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> type[H11Protocol]:
    """uvicorn's h11 protocol class with a deadline of `timeout_s` for each request to arrive whole."""
    return type("BoundedH11", (_BoundedH11,), {"timeout_s": timeout_s})
