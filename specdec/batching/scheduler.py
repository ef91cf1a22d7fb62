"""Gathers the rows that sessions submit from their own threads into shared forward passes.

Continuous batching: a session submits a row whenever it needs a pass (a target verification,
a draft step) and blocks until its logits are back; the scheduler thread takes what is
pending, waits briefly for the other open sessions to submit too, and runs them as one pass.
Sessions join and leave between passes.

How long to wait for stragglers: at most `max_wait_s`, and at most half the recent pass time. A
session between two passes is usually waiting for its draft (a round trip, then the draft's own
batched step), so a wait that scales with the pass lets the sessions fall into step: one pass for
all of them instead of alternating half-empty ones, while a fast device waits correspondingly less.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch

from specdec.batching.packed_forward import PackedRow
from specdec.errors import SpecdecError

RunBatch = Callable[[list[PackedRow]], list[torch.Tensor]]
_STRAGGLER_WAIT_SHARE = 0.5  # of the recent pass time
_PASS_TIME_SMOOTHING = 0.2


class _Job:
    def __init__(self, row: PackedRow) -> None:
        self.row = row
        self.done = threading.Event()
        self.logits: torch.Tensor | None = None
        self.error: BaseException | None = None

    def finish(self, logits: torch.Tensor | None = None, error: BaseException | None = None) -> None:
        self.logits, self.error = logits, error
        self.done.set()


class BatchScheduler:
    def __init__(
        self,
        run_batch: RunBatch,
        max_batch_size: int = 1,
        max_wait_s: float = 0.002,
        on_batch: Callable[[list[PackedRow]], None] | None = None,
    ) -> None:
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.on_batch = on_batch
        self.participants = 0  # open sessions that may submit: no point waiting for more
        self.pass_seconds: float | None = None  # recent pass time (moving average): bounds the wait for stragglers
        self._pending: list[_Job] = []
        self._changed = threading.Condition()
        self._serial = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def join(self) -> None:
        with self._changed:
            self.participants += 1

    def leave(self) -> None:
        with self._changed:
            self.participants -= 1
            self._changed.notify_all()  # a gatherer waiting for this session can go now

    def submit(self, row: PackedRow) -> torch.Tensor:  # [num_logits, vocab]
        """Run `row` in the next pass and return its logits (blocks the calling thread)."""
        if self.max_batch_size == 1:  # nothing to gather: run in the caller's thread, one at a time
            with self._serial:
                return self._run([row])[0]
        job = _Job(row)
        with self._changed:
            if self._closed:
                raise SpecdecError("the model is shutting down")
            self._pending.append(job)
            self._changed.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="batch-scheduler", daemon=True)
                self._thread.start()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.logits

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _run(self, rows: list[PackedRow]) -> list[torch.Tensor]:
        if self.on_batch is not None:
            self.on_batch(rows)
        return self.run_batch(rows)

    def _loop(self) -> None:
        while (batch := self._gather()) is not None:
            started = time.monotonic()
            try:
                results = self._run([job.row for job in batch])
            except BaseException as error:  # noqa: BLE001 -- every session of the pass gets the error
                for job in batch:
                    job.finish(error=error)
                continue
            self._time_pass(time.monotonic() - started)
            for job, logits in zip(batch, results):
                job.finish(logits)

    def _time_pass(self, seconds: float) -> None:
        previous = self.pass_seconds
        self.pass_seconds = seconds if previous is None else previous + _PASS_TIME_SMOOTHING * (seconds - previous)

    def _straggler_wait_s(self) -> float:
        if self.pass_seconds is None:
            return self.max_wait_s
        return min(self.max_wait_s, _STRAGGLER_WAIT_SHARE * self.pass_seconds)

    def _gather(self) -> list[_Job] | None:
        with self._changed:
            while not self._pending:
                if self._closed:
                    return None
                self._changed.wait()
            # NOTE: bounded: a session busy elsewhere costs at most max_wait_s, and half a pass.
            deadline = time.monotonic() + self._straggler_wait_s()
            while len(self._pending) < min(self.max_batch_size, self.participants):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            batch = self._pending[: self.max_batch_size]
            del self._pending[: self.max_batch_size]
            return batch
