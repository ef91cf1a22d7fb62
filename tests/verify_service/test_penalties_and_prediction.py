"""Penalties and predicted outputs through the verify service's Generate and the draft's Propose (tiny pair)."""

from __future__ import annotations

import grpc
import pytest
from service_support import whole_word_bias

from specdec.cli.client import VerifyClient
from specdec.drafters import ModelDrafter

PROMPT = "Once upon a time, in a land of rivers and markets,"
PENALTIES = {"presence_penalty": 1.2, "frequency_penalty": 0.6, "repetition_penalty": 1.4, "logit_bias": {7: 3.0, 9: -100.0}}


def test_greedy_penalties_are_honoured_and_speculation_reproduces_them(verify_client):
    common = {"max_tokens": 40, "temperature": 0.0, "ignore_eos": True}
    plain = verify_client.generate(PROMPT, speculative=False, **common)
    reference = verify_client.generate(PROMPT, speculative=False, **common, **PENALTIES)
    drafted = verify_client.generate(PROMPT, **common, **PENALTIES)
    assert reference.token_ids != plain.token_ids and 9 not in reference.token_ids
    assert drafted.token_ids == reference.token_ids
    assert drafted.summary.draft_tokens > 0 and not drafted.summary.fallback


def test_coupled_penalties_match_speculation_off(verify_client):
    common = {"max_tokens": 30, "temperature": 0.9, "seed": 21, "ignore_eos": True, **PENALTIES}
    off = verify_client.generate(PROMPT, speculative=False, **common)
    coupled = verify_client.generate(PROMPT, acceptance="coupled", **common)
    assert coupled.token_ids == off.token_ids and coupled.summary.draft_tokens > 0


@pytest.fixture
def self_drafting_client(make_draft_server, make_verify_server, tiny_target):
    """A verify service whose draft service drafts with the target itself: a draft in sync with the
    committed tokens (and the request's penalties) is then accepted every time."""
    draft = make_draft_server(ModelDrafter(tiny_target.model), tiny_target)
    verify = make_verify_server(tiny_target, f"127.0.0.1:{draft.port}")
    with VerifyClient(f"127.0.0.1:{verify.port}") as client:
        yield client


def test_the_draft_service_applies_the_penalties_to_its_q(self_drafting_client):
    result = self_drafting_client.generate(PROMPT, max_tokens=30, temperature=0.0, ignore_eos=True, **PENALTIES)
    assert result.summary.draft_tokens > 0 and result.summary.acceptance_rate == 1.0


def test_logit_bias_outside_the_vocabulary_is_invalid_argument_naming_it(verify_client, tiny_target):
    with pytest.raises(grpc.RpcError) as caught:
        verify_client.generate(PROMPT, max_tokens=4, logit_bias={tiny_target.vocab_size: 1.0})
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("options.penalties.logit_bias: ")


@pytest.mark.parametrize("field,value", [("presence_penalty", 2.5), ("repetition_penalty", 0.0)])
def test_penalties_out_of_range_are_invalid_argument_naming_them(verify_client, field, value):
    with pytest.raises(grpc.RpcError) as caught:
        verify_client.generate(PROMPT, max_tokens=4, **{field: value})
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith(f"options.penalties.{field}: ")


@pytest.fixture(scope="module")
def words(tiny_target):
    """Greedy settings whose output re-tokenizes to itself (see whole_word_bias)."""
    return {"max_tokens": 60, "temperature": 0.0, "ignore_eos": True, "logit_bias": whole_word_bias(tiny_target.tokenizer)}


@pytest.fixture(scope="module")
def reference(verify_client, words):
    return verify_client.generate(PROMPT, speculative=False, **words)


def test_an_exact_prediction_is_accepted_and_reported(verify_client, reference, words):
    result = verify_client.generate(PROMPT, prediction=reference.text, **words)
    assert result.token_ids == reference.token_ids
    usage, summary = result.usage, result.summary
    # Every token was predicted and kept but the first (round 0 never drafts) and the one the target adds
    # after each block.
    assert usage.accepted_prediction_tokens == 60 - 1 - summary.rounds and usage.rejected_prediction_tokens == 0
    assert summary.rounds <= 4  # blocks of up to 16 predicted tokens, not K=5 drafted ones


def test_a_prediction_that_runs_out_hands_over_to_the_draft_service_mid_request(self_drafting_client, reference, words):
    # The draft stream opens only after the predicted rounds: it must catch up on the tokens committed
    # meanwhile, or its blocks (the target's own choices after another sequence) would be rejected.
    head = reference.text[: len(reference.text) // 2]
    result = self_drafting_client.generate(PROMPT, prediction=head, **words)
    assert result.token_ids == reference.token_ids
    summary, usage = result.summary, result.usage
    assert not summary.fallback and usage.accepted_prediction_tokens >= 20
    predicted = usage.accepted_prediction_tokens + usage.rejected_prediction_tokens
    drafted = summary.draft_tokens - predicted  # by the draft service
    assert drafted > 0 and summary.accepted_tokens - usage.accepted_prediction_tokens == drafted


def test_coupled_with_an_edited_prediction_matches_speculation_off(verify_client, words):
    common = {**words, "max_tokens": 40, "temperature": 0.8, "seed": 3}
    off = verify_client.generate(PROMPT, speculative=False, **common)
    edited = off.text.replace(off.text.split()[5], "river", 1)
    result = verify_client.generate(PROMPT, acceptance="coupled", prediction=edited, **common)
    assert result.token_ids == off.token_ids
    assert result.usage.accepted_prediction_tokens >= 20 and result.usage.rejected_prediction_tokens > 0
