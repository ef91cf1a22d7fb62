"""Requests that used to end in a 5xx or to deny service to others: sampling parameters at the edge
of their range, a reader too slow to take its stream, n > 1 under load. Real processes."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import socket
import time

import pytest
from service_support import CHAT, LONG_GREEDY, assert_openai_error, sse_events, wait_until

PROMPT = [{"role": "user", "content": "Tell me a long story about the sea."}]


# --- top_p underflow -------------------------------------------------------------------------


@pytest.mark.parametrize("top_p", [1e-46, 5e-324])
def test_a_top_p_too_small_to_represent_keeps_the_most_probable_token_with_speculation_on_and_off(http, stack, top_p):
    body = {"model": "target", "messages": PROMPT, "max_tokens": 24, "temperature": 1.0, "top_p": top_p, "seed": 7}
    greedy = http.post(CHAT, json={**body, "temperature": 0, "top_p": None})
    assert greedy.status_code == 200, greedy.text
    answers = {}
    for enabled in (True, False):
        reply = http.post(CHAT, json={**body, "speculative": {"enabled": enabled}})
        assert reply.status_code == 200, reply.text  # was 502 ("target_probs contains NaN") with speculation on
        answers[enabled] = reply.json()
    texts = {enabled: answer["choices"][0]["message"]["content"] for enabled, answer in answers.items()}
    # Only the most probable token survives: greedy decoding, the same with and without speculation.
    assert texts[True] == texts[False] == greedy.json()["choices"][0]["message"]["content"] != ""
    assert answers[True]["speculative"]["rounds"] > 0


# --- numeric ranges --------------------------------------------------------------------------

# Each numeric field one past the range its gRPC field can carry (int32, uint32, uint64).
PAST_THE_WIRE = [
    ("top_k", {"top_k": 2**31}, "top_k"),
    ("seed", {"seed": 2**64}, "seed"),
    ("max_tokens", {"max_tokens": 2**32}, "max_tokens"),
    ("max_completion_tokens", {"max_completion_tokens": 2**32}, "max_completion_tokens"),
    ("top_logprobs", {"logprobs": True, "top_logprobs": 2**32}, "top_logprobs"),
    ("n", {"n": 2**32}, "n"),
    ("num_draft_tokens", {"speculative": {"num_draft_tokens": 2**32}}, "speculative.num_draft_tokens"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("name", "fields", "param"), PAST_THE_WIRE, ids=[case[0] for case in PAST_THE_WIRE])
def test_numbers_past_what_the_wire_carries_are_400_naming_the_field(http, name, fields, param, stream):
    body = {"model": "target", "messages": PROMPT, "max_tokens": 4, "stream": stream, **fields}
    assert_openai_error(http.post(CHAT, json=body), 400, param=param)


def test_the_largest_top_k_is_served(http):
    body = {"model": "target", "messages": PROMPT, "max_tokens": 4, "top_k": 2**31 - 1, "seed": 1}
    assert http.post(CHAT, json=body).status_code == 200


# --- a slow reader ---------------------------------------------------------------------------


def _raw_request(port: int, body: dict, receive_buffer: int) -> socket.socket:
    """POST `body` over a socket whose receive buffer is `receive_buffer` bytes (set before connecting)."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    client.connect(("127.0.0.1", port))
    payload = json.dumps(body).encode()
    client.sendall(
        b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (CHAT.encode(), len(payload), payload)
    )
    return client


def test_a_slow_reader_that_goes_away_gives_its_gateway_slot_back(stack):
    # 8 choices with 20 top logprobs per token: megabytes of SSE, far more than the socket buffers hold.
    body = {**LONG_GREEDY, "max_tokens": 460, "n": 8, "logprobs": True, "top_logprobs": 20, "stream": True}
    client = _raw_request(stack.ports["gateway"], body, receive_buffer=4096)
    try:
        assert client.recv(4096).startswith(b"HTTP/1.1 200")
        # Generation over (verify is idle) but the gateway still holds the stream: it is stuck writing to us.
        wait_until(lambda: stack.sessions()["verify"] == 0, 120, "the generation did not finish", interval=0.2)
        time.sleep(3)
        assert stack.sessions()["gateway"] == 1, stack.sessions()
    finally:
        client.close()
    closed = time.monotonic()
    wait_until(lambda: stack.sessions()["gateway"] == 0, 5, f"the gateway slot was not released: {stack.sessions()}")
    print(f"slow reader: slot released {time.monotonic() - closed:.2f}s after the disconnect")


# --- n > 1 admission -------------------------------------------------------------------------


def test_n_choices_wait_for_room_in_the_gateway_instead_of_a_429_from_verify(stack, http):
    """The gateway admits generations as verify counts them (a request of n = 8 is 8 sessions): a
    request that does not fit waits in the gateway's queue, then completes."""
    per_request = 8
    # Target-only decoding, one token per round: long enough that the first requests still run when the last arrives.
    body = {**LONG_GREEDY, "n": per_request, "stream": True, "speculative": {"enabled": False}}
    with contextlib.ExitStack() as streams:
        holders = []  # each stream's events; NOTE: kept, since dropping a line iterator closes its connection
        for _ in range(stack.max_sessions // per_request):  # every verify session taken
            response = streams.enter_context(http.stream("POST", CHAT, json=body))
            assert response.status_code == 200
            holders.append(sse_events(response.iter_lines()))
            next(holders[-1])
        assert stack.sessions()["verify"] == stack.max_sessions, stack.sessions()
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(len(holders)) as readers:
            finished = [readers.submit(list, events) for events in holders]
            with http.stream("POST", CHAT, json=body) as late:  # waits in the gateway until a holder has finished
                assert late.status_code == 200, late.read()
                late_events = list(sse_events(late.iter_lines()))
            assert all(len(reader.result()) > per_request for reader in finished)  # the holders were served to the end
    assert sum(1 for event in late_events for choice in event["choices"] if choice.get("finish_reason")) == per_request
    print(f"n={per_request}: the late request was served {time.monotonic() - started:.2f}s after it was sent")
