"""The gateway's error matrix: every failure is an exact HTTP status with an OpenAI error body."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from openai import OpenAI
from service_support import CHAT, assert_openai_error, free_port

HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def client(gateway_url):
    with httpx.Client(base_url=gateway_url, timeout=30) as http:
        yield http


# --- malformed and mistyped requests ---------------------------------------------------------


def test_malformed_json_is_400(client):
    response = client.post(CHAT, content=b'{"model": "target", "messages": [', headers={"content-type": "application/json"})
    error = assert_openai_error(response, 400)
    assert "JSON" in error["message"]


def test_max_tokens_of_wrong_type_is_400_naming_max_tokens(client):
    response = client.post(CHAT, json={"model": "target", "messages": HELLO, "max_tokens": "many"})
    assert_openai_error(response, 400, param="max_tokens")


def test_messages_of_wrong_type_is_400_naming_messages(client):
    response = client.post(CHAT, json={"model": "target", "messages": "hi"})
    assert_openai_error(response, 400, param="messages")


def test_missing_messages_is_400(client):
    response = client.post(CHAT, json={"model": "target"})
    assert_openai_error(response, 400, param="messages")


# --- body size -------------------------------------------------------------------------------


@pytest.fixture
def small_body_gateway(make_gateway):
    return make_gateway(max_body_bytes=2048)


def _big_body() -> bytes:
    return json.dumps({"model": "target", "messages": [{"role": "user", "content": "x" * (10 * 1024)}]}).encode()


def test_body_over_limit_with_content_length_is_413(small_body_gateway):
    body = _big_body()
    response = httpx.post(f"{small_body_gateway.url}{CHAT}", content=body, headers={"content-type": "application/json"}, timeout=30)
    assert_openai_error(response, 413, code="request_too_large")


def test_chunked_body_over_limit_is_413(small_body_gateway):
    body = _big_body()

    def chunks():
        for start in range(0, len(body), 1024):
            yield body[start : start + 1024]

    response = httpx.post(f"{small_body_gateway.url}{CHAT}", content=chunks(), headers={"content-type": "application/json"}, timeout=30)
    assert "content-length" not in response.request.headers  # really sent chunked
    assert_openai_error(response, 413, code="request_too_large")


def test_body_under_limit_is_served(small_body_gateway):
    response = httpx.post(f"{small_body_gateway.url}{CHAT}", json={"model": "target", "messages": HELLO, "max_tokens": 2}, timeout=30)
    assert response.status_code == 200, response.text


# --- context and limits ----------------------------------------------------------------------


def _long_prompt() -> str:
    return " ".join(f"word{i % 50}" for i in range(3000))


def test_prompt_over_context_is_400_with_both_numbers(client):
    response = client.post(CHAT, json={"model": "target", "messages": [{"role": "user", "content": _long_prompt()}]})
    error = assert_openai_error(response, 400)
    assert "512" in error["message"]
    numbers = [int(word) for word in error["message"].replace("(", " ").split() if word.isdigit()]
    assert any(number > 512 for number in numbers), error["message"]  # the prompt's token count


def test_max_tokens_over_limit_is_400(make_gateway):
    gateway = make_gateway(max_tokens_limit=100)
    response = httpx.post(f"{gateway.url}{CHAT}", json={"model": "target", "messages": HELLO, "max_tokens": 101}, timeout=30)
    error = assert_openai_error(response, 400, param="max_tokens")
    assert "100" in error["message"]
    ok = httpx.post(f"{gateway.url}{CHAT}", json={"model": "target", "messages": HELLO, "max_tokens": 3}, timeout=30)
    assert ok.status_code == 200, ok.text


def test_prompt_plus_max_tokens_over_context_is_400(client):
    response = client.post(CHAT, json={"model": "target", "messages": HELLO, "max_tokens": 600})
    error = assert_openai_error(response, 400, param="max_tokens")
    assert "512" in error["message"] and "600" in error["message"]


def test_n_over_max_n_is_400(make_gateway):
    gateway = make_gateway(max_n=2)
    response = httpx.post(f"{gateway.url}{CHAT}", json={"model": "target", "messages": HELLO, "n": 3, "max_tokens": 2}, timeout=30)
    assert_openai_error(response, 400, param="n")


def test_unknown_model_is_404_model_not_found(client):
    response = client.post(CHAT, json={"model": "no-such-model", "messages": HELLO})
    assert_openai_error(response, 404, param="model", code="model_not_found")


def test_frequency_penalty_out_of_range_is_refused(client):
    response = client.post(CHAT, json={"model": "target", "messages": HELLO, "frequency_penalty": 2.5})
    error = assert_openai_error(response, 400, param="frequency_penalty")
    assert "frequency_penalty" in error["message"]


def test_echo_on_completions_is_refused(client):
    response = client.post("/v1/completions", json={"model": "target", "prompt": "hello", "echo": True})
    assert_openai_error(response, 400, param="echo")


def test_unknown_route_is_404_in_openai_shape(client):
    assert_openai_error(client.get("/v1/no-such-route"), 404)
    assert_openai_error(client.post("/nowhere", json={}), 404)


# --- verify unreachable ----------------------------------------------------------------------


@pytest.fixture
def orphan_gateway(make_gateway):
    return make_gateway(verify_endpoint=f"127.0.0.1:{free_port()}", upstream_connect_timeout_s=1, served_model_name="target")


def test_unreachable_verify_is_503_without_hanging(orphan_gateway):
    started = time.monotonic()
    response = httpx.post(f"{orphan_gateway.url}{CHAT}", json={"model": "target", "messages": HELLO}, timeout=30)
    elapsed = time.monotonic() - started
    assert_openai_error(response, 503)
    assert elapsed < 5, elapsed


def test_unreachable_verify_is_not_ready_but_healthy(orphan_gateway):
    ready = httpx.get(f"{orphan_gateway.url}/ready", timeout=30)
    assert ready.status_code == 503
    assert ready.headers["content-type"].startswith("application/json")
    assert ready.json()["status"] != "ready"
    health = httpx.get(f"{orphan_gateway.url}/health", timeout=30)
    assert health.status_code == 200


# --- streaming -------------------------------------------------------------------------------


def test_stream_failing_before_first_token_gets_a_real_status(client):
    payload = {"model": "target", "messages": [{"role": "user", "content": _long_prompt()}], "stream": True}
    with client.stream("POST", CHAT, json=payload) as response:
        response.read()
    assert_openai_error(response, 400)
    assert not response.headers["content-type"].startswith("text/event-stream")


def test_stream_with_too_many_tokens_gets_a_real_status(client):
    payload = {"model": "target", "messages": HELLO, "max_tokens": 600, "stream": True}
    with client.stream("POST", CHAT, json=payload) as response:
        response.read()
    assert_openai_error(response, 400, param="max_tokens")


# --- the openai SDK sees the right exception classes -----------------------------------------


def test_openai_sdk_raises_matching_exceptions(make_gateway, monkeypatch):
    monkeypatch.setenv("SPECDEC_API_KEYS", "sdk-key")
    gateway = make_gateway(rate_limit_rpm=1)
    sdk = OpenAI(base_url=f"{gateway.url}/v1", api_key="sdk-key", max_retries=0, timeout=30)

    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=f"{gateway.url}/v1", api_key="wrong", max_retries=0, timeout=30).models.list()
    with pytest.raises(openai.NotFoundError) as not_found:
        sdk.chat.completions.create(model="no-such-model", messages=HELLO)
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.chat.completions.create(model="target", messages=HELLO, max_tokens=600)
    assert bad.value.param == "max_tokens"
    # the refused-by-verify request above used the key's one request of the minute
    with pytest.raises(openai.RateLimitError) as limited:
        sdk.chat.completions.create(model="target", messages=HELLO, max_tokens=2)
    assert int(limited.value.response.headers["retry-after"]) > 0
