"""GenerationRequest validation and the acceptance rule it resolves to."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specdec.enums import AcceptanceMode
from specdec.request import GenerationRequest, GenerationStats
from specdec.sampling import SamplingParams


def test_temperature_zero_always_verifies_greedily():
    request = GenerationRequest(prompt_ids=[1], sampling=SamplingParams(temperature=0), acceptance="rejection")
    assert request.effective_acceptance is AcceptanceMode.GREEDY


def test_target_only_decoding_uses_the_coupled_reference():
    request = GenerationRequest(prompt_ids=[1], acceptance="rejection", speculative=False)
    assert request.effective_acceptance is AcceptanceMode.COUPLED
    assert GenerationRequest(prompt_ids=[1], acceptance="rejection").effective_acceptance is AcceptanceMode.REJECTION


@pytest.mark.parametrize("field,value", [("prompt_ids", []), ("max_tokens", 0), ("num_draft_tokens", 0), ("seed", -1), ("draft_top_k", 0)])
def test_invalid_fields_are_named(field, value):
    with pytest.raises(ValidationError, match=field):
        GenerationRequest(**{"prompt_ids": [1], field: value})


def test_unseeded_requests_get_distinct_random_seeds():
    assert GenerationRequest(prompt_ids=[1]).seed != GenerationRequest(prompt_ids=[1]).seed


def test_stats_per_position_acceptance():
    stats = GenerationStats()
    stats.record_round(3, 1)
    stats.record_round(2, 2)
    assert stats.proposed_per_position == [2, 2, 1] and stats.accepted_per_position == [2, 1, 0]
    assert stats.as_dict()["acceptance_by_position"] == [1.0, 0.5, 0.0]
    assert stats.acceptance_rate == pytest.approx(3 / 5)


def test_greedy_acceptance_at_positive_temperature_is_refused():
    with pytest.raises(ValidationError, match="acceptance=greedy"):
        GenerationRequest(prompt_ids=[1], sampling=SamplingParams(temperature=0.5), acceptance="greedy")
