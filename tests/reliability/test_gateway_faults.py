"""The gateway drains on SIGTERM, and a client that goes away (mid-stream, mid-generation, or while queued for a
slot) leaves nothing behind."""

from __future__ import annotations

import concurrent.futures
import contextlib
import signal
import time

import httpx
import pytest
from service_support import CHAT, LONG_GREEDY, scrape, sse_events, streamed_speculative, streamed_text, wait_until


def test_sigterm_of_the_gateway_finishes_the_in_flight_stream_and_refuses_new_connections(stack, http, target_only_text):
    with http.stream("POST", CHAT, json={**LONG_GREEDY, "stream": True}) as response:
        events = sse_events(response.iter_lines())
        payloads = [next(events)]
        stack.gateway.signal(signal.SIGTERM)
        # uvicorn closes its listening socket at once; the open response keeps going
        wait_until(lambda: _refused(stack.url), 3, "the draining gateway still accepted connections")
        payloads.extend(events)
    assert streamed_text(payloads) == target_only_text
    stats = streamed_speculative(payloads)
    assert stats["draft_tokens"] > 0 and not stats["fallback"], stats
    assert stack.gateway.wait(timeout=15) == 0


def _refused(url: str) -> bool:
    # NOTE: a connect that raced the listener's close sits in the kernel's backlog and is then closed unanswered
    # (RemoteProtocolError); like a refused connect, the draining gateway served it nothing.
    try:
        httpx.get(f"{url}/health", timeout=1)
    except (httpx.ConnectError, httpx.RemoteProtocolError):
        return True
    return False


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_client_disconnect_mid_stream_frees_sessions_on_all_services_within_a_second(stack, http, route):
    body = (
        dict(LONG_GREEDY, stream=True)
        if route == "chat"
        else {"model": "target", "prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "stream": True}
    )
    with http.stream("POST", CHAT if route == "chat" else "/v1/completions", json=body) as response:
        events = sse_events(response.iter_lines())
        next(events), next(events)
        busy = stack.sessions()
        disconnected = time.monotonic()
    assert busy == {"draft": 1, "verify": 1, "gateway": 1}, busy
    wait_until(lambda: not any(stack.sessions().values()), 1.0, f"sessions still held after the client left: {stack.sessions()}")
    print(f"{route}: sessions freed {time.monotonic() - disconnected:.3f}s after the disconnect")


# Target-only decoding, one token per round, n = 8: long enough to hold its slots for seconds on the tiny pair.
SLOW = {**LONG_GREEDY, "max_tokens": 460, "n": 8, "speculative": {"enabled": False}}


def test_a_client_that_leaves_a_non_streamed_generation_frees_its_sessions_within_a_second(stack):
    with pytest.raises(httpx.ReadTimeout), httpx.Client(base_url=stack.url, timeout=0.5) as client:
        client.post(CHAT, json=SLOW)
    left = time.monotonic()
    wait_until(lambda: not any(stack.sessions().values()), 1.0, f"a generation ran on for nobody: {stack.sessions()}")
    print(f"sessions freed {time.monotonic() - left:.3f}s after the client left")
    assert scrape(f"{stack.url}/metrics", "specdec_gateway_requests_total", 'code="499"') >= 1


@pytest.mark.parametrize("stream", [False, True])
def test_clients_that_leave_while_queued_leave_the_queue_at_once(stack, http, stream):
    """Every slot taken by two streams; queued clients that give up are out of the queue within a second,
    not admitted and generated for nobody once a slot frees (a load tool cancelling its queued requests
    at the end of a step otherwise leaves the next step behind them)."""
    waiting = lambda: scrape(f"{stack.url}/metrics", "specdec_requests_waiting")
    with contextlib.ExitStack() as holders:
        for _ in range(stack.max_sessions // SLOW["n"]):
            response = holders.enter_context(http.stream("POST", CHAT, json={**SLOW, "stream": True}))
            assert response.status_code == 200
        with concurrent.futures.ThreadPoolExecutor(6) as clients:
            gave_up = [clients.submit(_give_up_after, stack.url, 2.0, stream) for _ in range(6)]
            wait_until(lambda: waiting() == 6, 5, f"the 6 requests did not queue: {waiting()} waiting")
            assert all(future.result() for future in gave_up)
        left = time.monotonic()
        wait_until(lambda: waiting() == 0, 1.0, f"requests whose clients left still queued: {waiting()}")
        assert stack.sessions()["verify"] == stack.max_sessions, "the holders still run: nothing was admitted"
        print(f"queue empty {time.monotonic() - left:.3f}s after the clients left")


def _give_up_after(url: str, timeout_s: float, stream: bool) -> bool:
    """A client that sends a short request and hangs up after `timeout_s` without an answer."""
    body = {"model": "target", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": stream}
    try:
        with httpx.Client(base_url=url, timeout=timeout_s) as client:
            client.post(CHAT, json=body)
    except httpx.ReadTimeout:
        return True
    return False
