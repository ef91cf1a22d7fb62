"""Refusals answered at a pace: a client looping requests that can only be refused (oversized
uploads, pathological schemas, grammars over the cap) waits for its answers instead of spending the
host's CPU on them, while served requests are never delayed. Torch-free: the gateway uses it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class RefusalPacer:
    """At most `per_second` refusals answered a second; the others wait their turn, up to `max_waiting`
    of them (beyond that, answered at once with the connection closed: shed).

    NOTE: after a 413 the server still receives the rest of the body, to keep the connection (a client
    reads the answer only once its upload is done, and a connection closed under an upload may lose
    the answer with it): megabytes of kernel copies and parsing per refusal, on the loop every request
    shares. A client looping oversized uploads would take that much of the host; paced, it waits with
    its upload paused (the server reads nothing meanwhile). A lone refusal is answered at once."""

    def __init__(
        self,
        per_second: float,
        max_waiting: int = 64,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
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


class KeyedRefusalPacing:
    """A RefusalPacer per key (a client, a peer): `per_second` refusals a second each; 0 turns pacing off.
    At most `max_keys` pacers are kept, idle ones dropped first."""

    def __init__(self, per_second: float, max_waiting: int = 16, max_keys: int = 4096) -> None:
        self.per_second, self.max_waiting, self.max_keys = per_second, max_waiting, max_keys
        self.pacers: dict[str, RefusalPacer] = {}

    async def pace(self, key: str) -> None:
        """Wait for this refusal's turn (at once for a lone one; past `max_waiting` waiting, at once too)."""
        if not self.per_second:
            return
        pacer = self.pacers.get(key)
        if pacer is None:
            self._forget_idle()
            pacer = self.pacers[key] = RefusalPacer(self.per_second, self.max_waiting)
        await pacer.turn()

    def _forget_idle(self) -> None:
        if len(self.pacers) < self.max_keys:
            return
        now = time.monotonic()
        for key in [key for key, pacer in self.pacers.items() if pacer.next_turn <= now and not pacer.waiting]:
            del self.pacers[key]
        while len(self.pacers) >= self.max_keys:  # all busy: the oldest goes
            del self.pacers[next(iter(self.pacers))]
