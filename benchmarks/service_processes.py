"""Draft and verify services as separate processes on loopback, for the benchmark scripts."""

from __future__ import annotations

import os
import subprocess
from functools import partial

from specdec.cli.processes import free_port, grpc_serving, spawn, wait_for  # noqa: F401 (free_port: for the scripts)


def spawn_service(*args: str) -> subprocess.Popen:
    """`specdec serve ARGS` on loopback with one CPU thread, output discarded.

    One thread per service: on a CPU host the processes stand in for separate devices, and idle
    OpenMP workers spinning after a pass would otherwise steal the other service's core.
    """
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return spawn(
        ["serve", *args, "--host", "127.0.0.1", "--cpu-threads", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def wait_serving(endpoint: str, process: subprocess.Popen | None = None, timeout: float = 600.0) -> None:
    """Until the verify service at `endpoint` is SERVING; exit naming it if it dies or times out."""
    exited = (lambda: "it exited" if process.poll() is not None else None) if process is not None else (lambda: None)
    problem = wait_for(partial(grpc_serving, endpoint), timeout, exited)
    if problem:
        raise SystemExit(f"{endpoint} did not become SERVING: {problem}")
