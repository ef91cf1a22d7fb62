"""The draft process dies, freezes or drains while a gateway stream is in flight: the stream
completes with exactly the target-only text, and the stack serves speculatively again afterwards."""

from __future__ import annotations

import signal
import time

import grpc
import pytest
from service_support import CHAT, LONG_GREEDY, grpc_serving, sse_events, streamed_speculative, streamed_text, wait_until

from specdec.v1 import draft_pb2, draft_pb2_grpc


def _stream_with_fault(http, fault, after_events: int = 3) -> tuple[list, list]:
    """Stream LONG_GREEDY, run `fault()` after a few events, read to the end: (before, after) payloads."""
    with http.stream("POST", CHAT, json={**LONG_GREEDY, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        events = sse_events(response.iter_lines())
        before = [next(events) for _ in range(after_events)]
        fault()
        return before, list(events)


def _assert_speculating_again(http, target_only_text: str) -> None:
    reply = http.post(CHAT, json=LONG_GREEDY).json()
    assert reply["choices"][0]["message"]["content"] == target_only_text
    stats = reply["speculative"]
    assert stats["rounds"] > 0 and stats["draft_tokens"] > 0 and not stats["fallback"], stats


def test_kill_9_of_the_draft_mid_stream_falls_back_with_the_same_text(stack, http, target_only_text):
    before, after = _stream_with_fault(http, lambda: stack.draft.signal(signal.SIGKILL))
    payloads = before + after
    assert streamed_text(payloads) == target_only_text
    assert payloads[-1]["choices"] == [] and streamed_speculative(payloads)["fallback"]
    assert streamed_speculative(payloads)["draft_tokens"] > 0  # it drafted before the kill
    assert stack.draft.wait(timeout=10) == -signal.SIGKILL
    stack.heal()  # the same port again: verify's channel reconnects by itself
    wait_until(lambda: not _fell_back(http), 15, "verify did not draft with the restarted draft", interval=0.5)


def _fell_back(http) -> bool:
    body = {**LONG_GREEDY, "max_tokens": 8}
    return http.post(CHAT, json=body).json()["speculative"]["fallback"]


def test_a_frozen_draft_misses_its_deadline_and_the_stream_still_completes(stack, http, target_only_text):
    frozen_at = []

    def freeze() -> None:
        stack.draft.signal(signal.SIGSTOP)  # alive but silent: a GC pause, an overloaded host
        frozen_at.append(time.monotonic())

    try:
        before, after = _stream_with_fault(http, freeze)  # ends while the draft is still frozen
        finished_s = time.monotonic() - frozen_at[0]
    finally:
        stack.draft.signal(signal.SIGCONT)
    payloads = before + after
    assert streamed_text(payloads) == target_only_text and streamed_speculative(payloads)["fallback"]
    assert streamed_speculative(payloads)["draft_tokens"] > 0  # it drafted before the freeze
    print(f"frozen draft: the stream finished {finished_s:.2f}s after the freeze (round deadline 2 s)")
    # Thawed, the draft gets the stale stream's cancel, frees that session and drafts again.
    wait_until(lambda: stack.sessions()["draft"] == 0, 5, "the frozen session was not freed on the draft")
    _assert_speculating_again(http, target_only_text)


def test_sigterm_of_the_draft_drains_in_flight_refuses_new_and_exits_0(stack, http, target_only_text):
    def terminate() -> None:
        stack.draft.signal(signal.SIGTERM)
        wait_until(lambda: not grpc_serving(stack.ports["draft"]), 2, "draft health did not turn NOT_SERVING")
        time.sleep(1.2)  # past the announce period: the server now refuses new calls
        with grpc.insecure_channel(f"127.0.0.1:{stack.ports['draft']}") as channel, pytest.raises(grpc.RpcError) as refused:
            list(draft_pb2_grpc.DraftServiceStub(channel).Propose(iter([draft_pb2.ProposeRequest()]), timeout=5))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value

    before, after = _stream_with_fault(http, terminate)
    assert streamed_text(before + after) == target_only_text  # drafted to the end, or fell back when the grace ran out
    assert stack.draft.wait(timeout=30) == 0
    stack.heal()
    wait_until(lambda: not _fell_back(http), 15, "verify did not draft with the restarted draft", interval=0.5)
