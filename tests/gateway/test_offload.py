"""The gateway's check workers: CPU work runs off the event loop, and past the workers plus the
allowed backlog a request is refused (429) instead of queueing without bound."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gateway.errors import OpenAIError
from gateway.offload import CheckWorkers


def refuse() -> None:
    raise ValueError("bad schema")


def test_work_runs_on_a_worker_thread_and_its_errors_reach_the_caller():
    workers = CheckWorkers(workers=1, max_waiting=0)

    async def main():
        thread = await workers.run(lambda: threading.current_thread().name)
        with pytest.raises(ValueError, match="bad schema"):
            await workers.run(refuse)
        return thread

    try:
        assert asyncio.run(main()).startswith("gateway-checks") and workers.pending == 0
    finally:
        workers.close()


def test_past_the_workers_and_the_backlog_a_request_is_a_429_and_room_comes_back():
    workers, release = CheckWorkers(workers=1, max_waiting=1), threading.Event()

    async def main():
        held = [asyncio.ensure_future(workers.run(release.wait)) for _ in range(2)]  # one running, one waiting
        await asyncio.sleep(0.05)
        with pytest.raises(OpenAIError) as refused:
            await workers.run(lambda: "third")
        assert refused.value.status == 429 and "Retry-After" in refused.value.headers
        release.set()
        await asyncio.gather(*held)
        return await workers.run(lambda: "after")

    try:
        assert asyncio.run(main()) == "after" and workers.pending == 0
    finally:
        release.set()
        workers.close()


def test_a_caller_that_leaves_keeps_its_job_counted_until_the_job_ends():
    workers, release = CheckWorkers(workers=1, max_waiting=0), threading.Event()

    async def main():
        job = asyncio.ensure_future(workers.run(release.wait))
        await asyncio.sleep(0.05)
        job.cancel()  # the client went away; the worker is still busy
        await asyncio.sleep(0.05)
        with pytest.raises(OpenAIError):
            await workers.run(lambda: "next")
        release.set()
        for _ in range(100):
            if workers.pending == 0:
                break
            await asyncio.sleep(0.01)
        return await workers.run(lambda: "next")

    try:
        assert asyncio.run(main()) == "next"
    finally:
        release.set()
        workers.close()
