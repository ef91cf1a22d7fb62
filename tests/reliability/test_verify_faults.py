"""The verify process dies or drains: the gateway answers 503 fast, reports not ready, never
passes a broken stream off as a finished one, and recovers by itself when verify is back."""

from __future__ import annotations

import signal
import time

from service_support import (
    CHAT,
    LONG_GREEDY,
    assert_openai_error,
    grpc_serving,
    http_ok,
    sse_events,
    streamed_speculative,
    streamed_text,
    wait_until,
)

SHORT = {**LONG_GREEDY, "max_tokens": 8}


def test_kill_9_of_verify_mid_stream_ends_the_stream_with_an_error_event(stack, http):
    with http.stream("POST", CHAT, json={**LONG_GREEDY, "stream": True}) as response:
        events = sse_events(response.iter_lines())
        next(events)
        stack.verify.signal(signal.SIGKILL)
        rest = list(events)  # still ends with [DONE]: sse_events fails otherwise
    assert rest and set(rest[-1]) == {"error"}, rest[-3:]
    assert set(rest[-1]["error"]) == {"message", "type", "param", "code"}
    assert not any(choice.get("finish_reason") for payload in rest for choice in payload.get("choices", []))


def test_verify_down_is_a_fast_503_and_not_ready_then_recovers_by_itself(stack, http):
    stack.verify.signal(signal.SIGKILL)
    stack.verify.wait(timeout=10)
    outage_started = time.monotonic()
    for _ in range(3):  # repeated failures grow the channel's reconnect backoff
        started = time.monotonic()
        assert_openai_error(http.post(CHAT, json=SHORT), 503, code="upstream_unavailable")
        assert time.monotonic() - started < 3
        ready = http.get("/ready")
        assert ready.status_code == 503 and ready.json()["status"] == "unavailable"
        assert http.get("/health").status_code == 200
    time.sleep(max(0.0, 8 - (time.monotonic() - outage_started)))  # an outage of several seconds

    stack.verify.start()
    wait_until(lambda: grpc_serving(stack.ports["verify"]), 120, "verify did not restart", interval=0.2)
    back = time.monotonic()
    wait_until(lambda: http_ok(f"{stack.url}/ready"), 5, "the gateway did not see verify again")
    print(f"gateway ready again {time.monotonic() - back:.2f}s after verify was SERVING")
    reply = http.post(CHAT, json=SHORT)
    assert reply.status_code == 200, reply.text


def test_sigterm_of_verify_finishes_the_in_flight_stream_and_refuses_new_requests(stack, http, target_only_text):
    with http.stream("POST", CHAT, json={**LONG_GREEDY, "stream": True}) as response:
        events = sse_events(response.iter_lines())
        payloads = [next(events)]
        stack.verify.signal(signal.SIGTERM)
        wait_until(lambda: http.get("/ready").status_code == 503, 2, "/ready did not turn 503 when verify began draining")
        time.sleep(1.2)  # past the announce period: verify refuses new calls
        assert_openai_error(http.post(CHAT, json=SHORT), 503)
        payloads.extend(events)
    assert streamed_text(payloads) == target_only_text
    stats = streamed_speculative(payloads)
    assert stats["draft_tokens"] > 0 and not stats["fallback"], stats
    assert stack.verify.wait(timeout=30) == 0
