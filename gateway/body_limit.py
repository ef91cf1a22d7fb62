"""Refuse request bodies over the limit with 413, counting bytes as they arrive (chunked too), and
bodies whose Content-Length no request that fits the model could need, before reading them. The
413s are paced (RefusalPacer): clients that loop oversized uploads wait instead of spending the host's CPU."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import OpenAIError


class _TooLarge(HTTPException):
    """An HTTPException, because FastAPI turns any other error raised while reading a body into 400."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"the request body is larger than {max_bytes} bytes")


# JSON writes one character in at most 12 bytes (an escaped surrogate pair, "\\ud83d\\ude00").
ESCAPED_BYTES_PER_CHAR = 12
# Everything but the prompt and the prediction: sampling fields, stop strings, a logit_bias over the whole vocabulary.
OTHER_FIELDS_BYTES = 1 << 20


def largest_useful_body(max_prompt_chars: int) -> int:
    """The largest body a request whose prompt can fit may have: a prompt and a prediction of
    `max_prompt_chars` characters each, every character escaped, and the other fields."""
    return 2 * ESCAPED_BYTES_PER_CHAR * max_prompt_chars + OTHER_FIELDS_BYTES


class RefusalPacer:
    """At most `per_second` refusals answered a second; the others wait their turn, up to `max_waiting`
    of them (beyond that, answered at once with the connection closed: shed).

    NOTE: after a 413 the server still receives the rest of the body, to keep the connection (a client
    reads the answer only once its upload is done, and a connection closed under an upload may lose
    the answer with it): megabytes of kernel copies and parsing per refusal, on the loop every request
    shares. A client looping oversized uploads would take that much of the host; paced, it waits with
    its upload paused (the server reads nothing meanwhile). A lone refusal is answered at once."""

    def __init__(self, per_second: float, max_waiting: int = 64, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.interval_s = 1.0 / per_second
        self.max_waiting = max_waiting
        self.clock, self.sleep = clock, sleep
        self.next_turn = 0.0
        self.waiting = 0

    async def turn(self) -> bool:
        """Wait for this refusal's turn; False (at once) when too many wait already."""
        if self.waiting >= self.max_waiting:
            return False
        now = self.clock()
        turn = max(now, self.next_turn)
        self.next_turn = turn + self.interval_s
        self.waiting += 1
        try:
            await self.sleep(turn - now)
        finally:
            self.waiting -= 1
        return True


class BodySizeLimit:
    """`useful_bytes()`: largest_useful_body for the served model, None until it is known. A body
    declared larger is refused from its headers: reading and parsing megabytes of JSON that can only
    be refused would cost the event loop that serves every other request."""

    def __init__(self, app: ASGIApp, max_bytes: int, useful_bytes: Callable[[], int | None] = lambda: None,
                 refusals_per_second: float = 4.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.useful_bytes = useful_bytes
        self.pacer = RefusalPacer(refusals_per_second)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            useful = self.useful_bytes()
            if useful is not None and int(declared) > useful:
                message = (f"the request body ({int(declared)} bytes) is larger than any request whose prompt fits the model's "
                           f"context can be ({useful} bytes); shorten the prompt")
                await self._refuse(scope, receive, send, message)
                return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise _TooLarge(self.max_bytes)
            return message

        try:
            await self.app(scope, counting_receive, send)
        except _TooLarge:
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, message: str | None = None) -> None:
        in_turn = await self.pacer.turn()
        error = OpenAIError(413, message or f"the request body is larger than {self.max_bytes} bytes", code="request_too_large",
                            headers={} if in_turn else {"Connection": "close"})
        await error.response()(scope, receive, send)
