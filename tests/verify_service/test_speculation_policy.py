"""GenerateRequest.speculation_policy: ALWAYS drafts where the service's load-aware policy runs plain
steps, AUTO follows it, verify counts each by whether it drafted, and a bad value names the field."""

from __future__ import annotations

import grpc
import pytest

from specdec.cli.client import VerifyClient
from specdec.v1 import verify_pb2

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


@pytest.fixture
def policy_off(make_verify_server, tiny_target, draft_server, load_policy_decided_off):
    """(client, server): a verify service whose load-aware policy has decided against drafting."""
    server = make_verify_server(tiny_target, f"127.0.0.1:{draft_server.port}", load_aware_speculation=True)
    server.servicer.load_policy = load_policy_decided_off()
    with VerifyClient(f"127.0.0.1:{server.port}") as client:
        yield client, server


def _count(server, policy: str, drafted: str) -> float:
    labels = {"policy": policy, "drafted": drafted}
    return server.servicer.metrics.registry.get_sample_value("specdec_speculative_requests_total", labels) or 0.0


def test_always_drafts_where_the_policy_says_no_with_the_same_output(policy_off):
    client, server = policy_off
    settings = {"max_tokens": 24, "temperature": 0.8, "seed": 3, "acceptance": "coupled", "ignore_eos": True}
    auto = client.generate(PROMPT, **settings)
    always = client.generate(PROMPT, speculation_policy="always", **settings)
    assert auto.summary.rounds == auto.summary.draft_tokens == 0
    assert always.summary.rounds > 0 and always.summary.draft_tokens > 0 and not always.summary.fallback
    assert always.token_ids == auto.token_ids
    client.generate(PROMPT, speculative=False, **settings)  # not speculative: not counted
    assert (_count(server, "auto", "no"), _count(server, "always", "yes")) == (1, 1)
    assert _count(server, "auto", "yes") == _count(server, "always", "no") == 0


def test_an_unknown_policy_is_invalid_argument_naming_the_field(policy_off):
    client, _ = policy_off
    request = verify_pb2.GenerateRequest(options=verify_pb2.GenerationOptions(text=PROMPT, max_tokens=4), speculation_policy=7)
    with pytest.raises(grpc.RpcError) as caught:
        list(client.stub.Generate(request, timeout=30))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "speculation_policy" in caught.value.details()


def _draft_blocks(draft_server) -> float:
    return draft_server.servicer.metrics.registry.get_sample_value("specdec_draft_block_compute_seconds_count") or 0.0


def test_plain_rounds_open_no_stream_on_the_draft_service(policy_off, draft_server):
    # NOTE: opened for a request the policy keeps in plain steps, the draft prefilled its prompt for nothing
    # and verify waited for that (4-8% of throughput at 8 sessions on a 2-core CPU).
    client, _ = policy_off
    before = _draft_blocks(draft_server)
    auto = client.generate(PROMPT, max_tokens=16, temperature=0)
    assert auto.summary.rounds == 0
    assert _draft_blocks(draft_server) == before
    # Negative control: a request that drafts opens the stream and gets blocks.
    always = client.generate(PROMPT, max_tokens=16, temperature=0, speculation_policy="always")
    assert always.summary.draft_tokens > 0 and _draft_blocks(draft_server) > before
    assert always.token_ids == auto.token_ids
