"""Prompt lookup first, then the draft model: which source drafts each block, and staying in sync."""

from __future__ import annotations

import pytest
import torch

from specdec.drafters import DraftRequest, ModelDrafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.enums import AcceptanceMode
from specdec.sampling import SamplingParams
from specdec.tree import TreeShape

REPEATING = [5, 6, 7, 8, 9, 5, 6]  # "5 6" occurred before, followed by 7 8 9
NO_REPEAT = [5, 6, 7, 8, 9, 10, 11]


def _request(prompt_ids, acceptance=AcceptanceMode.GREEDY, **fields) -> DraftRequest:
    return DraftRequest(list(prompt_ids), SamplingParams(temperature=0), acceptance, seed=0, vocab_size=64, **fields)


@pytest.fixture(scope="module")
def model_drafter(tiny_draft):
    return ModelDrafter(tiny_draft.model)


def test_a_match_proposes_the_looked_up_continuation_with_point_mass_q(model_drafter):
    session = PromptLookupDrafter(model_drafter, LookupSettings(min_ngram=2)).open(_request(REPEATING, AcceptanceMode.REJECTION))
    block = session.propose(3)
    assert block.candidate_ids.tolist() == [7, 8, 9]
    assert torch.equal(block.draft_probs.probs, torch.ones(3, 1, dtype=torch.float64))
    assert block.draft_probs.token_ids.flatten().tolist() == [7, 8, 9]
    greedy = PromptLookupDrafter(model_drafter, LookupSettings(min_ngram=2)).open(_request(REPEATING)).propose(3)
    assert greedy.candidate_ids.tolist() == [7, 8, 9] and greedy.draft_probs is None  # q only where the rule reads it


def test_without_a_match_the_model_drafts_at_most_model_tokens(model_drafter):
    lookup = PromptLookupDrafter(model_drafter, LookupSettings(min_ngram=2, model_tokens=1))
    block = lookup.open(_request(NO_REPEAT)).propose(3)
    alone = model_drafter.open(_request(NO_REPEAT)).propose(1)
    assert block.candidate_ids.tolist() == alone.candidate_ids.tolist()
    assert len(block) == 1


def test_min_ngram_decides_what_counts_as_a_match(model_drafter):
    prompt = [5, 6, 7, 8, 9, 10, 6]  # only the 1-gram "6" occurred before
    assert PromptLookupDrafter(model_drafter, LookupSettings(min_ngram=1)).open(_request(prompt)).propose(2).candidate_ids.tolist() == [
        7,
        8,
    ]
    model_block = model_drafter.open(_request(prompt)).propose(2)
    assert (
        PromptLookupDrafter(model_drafter, LookupSettings(min_ngram=2)).open(_request(prompt)).propose(2).candidate_ids.tolist()
        == model_block.candidate_ids.tolist()
    )


def test_model_blocks_after_looked_up_rounds_equal_a_fresh_sessions(model_drafter):
    """The model's cache catches up on looked-up tokens: its next block is the one a new session drafts."""
    session = PromptLookupDrafter(model_drafter, LookupSettings(min_ngram=2)).open(_request(REPEATING))
    assert session.propose(2).candidate_ids.tolist() == [7, 8]
    session.feedback(1, [30])  # kept 7, the target appended 30: no earlier "7 30" or "30"
    assert session.committed.token_ids == [*REPEATING, 7, 30]
    block = session.propose(2)
    fresh = model_drafter.open(_request([*REPEATING, 7, 30])).propose(2)
    assert block.candidate_ids.tolist() == fresh.candidate_ids.tolist()
    session.close()


def test_tree_requests_are_drafted_by_the_model_alone(model_drafter):
    request = _request(REPEATING, tree=TreeShape(branching=2, max_nodes=4))
    block = PromptLookupDrafter(model_drafter, LookupSettings(min_ngram=1)).open(request).propose(2)
    assert block.tree_parents is not None  # a model tree, not the looked-up chain


def test_settings_are_checked():
    with pytest.raises(ValueError, match="min_ngram"):
        LookupSettings(min_ngram=3, max_ngram=2)
    with pytest.raises(ValueError, match="model_tokens"):
        LookupSettings(model_tokens=0)
