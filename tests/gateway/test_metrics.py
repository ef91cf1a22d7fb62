"""/metrics counters equal the sums of what the responses reported."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

MESSAGES = [{"role": "user", "content": "Tell me about the market."}]
COUNTERS = ("specdec_spec_decode_num_drafts", "specdec_spec_decode_num_draft_tokens", "specdec_spec_decode_num_accepted_tokens",
            "specdec_generated_tokens")


def _scrape(text: str) -> dict[str, float]:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_total"):
                values[sample.name.removesuffix("_total")] = values.get(sample.name.removesuffix("_total"), 0.0) + sample.value
    return values


def test_gateway_and_verify_counters_equal_the_sums_of_response_stats(make_gateway, verify_server):
    gateway = make_gateway()
    verify_before = _scrape(_verify_metrics(verify_server))
    expected = dict.fromkeys(COUNTERS, 0)
    for index in range(4):
        body = {"model": "target", "messages": MESSAGES, "max_tokens": 10 + index, "temperature": 0.8, "seed": index}
        if index % 2:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
            usage, stats = _streamed(gateway.url, body)
        else:
            reply = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30).json()
            usage, stats = reply["usage"], reply["speculative"]
        expected["specdec_spec_decode_num_drafts"] += stats["rounds"]
        expected["specdec_spec_decode_num_draft_tokens"] += stats["draft_tokens"]
        expected["specdec_spec_decode_num_accepted_tokens"] += stats["accepted_tokens"]
        expected["specdec_generated_tokens"] += usage["completion_tokens"]
    scraped = _scrape(httpx.get(f"{gateway.url}/metrics", timeout=5).text)
    verify_after = _scrape(_verify_metrics(verify_server))
    for name in COUNTERS:
        assert scraped[name] == expected[name], name
        assert verify_after[name] - verify_before.get(name, 0) == expected[name], name
    assert scraped["specdec_requests"] == 4 and expected["specdec_spec_decode_num_draft_tokens"] > 0


def _streamed(url: str, body: dict) -> tuple[dict, dict]:
    import json

    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    closing = events[-1]
    return closing["usage"], closing["speculative"]


def _verify_metrics(verify_server) -> str:
    from prometheus_client import generate_latest

    return generate_latest(verify_server.servicer.metrics.registry).decode()
