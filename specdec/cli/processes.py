"""Starting `specdec` processes and probing their health: one helper for `specdec up`, the
benchmark scripts and the tests that run real services."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def spawn(arguments: Sequence[str], env: Mapping[str, str] | None = None, stdout=None, stderr=None) -> subprocess.Popen:
    """`python -m specdec.cli ARGUMENTS` with this interpreter (the console script may point at another checkout)."""
    return subprocess.Popen([sys.executable, "-m", "specdec.cli", *arguments], env=None if env is None else dict(env),
                            stdout=stdout, stderr=stderr)


def grpc_serving(address: str | int, timeout: float = 1.0) -> bool:
    """Whether the gRPC service at HOST:PORT (or a loopback port) answers its health check with SERVING."""
    with grpc.insecure_channel(f"127.0.0.1:{address}" if isinstance(address, int) else address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def http_ok(url: str, timeout: float = 1.0) -> bool:
    """Whether GET `url` answers 200 (the gateway's /ready)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_for(probe: Callable[[], bool], timeout_s: float, failure: Callable[[], str | None] = lambda: None,
             interval_s: float = 0.2) -> str | None:
    """Poll `probe` until it holds: None then, else why not (`failure()`'s message, e.g. a process
    that exited, or a timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        problem = failure()
        if problem:
            return problem
        if probe():
            return None
        time.sleep(interval_s)
    return f"not ready after {timeout_s:g}s"
