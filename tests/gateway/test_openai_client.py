"""The official `openai` client against the real gateway, verify and draft services (tiny pair)."""

from __future__ import annotations

import time

import httpx
import pytest
from openai import OpenAI

MESSAGES = [{"role": "user", "content": "Tell me a story about the river and the market."}]


@pytest.fixture(scope="module")
def client(gateway_url):
    return OpenAI(base_url=f"{gateway_url}/v1", api_key="unused", max_retries=0)


def test_models_lists_the_served_model(client):
    assert [model.id for model in client.models.list().data] == ["target"]


def test_chat_non_streaming_with_speculative_stats_consistent_with_usage(client):
    response = client.chat.completions.create(model="target", messages=MESSAGES, max_tokens=24, temperature=0)
    choice = response.choices[0]
    assert response.object == "chat.completion" and choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("length", "stop") and response.usage.completion_tokens <= 24
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens
    stats = response.model_extra["speculative"]
    assert stats["enabled"] and stats["rounds"] > 0 and not stats["fallback"]
    assert 0 <= stats["accepted_tokens"] <= stats["draft_tokens"]
    # every round emits its accepted tokens plus one target token
    assert stats["accepted_tokens"] + stats["rounds"] <= response.usage.completion_tokens <= stats["accepted_tokens"] + stats["rounds"] + 1
    assert stats["acceptance_rate"] == pytest.approx(stats["accepted_tokens"] / stats["draft_tokens"], abs=1e-6)


def test_greedy_output_is_the_same_with_speculation_on_and_off(client):
    common = {"model": "target", "messages": MESSAGES, "max_tokens": 40, "temperature": 0}
    on = client.chat.completions.create(**common, extra_body={"speculative": {"enabled": True}})
    off = client.chat.completions.create(**common, extra_body={"speculative": {"enabled": False}})
    assert on.choices[0].message.content == off.choices[0].message.content
    spec_on = on.model_extra["speculative"]
    assert spec_on["rounds"] > 0 and spec_on["draft_tokens"] > 0 and not spec_on["fallback"]
    assert off.model_extra["speculative"]["rounds"] == 0


def test_seeded_sampling_is_reproducible_and_coupled_matches_spec_off(client):
    common = {"model": "target", "messages": MESSAGES, "max_tokens": 30, "temperature": 0.9, "seed": 1234}
    coupled = {"speculative": {"acceptance": "coupled"}}
    coupled_reply = client.chat.completions.create(**common, extra_body=coupled)
    first = coupled_reply.choices[0].message.content
    spec_on = coupled_reply.model_extra["speculative"]
    assert spec_on["rounds"] > 0 and spec_on["draft_tokens"] > 0 and not spec_on["fallback"]
    again = client.chat.completions.create(**common, extra_body=coupled).choices[0].message.content
    off = client.chat.completions.create(**common, extra_body={"speculative": {"enabled": False}}).choices[0].message.content
    other = client.chat.completions.create(**{**common, "seed": 99}, extra_body=coupled).choices[0].message.content
    assert first == again == off and first != other


def test_chat_streaming_chunks_concatenate_to_the_non_streamed_text(client):
    common = {"model": "target", "messages": MESSAGES, "max_tokens": 24, "temperature": 0}
    full = client.chat.completions.create(**common).choices[0].message.content
    chunks = list(client.chat.completions.create(**common, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full
    assert chunks[0].choices[0].delta.role == "assistant"
    assert any(c.choices and c.choices[0].finish_reason == "length" for c in chunks)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 24 and chunks[-1].choices == []
    assert chunks[-1].model_extra["speculative"]["rounds"] > 0


def test_raw_sse_framing_ends_with_done(gateway_url):
    body = {"model": "target", "messages": MESSAGES, "max_tokens": 5, "stream": True}
    with httpx.stream("POST", f"{gateway_url}/v1/chat/completions", json=body, timeout=30) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in events) and events[-1] == "data: [DONE]"


def test_completions_non_streaming_and_streaming(client):
    response = client.completions.create(model="target", prompt="Once upon a time", max_tokens=12, temperature=0)
    assert response.object == "text_completion" and response.usage.completion_tokens == 12
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(model="target", prompt="Once upon a time", max_tokens=12, temperature=0, stream=True)
        if c.choices
    )
    assert streamed == response.choices[0].text


def test_stop_strings_cut_the_text(client):
    full = client.completions.create(model="target", prompt="Once upon a time", max_tokens=30, temperature=0).choices[0].text
    stop = full[8:11]
    cut = client.completions.create(model="target", prompt="Once upon a time", max_tokens=30, temperature=0, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop" and cut.text == full[: full.find(stop)]


def test_n_choices_are_independent_samples(client):
    response = client.chat.completions.create(model="target", messages=MESSAGES, max_tokens=16, temperature=1.0, n=3, seed=5)
    assert [c.index for c in response.choices] == [0, 1, 2]
    assert len({c.message.content for c in response.choices}) > 1
    assert 3 <= response.usage.completion_tokens <= 48


def test_n_choices_stream_with_indices(client):
    chunks = list(
        client.chat.completions.create(model="target", messages=MESSAGES, max_tokens=8, temperature=1.0, n=2, seed=5, stream=True)
    )
    indices = {c.choices[0].index for c in chunks if c.choices}
    assert indices == {0, 1}


def test_logprobs_chat_and_completions(client):
    chat = client.chat.completions.create(model="target", messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    content = chat.choices[0].logprobs.content
    assert len(content) == 6 and all(len(entry.top_logprobs) == 3 and entry.logprob <= 0 for entry in content)
    assert all(entry.top_logprobs[0].token == entry.token for entry in content)  # greedy picks the top token
    legacy = client.completions.create(model="target", prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=2)
    assert len(legacy.choices[0].logprobs.token_logprobs) == 4 and len(legacy.choices[0].logprobs.top_logprobs[0]) == 2


def test_disconnect_mid_stream_frees_the_verify_session(gateway_url, verify_server):
    from specdec.cli.client import VerifyClient

    body = {"model": "target", "messages": MESSAGES, "max_tokens": 450, "temperature": 0, "speculative": {"enabled": False}}
    started = time.monotonic()
    httpx.post(f"{gateway_url}/v1/chat/completions", json=body, timeout=60).raise_for_status()
    full_duration = time.monotonic() - started
    with httpx.stream("POST", f"{gateway_url}/v1/chat/completions", json={**body, "stream": True}, timeout=30) as response:
        lines = response.iter_lines()
        next(lines)
        next(lines)
        disconnected = time.monotonic()
    with VerifyClient(f"127.0.0.1:{verify_server.port}") as verify:
        while verify.status().active_sessions and time.monotonic() - disconnected < full_duration:
            time.sleep(0.01)
        freed_after = time.monotonic() - disconnected
    # The session ended because the call was cancelled, well before the generation could finish.
    assert freed_after < full_duration / 2, (freed_after, full_duration)
