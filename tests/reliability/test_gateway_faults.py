"""The gateway drains on SIGTERM, and a client that goes away mid-stream leaves nothing behind."""

from __future__ import annotations

import signal
import time

import httpx
import pytest
from service_support import CHAT, LONG_GREEDY, sse_events, streamed_speculative, streamed_text, wait_until


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
    try:
        httpx.get(f"{url}/health", timeout=1)
    except httpx.ConnectError:
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
