"""Draft and verify services as separate processes on loopback, for the benchmark scripts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from specdec.cli.client import VerifyClient


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def spawn_service(*args: str) -> subprocess.Popen:
    """`specdec serve ARGS` on loopback with one CPU thread, output discarded.

    One thread per service: on a CPU host the processes stand in for separate devices, and idle
    OpenMP workers spinning after a pass would otherwise steal the other service's core.
    """
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "specdec.cli", "serve", *args, "--host", "127.0.0.1", "--cpu-threads", "1"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_serving(endpoint: str, process: subprocess.Popen | None = None, timeout: float = 600.0) -> None:
    """Until the verify service at `endpoint` is SERVING; exit naming it if it dies or times out."""
    deadline = time.monotonic() + timeout
    with VerifyClient(endpoint) as client:
        while not client.is_serving(timeout=1.0):
            if (process is not None and process.poll() is not None) or time.monotonic() > deadline:
                raise SystemExit(f"{endpoint} did not become SERVING")
            time.sleep(0.2)
