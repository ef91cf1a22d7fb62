"""/metrics: verify's counters equal the sums of what the responses reported, and the gateway exports
no metric of verify's (one source per metric: a sum() without a job filter counts each token once)."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

MESSAGES = [{"role": "user", "content": "Tell me about the market."}]
COUNTERS = (
    "specdec_spec_decode_num_drafts",
    "specdec_spec_decode_num_draft_tokens",
    "specdec_spec_decode_num_accepted_tokens",
    "specdec_generated_tokens",
)


def _scrape(text: str) -> dict[str, float]:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_total"):
                values[sample.name.removesuffix("_total")] = values.get(sample.name.removesuffix("_total"), 0.0) + sample.value
    return values


def test_verify_counters_equal_the_sums_of_response_stats(make_gateway, verify_server):
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
        assert name not in scraped, name  # verify's alone
        assert verify_after[name] - verify_before.get(name, 0) == expected[name], name
    assert scraped["specdec_gateway_requests"] == 4 and expected["specdec_spec_decode_num_draft_tokens"] > 0


STANDARD = ("process_", "python_")  # prometheus_client's own collectors: each process's, not a count of requests


def _names(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text) if not family.name.startswith(STANDARD)}


def test_the_gateway_exports_no_metric_name_that_verify_exports(make_gateway, verify_server):
    # issue 29: the gateway exported verify's specdec_spec_decode_* counters (and its token, request and
    # latency metrics) under the same names, so a sum() without a job filter counted every token twice.
    gateway = make_gateway()
    body = {"model": "target", "messages": MESSAGES, "max_tokens": 4, "temperature": 0}
    assert httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30).status_code == 200
    gateway_names, verify_names = _names(httpx.get(f"{gateway.url}/metrics", timeout=5).text), _names(_verify_metrics(verify_server))
    assert "specdec_spec_decode_num_draft_tokens" in verify_names and "specdec_requests_waiting" in gateway_names
    assert not gateway_names & verify_names, sorted(gateway_names & verify_names)


def _streamed(url: str, body: dict) -> tuple[dict, dict]:
    import json

    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    closing = events[-1]
    return closing["usage"], closing["speculative"]


def _verify_metrics(verify_server) -> str:
    from prometheus_client import generate_latest

    return generate_latest(verify_server.servicer.metrics.registry).decode()
