"""A real draft + verify + gateway stack on loopback, shared by the fault tests; each test starts
from a healthy stack (what a test killed is started again on the same port)."""

from __future__ import annotations

import httpx
import pytest
from service_support import CHAT, LONG_GREEDY, LoopbackStack, wait_until

# Verify admits 16 sessions and the gateway 16 generations: the hostile-client tests fill them with
# a few streams instead of 64 (tests/reliability/test_hostile_*.py).
MAX_SESSIONS = 16


@pytest.fixture(scope="session")
def loopback_stack(tiny_pair_paths, tmp_path_factory):
    with LoopbackStack.running(tiny_pair_paths, tmp_path_factory.mktemp("loopback-stack"), max_sessions=MAX_SESSIONS) as stack:
        yield stack


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
