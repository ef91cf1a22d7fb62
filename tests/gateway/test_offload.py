"""The gateway's check workers: CPU work runs in other processes (off the event loop, and off its
GIL), errors reach the caller intact, past the workers plus the allowed backlog a request is
refused (429) instead of queueing without bound, and a worker that dies is replaced."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import time

import pytest

from gateway.errors import OpenAIError
from gateway.offload import WORKER_NICENESS, CheckWorkers
from specdec.errors import InvalidRequestError


@pytest.fixture
def workers():
    pool = CheckWorkers(workers=1, max_waiting=1)
    yield pool
    pool.close()


def test_work_runs_in_a_lower_priority_process_and_its_errors_reach_the_caller(workers):
    async def main():
        pid, niceness = await workers.run(os.getpid), await workers.run(os.nice, 0)
        with pytest.raises(ValueError, match="invalid literal"):
            await workers.run(int, "not a number")
        with pytest.raises(InvalidRequestError) as refused:  # pickled back with its field
            await workers.run(functools.partial(_raise, InvalidRequestError("tools.3.function.parameters", "is not a valid JSON schema")))
        return pid, niceness, refused.value

    pid, niceness, refused = asyncio.run(main())
    assert pid != os.getpid() and niceness >= os.nice(0) + WORKER_NICENESS and workers.pending == 0
    assert refused.field == "tools.3.function.parameters" and str(refused) == "tools.3.function.parameters: is not a valid JSON schema"


def test_past_the_workers_and_the_backlog_a_request_is_a_429_and_room_comes_back(workers):
    async def main():
        await workers.run(os.getpid)  # started
        held = [asyncio.ensure_future(workers.run(time.sleep, 1.0)) for _ in range(2)]  # one running, one waiting
        await asyncio.sleep(0.1)
        with pytest.raises(OpenAIError) as refused:
            await workers.run(os.getpid)
        assert refused.value.status == 429 and "Retry-After" in refused.value.headers
        await asyncio.gather(*held)
        return await workers.run(str, "after")

    assert asyncio.run(main()) == "after" and workers.pending == 0


def test_a_caller_that_leaves_keeps_its_job_counted_until_the_job_ends():
    pool = CheckWorkers(workers=1, max_waiting=0)

    async def main():
        await pool.run(os.getpid)
        job = asyncio.ensure_future(pool.run(time.sleep, 1.0))
        await asyncio.sleep(0.1)
        job.cancel()  # the client went away; the worker is still busy
        await asyncio.sleep(0.05)
        with pytest.raises(OpenAIError):
            await pool.run(str, "next")
        for _ in range(300):
            if pool.pending == 0:
                break
            await asyncio.sleep(0.01)
        return await pool.run(str, "next")

    try:
        assert asyncio.run(main()) == "next"
    finally:
        pool.close()


def test_a_worker_that_dies_fails_its_job_explicitly_and_the_next_job_gets_a_new_worker(workers):
    async def main():
        pid = await workers.run(os.getpid)
        with pytest.raises(OpenAIError) as failed:
            await workers.run(os.kill, pid, signal.SIGKILL)
        return pid, failed.value, await workers.run(os.getpid)

    pid, failed, new_pid = asyncio.run(main())
    assert failed.status == 500 and new_pid != pid and workers.pending == 0


def _raise(error: Exception) -> None:
    raise error


def test_workers_end_with_a_gateway_killed_with_sigkill(tmp_path):
    # A gateway restarted after kill -9 (specdec up, compose) must not leave its workers behind.
    import subprocess
    import sys

    script = (
        "import asyncio, os, time\nfrom gateway.offload import CheckWorkers\n"
        "pool = CheckWorkers(workers=1)\nprint(asyncio.run(pool.run(os.getpid)), flush=True)\ntime.sleep(60)\n"
    )
    gateway = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(gateway.stdout.readline())
        assert os.path.exists(f"/proc/{worker_pid}")
        gateway.kill()
        gateway.wait(timeout=10)
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{worker_pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{worker_pid}"), "the check worker outlived its gateway"
    finally:
        gateway.kill()
