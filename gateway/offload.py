"""CPU work of request checks (tool schemas against the meta-schema, grammar compiles) off the
event loop, in worker processes with a bounded backlog. One request's large schemas cost seconds
of CPU, much of it in pure Python (jsonschema): on the loop they would stall every other request,
/health included, and in a thread they would still take the GIL from the loop for most of that
time. Worker processes run at a lower CPU priority, so on a host with few cores serving goes first."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from gateway.errors import OpenAIError, overloaded
from specdec.serving.background import BACKGROUND_NICENESS

log = logging.getLogger(__name__)
# At most half the host's cores: what a stream of pathological schemas can take from serving.
CHECK_WORKERS = max(1, min(2, (os.cpu_count() or 2) // 2))
MAX_WAITING_CHECKS = 16
WORKER_NICENESS = BACKGROUND_NICENESS  # as the services' heavy-work threads run
_PR_SET_PDEATHSIG = 1  # linux/prctl.h

Result = TypeVar("Result")


def _worker_setup(gateway_pid: int) -> None:
    """Lower the worker's priority, and end it with the gateway: a gateway killed with SIGKILL cannot
    stop its workers itself, so on Linux the kernel is asked to (PR_SET_PDEATHSIG)."""
    os.nice(WORKER_NICENESS)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != gateway_pid:  # the gateway died before the request took effect
            os._exit(0)


class CheckWorkers:
    """`workers` processes; beyond `max_waiting` jobs queued behind them, a 429 (never an unbounded
    backlog). `function` and its arguments are pickled to the worker: module-level functions only."""

    def __init__(self, workers: int = CHECK_WORKERS, max_waiting: int = MAX_WAITING_CHECKS) -> None:
        self.workers, self.max_waiting = workers, max_waiting
        self._executor = self._new_executor()
        self._lock = threading.Lock()  # jobs end on the executor's thread
        self.pending = 0  # submitted and not finished: running or waiting

    def _new_executor(self) -> ProcessPoolExecutor:
        # NOTE: spawned, never forked: the gateway's gRPC channels and threads do not survive a fork.
        return ProcessPoolExecutor(
            self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_setup, initargs=(os.getpid(),)
        )

    async def run(self, function: Callable[..., Result], *args) -> Result:
        """`function(*args)` in a worker process; its exceptions reach the caller."""
        with self._lock:
            if self.pending >= self.workers + self.max_waiting:
                raise overloaded(f"server busy: {self.pending} requests' schemas and grammars are being checked", retry_after_s=1)
            self.pending += 1
        # NOTE: counted until the job itself ends: a client that leaves does not free a busy worker
        executor = self._executor
        try:
            job = executor.submit(function, *args)
        except BrokenProcessPool:
            job = self._replace(executor).submit(function, *args)
        job.add_done_callback(self._finished)
        try:
            return await asyncio.wrap_future(job)
        except BrokenProcessPool as error:  # a worker died (killed, out of memory): the next job gets a new pool
            self._replace(executor)
            log.error("a request check's worker process died: %s", error)
            raise OpenAIError(500, "internal error: the request's schema check did not complete", "server_error") from None

    def _replace(self, broken: ProcessPoolExecutor) -> ProcessPoolExecutor:
        with self._lock:
            if self._executor is broken:
                self._executor = self._new_executor()
                broken.shutdown(wait=False, cancel_futures=True)
            return self._executor

    def _finished(self, job: Future) -> None:
        with self._lock:
            self.pending -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
