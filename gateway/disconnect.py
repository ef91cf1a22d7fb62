"""A request's work, cancelled when its HTTP client leaves first.

uvicorn does not cancel a handler whose client disconnects; Starlette's StreamingResponse notices only
once it streams. Without this, a request queued for a slot, or a non-streamed generation, would run
for nobody: a load tool that cancels 512 queued requests at the end of a step left the next step
waiting behind them (each admitted, then generated, then thrown away)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request

from gateway.errors import client_gone

T = TypeVar("T")
log = logging.getLogger(__name__)


async def unless_client_leaves(http: Request, work: Awaitable[T]) -> T:
    """`work`'s result, or a 499 once the client has disconnected: `work` is cancelled then, so a queued
    request leaves the queue and a generation's gRPC calls end (verify and the draft free its sessions)."""
    job = asyncio.ensure_future(work)
    left = asyncio.ensure_future(_client_left(http))
    try:
        done, _ = await asyncio.wait({job, left}, return_when=asyncio.FIRST_COMPLETED)
        if job not in done and left.exception() is not None:
            # NOTE: a watcher that fails is not a disconnect: the request is served (its timeouts still bound it).
            log.warning("cannot watch for the client's disconnect: %r", left.exception())
            done, _ = await asyncio.wait({job})
    finally:
        left.cancel()
        if not job.done():  # the client left, or this handler itself is cancelled (shutdown)
            job.cancel()
    if job in done:
        return job.result()
    with contextlib.suppress(asyncio.CancelledError):
        await job  # its cleanup (leaving the queue, closing gRPC calls) runs before the 499 is logged
    raise client_gone()


async def _client_left(http: Request) -> None:
    # NOTE: the body is read before the handler runs, so the next ASGI message can only be the disconnect.
    while (await http.receive())["type"] != "http.disconnect":
        pass
