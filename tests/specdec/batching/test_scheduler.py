"""The scheduler gathers rows submitted from many threads into shared passes."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from specdec.batching.scheduler import BatchScheduler


class _Row:
    def __init__(self, value: int) -> None:
        self.value = value


def _echo(rows):
    return [torch.tensor([row.value]) for row in rows]


def _submit_from_threads(scheduler, values):
    results = {}

    def run(value):
        results[value] = int(scheduler.submit(_Row(value))[0])

    threads = [threading.Thread(target=run, args=(value,)) for value in values]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return results


def test_sessions_that_submit_together_share_one_pass_and_get_their_own_results():
    passes = []
    scheduler = BatchScheduler(_echo, max_batch_size=8, max_wait_s=1.0, on_batch=lambda rows: passes.append(len(rows)))
    for _ in range(6):
        scheduler.join()
    results = _submit_from_threads(scheduler, range(6))
    assert results == {value: value for value in range(6)}
    assert passes == [6]  # all six participants in one pass, without waiting out max_wait_s


def test_passes_hold_at_most_max_batch_size_rows():
    passes = []
    scheduler = BatchScheduler(_echo, max_batch_size=3, max_wait_s=0.05, on_batch=lambda rows: passes.append(len(rows)))
    for _ in range(7):
        scheduler.join()
    results = _submit_from_threads(scheduler, range(7))
    assert len(results) == 7 and sum(passes) == 7 and max(passes) <= 3


def test_a_session_that_does_not_submit_delays_the_pass_by_at_most_the_wait_bound():
    scheduler = BatchScheduler(_echo, max_batch_size=8, max_wait_s=0.1)
    scheduler.join()
    scheduler.join()  # this one is busy elsewhere and never submits
    started = time.monotonic()
    assert int(scheduler.submit(_Row(4))[0]) == 4
    assert time.monotonic() - started < 2


def test_the_wait_for_stragglers_scales_with_the_pass_time():
    scheduler = BatchScheduler(lambda rows: time.sleep(0.02) or _echo(rows), max_batch_size=8, max_wait_s=30)
    scheduler.join()
    scheduler.submit(_Row(1))  # everyone open submitted: no wait; this pass is timed
    scheduler.join()  # a second session that never submits
    started = time.monotonic()
    scheduler.submit(_Row(2))
    assert time.monotonic() - started < 3  # half a 20 ms pass, not the 30 s bound
    assert 0.01 < scheduler.pass_seconds < 1


def test_a_failed_pass_raises_in_every_session_of_it_and_the_next_pass_runs():
    calls = []

    def flaky(rows):
        calls.append(len(rows))
        if len(calls) == 1:
            raise RuntimeError("device error")
        return _echo(rows)

    scheduler = BatchScheduler(flaky, max_batch_size=4, max_wait_s=0.01)
    scheduler.join()
    with pytest.raises(RuntimeError, match="device error"):
        scheduler.submit(_Row(1))
    assert int(scheduler.submit(_Row(2))[0]) == 2


def test_batch_size_one_runs_in_the_callers_thread():
    seen = []
    scheduler = BatchScheduler(lambda rows: seen.append(threading.current_thread()) or _echo(rows), max_batch_size=1)
    scheduler.submit(_Row(3))
    assert seen == [threading.current_thread()]
