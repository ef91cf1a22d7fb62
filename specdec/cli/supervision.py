"""The child services of `specdec up`: started in order, restarted when one exits unexpectedly (with
backoff, within a crash budget: specdec/cli/restarts.py), stopped in reverse order.

Each restart is one log line (service, exit status, restart number, delay) and reaches the new
process as $SPECDEC_RESTARTS, which it exports as its restarts gauge (`specdec_process_restarts` on
verify, `specdec_draft_process_restarts` on the draft, `specdec_gateway_process_restarts` on the gateway).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from specdec.cli.processes import Placement, spawn
from specdec.cli.restarts import CrashRecord, RestartPolicy
from specdec.errors import SpecdecError
from specdec.serving.metrics import RESTARTS_ENV


def describe_status(status: int) -> str:
    """`status 1`, or `status -9 (SIGKILL)` for a process a signal ended."""
    if status < 0:
        try:
            return f"status {status} ({signal.Signals(-status).name})"
        except ValueError:
            pass
    return f"status {status}"


@dataclass
class Service:
    """One child: how to start it, its current process, and its restarts so far."""

    name: str
    arguments: list[str]
    placement: Placement
    probe: Callable[[], bool]  # healthy now?
    crashes: CrashRecord
    process: subprocess.Popen | None = None
    restarts: int = 0
    restart_at: float | None = None  # monotonic time of a pending restart
    recovering: bool = False  # restarted, not yet healthy again

    def start(self) -> subprocess.Popen:
        environment = {**os.environ, RESTARTS_ENV: str(self.restarts)}
        self.process = spawn(self.arguments, env=environment, placement=self.placement)
        return self.process


def _log(message: str) -> None:
    print(f"specdec up: {message}", file=sys.stderr, flush=True)


class Stack:
    """The child services, in start order."""

    def __init__(self, policy: RestartPolicy | None = None) -> None:
        self.policy = policy or RestartPolicy()
        self.services: list[Service] = []

    @property
    def children(self) -> list[tuple[str, subprocess.Popen]]:
        """(name, current process) of each service started."""
        return [(service.name, service.process) for service in self.services]

    def spawn(
        self, name: str, arguments: list[str], placement: Placement = Placement(), probe: Callable[[], bool] = lambda: True
    ) -> subprocess.Popen:
        service = Service(name, arguments, placement, probe, CrashRecord(self.policy))
        self.services.append(service)
        return service.start()

    def failed_child(self) -> str | None:
        """While starting: the first child that has exited (nothing is restarted before the stack is up)."""
        return next((f"{name} exited with {describe_status(p.returncode)}" for name, p in self.children if p.poll() is not None), None)

    def supervise(self, now: float) -> None:
        """One look at every service: restart what exited once its delay is over; a SpecdecError once one
        has used up its crash budget."""
        for service in self.services:
            self._tend(service, now)

    def _tend(self, service: Service, now: float) -> None:
        if service.restart_at is not None:
            if now >= service.restart_at:
                service.restart_at, service.recovering = None, True
                service.restarts += 1
                service.start()
            return
        status = service.process.poll()
        if status is None:
            if service.recovering and service.probe():
                service.recovering = False
                _log(f"{service.name} is healthy again (restart {service.restarts})")
            return
        delay = service.crashes.record_exit(now)
        if delay is None:
            exits = f"{service.crashes.recent} times within {self.policy.crash_window_s:g}s"
            raise SpecdecError(
                f"{service.name} exited {exits} (last with {describe_status(status)}); "
                f"gave up restarting it and stopped the others (limits: --crash-limit, --crash-window)"
            )
        _log(
            f"{service.name} exited with {describe_status(status)}; restart {service.restarts + 1} in {delay:g}s "
            f"({service.crashes.recent} exits within {self.policy.crash_window_s:g}s; {self.policy.crash_limit} stop the stack)"
        )
        service.restart_at, service.recovering = now + delay, False

    def stop(self, grace_s: float = 15.0) -> None:
        for name, process in reversed(self.children):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    _log(f"{name} did not stop within {grace_s:.0f}s; killing it")
                    process.kill()
                    process.wait()
