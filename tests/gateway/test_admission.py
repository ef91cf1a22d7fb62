"""Admission control end to end: the concurrency cap and queue, the queue timeout, per-key rate limits."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

CHAT = "/v1/chat/completions"
# With this seed the tiny random target samples all 450 tokens (no early end of text): a request
# that keeps a slot busy for a while on CPU. Speculation off keeps it on the slow, steady path.
LONG = {
    "model": "target",
    "messages": [{"role": "user", "content": "Tell me a long story."}],
    "max_tokens": 450,
    "temperature": 1.0,
    "seed": 2,
    "speculative": {"enabled": False},
}
SHORT = {"model": "target", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def assert_overloaded(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert int(response.headers["retry-after"]) > 0
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "rate_limit_error"
    assert error["code"] == "rate_limit_exceeded"


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def queue_seconds_count(metrics_text: str) -> float:
    """The sample count of the admission queue-time histogram."""
    name = r"specdec_request_queue_time_seconds_count"
    match = re.search(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", metrics_text, re.MULTILINE)
    assert match, metrics_text
    return float(match.group(1))


# --- concurrency cap and queue ---------------------------------------------------------------


def test_burst_beyond_running_plus_queue_is_refused(make_gateway):
    gateway = make_gateway(max_concurrent_requests=2, max_queue=2, queue_timeout_s=30)
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        started = time.monotonic()
        alone = client.post(CHAT, json=LONG)
        assert alone.status_code == 200, alone.text
        assert time.monotonic() - started >= 0.3, "the long request is too short to overlap"
        assert alone.json()["usage"]["completion_tokens"] == LONG["max_tokens"]

    barrier = threading.Barrier(8)

    def one(_):
        with httpx.Client(base_url=gateway.url, timeout=60) as client:
            barrier.wait()
            return client.post(CHAT, json=LONG)

    burst_started = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(one, range(8)))
    assert time.monotonic() - burst_started < 60

    statuses = sorted(response.status_code for response in responses)
    assert statuses == [200] * 4 + [429] * 4, [r.text[:200] for r in responses]
    for response in responses:
        if response.status_code == 429:
            assert_overloaded(response)
        else:
            assert response.json()["choices"][0]["message"]["content"] == alone.json()["choices"][0]["message"]["content"]

    wait_until(lambda: gateway.gateway.admission.running == 0 and gateway.gateway.admission.waiting == 0)
    after = httpx.post(f"{gateway.url}{CHAT}", json=SHORT, timeout=30)
    assert after.status_code == 200, after.text


def test_queue_timeout_is_429(make_gateway):
    gateway = make_gateway(max_concurrent_requests=1, max_queue=5, queue_timeout_s=0.2)
    results = {}

    def long_request():
        results["long"] = httpx.post(f"{gateway.url}{CHAT}", json=LONG, timeout=60)

    worker = threading.Thread(target=long_request)
    worker.start()
    try:
        wait_until(lambda: gateway.gateway.admission.running == 1)
        started = time.monotonic()
        queued = httpx.post(f"{gateway.url}{CHAT}", json=SHORT, timeout=30)
        waited = time.monotonic() - started
    finally:
        worker.join(timeout=60)
    assert_overloaded(queued)
    assert 0.19 <= waited < 5, waited
    assert results["long"].status_code == 200
    assert gateway.gateway.admission.waiting == 0


def test_non_streaming_requests_give_their_slot_back(make_gateway):
    gateway = make_gateway(max_concurrent_requests=1, max_queue=0, queue_timeout_s=1)
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for _ in range(4):
            response = client.post(CHAT, json=SHORT)
            assert response.status_code == 200, response.text
            wait_until(lambda: gateway.gateway.admission.running == 0, timeout=5)
        with client.stream("POST", CHAT, json={**SHORT, "stream": True}) as stream:
            assert stream.status_code == 200
            stream.read()
        wait_until(lambda: gateway.gateway.admission.running == 0, timeout=5)
        assert client.post(CHAT, json=SHORT).status_code == 200


# --- per-key rate limits ---------------------------------------------------------------------


def test_requests_per_minute_per_key(make_gateway, monkeypatch):
    monkeypatch.setenv("SPECDEC_API_KEYS", "a,b")
    gateway = make_gateway(rate_limit_rpm=2)
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        key_a, key_b = {"Authorization": "Bearer a"}, {"Authorization": "Bearer b"}
        assert client.post(CHAT, json=SHORT, headers=key_a).status_code == 200
        assert client.post(CHAT, json=SHORT, headers=key_a).status_code == 200
        assert_overloaded(client.post(CHAT, json=SHORT, headers=key_a))
        assert client.post(CHAT, json=SHORT, headers=key_b).status_code == 200


def test_tokens_per_minute_per_key(make_gateway, monkeypatch):
    monkeypatch.setenv("SPECDEC_API_KEYS", "a,b")
    gateway = make_gateway(rate_limit_tpm=10)
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        key_a = {"Authorization": "Bearer a"}
        first = client.post(CHAT, json={**SHORT, "max_tokens": 12, "temperature": 0}, headers=key_a)
        assert first.status_code == 200, first.text
        assert first.json()["usage"]["completion_tokens"] >= 10
        assert_overloaded(client.post(CHAT, json=SHORT, headers=key_a))
        assert client.post(CHAT, json=SHORT, headers={"Authorization": "Bearer b"}).status_code == 200


def test_streamed_tokens_count_towards_the_token_limit(make_gateway, monkeypatch):
    monkeypatch.setenv("SPECDEC_API_KEYS", "a")
    gateway = make_gateway(rate_limit_tpm=10)
    with httpx.Client(base_url=gateway.url, timeout=30, headers={"Authorization": "Bearer a"}) as client:
        with client.stream("POST", CHAT, json={**SHORT, "max_tokens": 12, "temperature": 0, "stream": True}) as stream:
            assert stream.status_code == 200
            stream.read()
        assert_overloaded(client.post(CHAT, json=SHORT))


# --- metrics ---------------------------------------------------------------------------------


def test_queue_time_is_measured(make_gateway):
    admitted = 3
    gateway = make_gateway()
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for _ in range(admitted):
            assert client.post(CHAT, json=SHORT).status_code == 200
        metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert queue_seconds_count(metrics.text) >= admitted
