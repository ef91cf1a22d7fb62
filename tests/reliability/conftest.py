"""A real draft + verify + gateway stack on loopback, shared by the fault tests; each test starts
from a healthy stack (what a test killed is started again on the same port)."""

from __future__ import annotations

import httpx
import pytest
from service_support import CHAT, LONG_GREEDY, ServiceProcess, free_port, grpc_serving, http_ok, scrape, wait_until

START_TIMEOUT_S = 120  # three processes importing torch on 2 busy cores
# Verify admits 16 sessions and the gateway 16 generations: the hostile-client tests fill them with
# a few streams instead of 64 (tests/reliability/test_hostile_*.py).
MAX_SESSIONS = 16


class LoopbackStack:
    def __init__(self, pair, directory) -> None:
        self.ports = {name: free_port() for name in ("draft", "verify", "gateway", "draft_metrics", "verify_metrics")}
        ports = self.ports
        self.draft = ServiceProcess("draft", ["--draft", str(pair.draft), "--port", str(ports["draft"]),
                                              "--metrics-port", str(ports["draft_metrics"])], directory / "draft.log")
        self.verify = ServiceProcess("verify", ["--target", str(pair.target), "--port", str(ports["verify"]),
                                                "--metrics-port", str(ports["verify_metrics"]), "--draft-endpoint", f"127.0.0.1:{ports['draft']}",
                                                "--max-sessions", str(MAX_SESSIONS)],
                                     directory / "verify.log")
        # connect timeout 1 s: "verify is gone" must be a fast 503, not a 2 s wait per request
        self.gateway = ServiceProcess("gateway", ["--port", str(ports["gateway"]), "--verify-endpoint", f"127.0.0.1:{ports['verify']}"],
                                      directory / "gateway.log", env={"SPECDEC_SERVING__UPSTREAM_CONNECT_TIMEOUT_S": "1",
                                                                         "SPECDEC_SERVING__MAX_CONCURRENT_REQUESTS": str(MAX_SESSIONS)})
        self.url = f"http://127.0.0.1:{ports['gateway']}"
        self.max_sessions = MAX_SESSIONS

    @property
    def processes(self) -> dict[str, ServiceProcess]:
        return {"draft": self.draft, "verify": self.verify, "gateway": self.gateway}

    def heal(self) -> None:
        """Start whatever is not running, in start order, and wait until each serves."""
        for name, process in self.processes.items():
            if not process.alive():
                process.start()
            wait_until(lambda name=name: self.serving(name), START_TIMEOUT_S, f"{name} did not serve", interval=0.2)

    def serving(self, name: str) -> bool:
        assert self.processes[name].alive(), f"{name} exited:\n{self.processes[name].output()[-3000:]}"
        return http_ok(f"{self.url}/ready") if name == "gateway" else grpc_serving(self.ports[name])

    def sessions(self) -> dict[str, float]:
        """Live sessions per service: the `specdec_requests_running` gauge each one exports."""
        urls = {"draft": f"http://127.0.0.1:{self.ports['draft_metrics']}/metrics",
                "verify": f"http://127.0.0.1:{self.ports['verify_metrics']}/metrics", "gateway": f"{self.url}/metrics"}
        return {name: scrape(url, "specdec_requests_running") for name, url in urls.items()}

    def stop(self) -> None:
        for process in reversed(self.processes.values()):
            process.stop()


@pytest.fixture(scope="session")
def loopback_stack(tiny_pair_paths, tmp_path_factory):
    stack = LoopbackStack(tiny_pair_paths, tmp_path_factory.mktemp("loopback-stack"))
    try:
        stack.heal()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def stack(loopback_stack):
    """The shared stack, healthy and idle at the start of the test."""
    loopback_stack.heal()
    wait_until(lambda: not any(loopback_stack.sessions().values()), 10, f"sessions left over: {loopback_stack.sessions()}")
    return loopback_stack


@pytest.fixture
def http(stack):
    with httpx.Client(base_url=stack.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="session")
def target_only_text(loopback_stack) -> str:
    """LONG_GREEDY decoded by the target alone: what every fault must still produce."""
    loopback_stack.heal()
    body = {**LONG_GREEDY, "speculative": {"enabled": False}}
    reply = httpx.post(f"{loopback_stack.url}{CHAT}", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["message"]["content"]
