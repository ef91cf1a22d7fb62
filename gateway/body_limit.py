"""Refuse request bodies over the limit with 413, counting bytes as they arrive (chunked too), and
bodies whose Content-Length no request that fits the model could need, before reading them. The
413s are paced (RefusalPacer): clients that loop oversized uploads wait instead of spending the host's CPU."""

from __future__ import annotations

from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import OpenAIError
from specdec.serving.pacing import RefusalPacer


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


class BodySizeLimit:
    """`useful_bytes()`: largest_useful_body for the served model, None until it is known. A body
    declared larger is refused from its headers: reading and parsing megabytes of JSON that can only
    be refused would cost the event loop that serves every other request."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, useful_bytes: Callable[[], int | None] = lambda: None, refusals_per_second: float = 4.0
    ) -> None:
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
                message = (
                    f"the request body ({int(declared)} bytes) is larger than any request whose prompt fits the model's "
                    f"context can be ({useful} bytes); shorten the prompt"
                )
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
        error = OpenAIError(
            413,
            message or f"the request body is larger than {self.max_bytes} bytes",
            code="request_too_large",
            headers={} if in_turn else {"Connection": "close"},
        )
        await error.response()(scope, receive, send)
