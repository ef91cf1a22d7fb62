"""speculative.adaptive_k on the verify service: Generate adapts K (and stays lossless), the chosen-K
histogram counts its rounds, Verify keeps the client's K."""

from __future__ import annotations

import pytest
from conftest import start_verify_server

from specdec.cli.client import VerifyClient
from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


@pytest.fixture(scope="module")
def adaptive_server(service_loop, tiny_target, draft_server):
    server = start_verify_server(
        service_loop, tiny_target, f"127.0.0.1:{draft_server.port}", speculative={"adaptive_k": True, "draft_tokens": 6}
    )
    yield server
    service_loop.run(server.stop(0))


@pytest.fixture(scope="module")
def adaptive_client(adaptive_server):
    with VerifyClient(f"127.0.0.1:{adaptive_server.port}") as client:
        yield client


def _chosen_k_count(server) -> float:
    return server.servicer.metrics.registry.get_sample_value("specdec_spec_decode_chosen_k_count") or 0.0


def test_adaptive_generate_equals_target_only_and_records_each_chosen_k(adaptive_client, adaptive_server, tiny_target):
    prompt_ids = tiny_target.tokenizer(PROMPT)["input_ids"]
    reference = SpeculativeGenerator(tiny_target).generate(
        GenerationRequest(prompt_ids=prompt_ids, max_tokens=60, sampling=SamplingParams(temperature=0), speculative=False, ignore_eos=True)
    )
    before = _chosen_k_count(adaptive_server)
    completion = adaptive_client.generate(PROMPT, max_tokens=60, temperature=0, ignore_eos=True)
    assert completion.token_ids == reference.token_ids and not completion.summary.fallback
    # The warm-up drafts the most (6), then none: rounds without candidates (no round trip to the
    # draft service) in the middle of a remote generation.
    candidates = [r.num_candidates for r in completion.rounds]
    assert candidates[1] == 6 and 0 in candidates[:6] and max(candidates) <= 6
    assert _chosen_k_count(adaptive_server) - before == len(completion.rounds)
    registry = adaptive_server.servicer.metrics.registry
    assert registry.get_sample_value("specdec_spec_decode_chosen_k_bucket", {"le": "0.0"}) >= 1  # the K = 0 rounds


def test_target_only_requests_record_no_chosen_k(adaptive_client, adaptive_server):
    before = _chosen_k_count(adaptive_server)
    completion = adaptive_client.generate(PROMPT, max_tokens=8, temperature=0, ignore_eos=True, speculative=False)
    assert len(completion.token_ids) == 8
    assert _chosen_k_count(adaptive_server) == before


def test_verify_keeps_the_clients_budget_when_adaptive_k_is_on(adaptive_client):
    # Negative control for the adaptive budget: a client that drafts chooses its own K (up to 64).
    with adaptive_client.verify_session(PROMPT, max_tokens=20, temperature=0, ignore_eos=True) as session:
        assert session.opened.max_candidates == 19
        verdict = session.verify([1, 2, 3, 4, 5, 6, 7, 8])
        assert verdict.max_candidates == 20 - len(verdict.token_ids) - 1
