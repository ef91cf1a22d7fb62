"""Generate's token provenance over gRPC: a draft service with prompt lookup in front of its model
labels each candidate, and verify reports every emitted token's source and text when asked."""

from __future__ import annotations

import pytest

from specdec.cli.client import VerifyClient
from specdec.drafters import ModelDrafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.v1 import common_pb2

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
SETTINGS = {"max_tokens": 60, "temperature": 0, "ignore_eos": True, "num_draft_tokens": 4}


@pytest.fixture(scope="module")
def lookup_client(service_loop, tiny_target, tiny_draft):
    from conftest import start_draft_server, start_verify_server

    drafter = PromptLookupDrafter(ModelDrafter(tiny_draft.model), LookupSettings(min_ngram=1))
    draft = start_draft_server(service_loop, drafter, tiny_draft)  # overlapped drafting on, as served by default
    verify = start_verify_server(service_loop, tiny_target, f"127.0.0.1:{draft.port}")
    with VerifyClient(f"127.0.0.1:{verify.port}") as client:
        yield client
    service_loop.run(verify.stop(0))
    service_loop.run(draft.stop(0))


def test_every_token_has_a_source_and_its_text(lookup_client):
    responses = list(lookup_client.generate_stream(PROMPT, provenance=True, **SETTINGS))
    sources = []
    for response in responses:
        assert len(response.tokens) == len(response.token_ids)
        assert "".join(token.text for token in response.tokens) == response.text
        drafted = [token.source for token in response.tokens if token.source != common_pb2.TOKEN_SOURCE_TARGET]
        if not response.finish_reason:
            assert len(drafted) == response.round.num_accepted and response.tokens[-1].source == common_pb2.TOKEN_SOURCE_TARGET
        sources.extend(token.source for token in response.tokens)
    assert set(sources) == {common_pb2.TOKEN_SOURCE_TARGET, common_pb2.TOKEN_SOURCE_DRAFT, common_pb2.TOKEN_SOURCE_LOOKUP}


def test_provenance_is_sent_only_when_asked_and_changes_no_token(lookup_client):
    plain = list(lookup_client.generate_stream(PROMPT, **SETTINGS))
    asked = list(lookup_client.generate_stream(PROMPT, provenance=True, **SETTINGS))
    assert not any(response.tokens for response in plain)
    assert [t for r in plain for t in r.token_ids] == [t for r in asked for t in r.token_ids]
