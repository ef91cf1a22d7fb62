"""CPU work of request checks (tool schemas against the meta-schema, grammar compiles) off the
event loop, on a few threads with a bounded backlog: one request's large schemas cost seconds, and
on the loop they would stall every other request, /health included."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from gateway.errors import overloaded

CHECK_WORKERS = 2
MAX_WAITING_CHECKS = 16

Result = TypeVar("Result")


class CheckWorkers:
    """`workers` threads; beyond `max_waiting` jobs queued behind them, a 429 (never an unbounded backlog)."""

    def __init__(self, workers: int = CHECK_WORKERS, max_waiting: int = MAX_WAITING_CHECKS) -> None:
        self.workers, self.max_waiting = workers, max_waiting
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gateway-checks")
        self._lock = threading.Lock()  # jobs end on worker threads
        self.pending = 0  # submitted and not finished: running or waiting

    async def run(self, function: Callable[..., Result], *args) -> Result:
        """`function(*args)` on a worker, with the caller's context (trace context included)."""
        with self._lock:
            if self.pending >= self.workers + self.max_waiting:
                raise overloaded(f"server busy: {self.pending} requests' schemas and grammars are being checked", retry_after_s=1)
            self.pending += 1
        # NOTE: counted until the job itself ends: a client that leaves does not free a busy worker
        job = self._executor.submit(contextvars.copy_context().run, function, *args)
        job.add_done_callback(self._finished)
        return await asyncio.wrap_future(job)

    def _finished(self, job: Future) -> None:
        with self._lock:
            self.pending -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
