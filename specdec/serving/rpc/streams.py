"""Client streams (Verify, Propose) that a client could hold without using: a per-peer bound on
streams that have not sent their first message, and a timeout on waiting for a message."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator

import grpc


def peer_host(peer: str) -> str:
    """'ipv4:10.0.0.7:51234' -> 'ipv4:10.0.0.7': a client's connections all count as that client."""
    return peer.rsplit(":", 1)[0] if peer.startswith(("ipv4:", "ipv6:")) else peer


class StreamGate:
    """A stream counts as a session only once its first message (`open`) has arrived: until then it
    is "unopened", and each peer may hold at most `max_unopened_per_peer` of those. Every wait for a
    message gives up after `idle_timeout_s` (DEADLINE_EXCEEDED), so an idle stream ends by itself.
    `section` names the config section in the messages ("verify_service")."""

    def __init__(self, idle_timeout_s: float, max_unopened_per_peer: int, section: str) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.max_unopened_per_peer = max_unopened_per_peer
        self.section = section
        self.unopened: collections.Counter[str] = collections.Counter()

    async def first_message(self, requests: AsyncIterator, context: grpc.aio.ServicerContext):
        """The stream's first message, or None when the client closed the stream without one."""
        peer = peer_host(context.peer())
        if self.unopened[peer] >= self.max_unopened_per_peer:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.unopened[peer]} streams from {peer} have sent no first message yet "
                f"({self.section}.max_unopened_streams_per_peer={self.max_unopened_per_peer}); retry later",
            )
        self.unopened[peer] += 1
        try:
            return await self.next_message(requests, context)
        finally:
            self.unopened[peer] -= 1
            if not self.unopened[peer]:
                del self.unopened[peer]

    async def next_message(self, requests: AsyncIterator, context: grpc.aio.ServicerContext):
        """The next message, or None when the client has closed its side."""
        try:
            async with asyncio.timeout(self.idle_timeout_s):
                return await anext(requests, None)
        except TimeoutError:
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no message for {self.idle_timeout_s:g}s ({self.section}.stream_idle_timeout_s): the idle stream is closed",
            )
