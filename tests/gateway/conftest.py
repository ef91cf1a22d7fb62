"""A real draft + verify + gateway process stack for the provenance and playground tests: the draft
service as `specdec serve draft` runs it by default (prompt lookup in front of the model, overlap)."""

from __future__ import annotations

import pytest
from service_support import START_TIMEOUT_S, LoopbackStack, ServiceProcess, free_port, http_ok, wait_until


@pytest.fixture(scope="package")
def process_stack(tiny_pair_paths, tmp_path_factory):
    stack = LoopbackStack(tiny_pair_paths, tmp_path_factory.mktemp("gateway-stack"))
    try:
        stack.heal()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def extra_gateway(process_stack, tmp_path):
    """start(env) -> the URL of one more gateway process in front of the stack's verify service."""
    started = []

    def start(env: dict[str, str]) -> tuple[str, ServiceProcess]:
        port = free_port()
        process = ServiceProcess("gateway", ["--port", str(port), "--verify-endpoint", f"127.0.0.1:{process_stack.ports['verify']}"],
                                 tmp_path / f"gateway-{port}.log", env=env).start()
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: process.alive() and http_ok(f"{url}/ready"), START_TIMEOUT_S, f"the gateway did not serve:\n{process.output()[-2000:]}")
        return url, process

    yield start
    for process in started:
        process.stop()
