"""Starting `specdec` processes and probing their health: one helper for `specdec up`, the
benchmark scripts and the tests that run real services."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def service_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A service's environment (`base`, else this process's): OpenMP threads that sleep, not spin, while they wait for work.

    NOTE: on one host the draft's llama.cpp thread, the target's torch threads and the other services
    share the cores; spinning OpenMP workers then hold a core another process needs, and a parallel
    region waits for a worker the kernel has descheduled. Measured on the 2-core machine (SmolLM2-135M,
    packed pass, 2 torch threads, loaded): 834 / 3480 ms for 1 / 4 tokens spinning, 143 / 338 ms passive
    (docs/benchmarks.md). An explicit OMP_WAIT_POLICY is kept.
    """
    environment = dict(os.environ if base is None else base)
    environment.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return environment


@dataclass(frozen=True)
class Placement:
    """Where a child runs on the host's CPUs: `niceness` added to its priority, pinned to `cpus` (None: any)."""

    niceness: int = 0
    cpus: frozenset[int] | None = None

    def apply(self) -> None:
        """In the child, before it runs anything."""
        if self.niceness:
            os.nice(self.niceness)
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)


def spawn(
    arguments: Sequence[str], env: Mapping[str, str] | None = None, stdout=None, stderr=None, placement: Placement = Placement()
) -> subprocess.Popen:
    """`python -m specdec.cli ARGUMENTS` with this interpreter (the console script may point at another checkout),
    placed on the host's CPUs as `placement` says."""
    return subprocess.Popen(
        [sys.executable, "-m", "specdec.cli", *arguments],
        env=service_environment(env),
        stdout=stdout,
        stderr=stderr,
        # NOTE: preexec_fn is unsafe where the child would take a lock another thread held at fork; apply() only
        # makes two system calls (nice, sched_setaffinity) and takes none.
        preexec_fn=placement.apply if placement != Placement() else None,  # noqa: PLW1509
    )


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


def wait_for(
    probe: Callable[[], bool], timeout_s: float, failure: Callable[[], str | None] = lambda: None, interval_s: float = 0.2
) -> str | None:
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
