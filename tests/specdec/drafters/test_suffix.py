"""Suffix decoding: what the trees propose, whose outputs they learn from, and staying in sync with a model drafter."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specdec.drafters import DraftRequest, ModelDrafter
from specdec.drafters.base import DraftBlock
from specdec.drafters.suffix import SuffixDrafter, fit_tree
from specdec.drafters.suffix_cache import SuffixTrees
from specdec.enums import AcceptanceMode, TokenSource
from specdec.errors import DraftUnavailableError
from specdec.sampling import SamplingParams
from specdec.serving.config import SuffixSection
from specdec.tree import TreeShape, check_parents, node_depths

PROMPT = [1, 2, 3]
ANSWER = [10, 11, 12, 13, 14, 15, 16, 17]  # an earlier request's output


def _settings(**fields):
    return dataclasses.replace(SuffixSection().settings(), **fields)


def _request(prompt_ids, acceptance=AcceptanceMode.GREEDY, scope="", **fields) -> DraftRequest:
    return DraftRequest(list(prompt_ids), SamplingParams(temperature=0), acceptance, seed=0, vocab_size=64, draft_scope=scope, **fields)


def _answer(drafter, prompt_ids, answer, scope=""):
    """One finished request that generated `answer` (token by token, as target-only rounds do)."""
    session = drafter.open(_request(prompt_ids, scope=scope))
    for token in answer:
        session.propose(0)
        session.feedback(0, [token])
    session.close()


def test_an_earlier_output_drafts_its_continuation_with_point_mass_q():
    drafter = SuffixDrafter(SuffixTrees(_settings()))
    _answer(drafter, PROMPT, ANSWER)
    session = drafter.open(_request([7, 8, 10, 11, 12], AcceptanceMode.REJECTION))
    block = session.propose(4)
    assert block.candidate_ids.tolist() == [13, 14, 15]  # at most max_spec_factor (1.0) x the 3 matched tokens
    assert block.candidate_sources() == [TokenSource.SUFFIX] * 3
    assert torch.equal(block.draft_probs.probs, torch.ones(3, 1, dtype=torch.float64))
    greedy = drafter.open(_request([7, 8, 10, 11, 12])).propose(4)
    assert greedy.candidate_ids.tolist() == [13, 14, 15] and greedy.draft_probs is None  # q only where the rule reads it


def test_the_block_length_follows_the_match_and_the_round_budget():
    drafter = SuffixDrafter(SuffixTrees(_settings(max_spec_factor=2.0)))
    _answer(drafter, PROMPT, ANSWER)
    session = drafter.open(_request([7, 10, 11]))
    assert session.propose(8).candidate_ids.tolist() == [12, 13, 14, 15]  # 2 x 2 matched
    assert drafter.open(_request([7, 10, 11])).propose(1).candidate_ids.tolist() == [12]


def test_one_keys_outputs_never_draft_for_another_unless_widened():
    drafter = SuffixDrafter(SuffixTrees(_settings()))
    _answer(drafter, PROMPT, ANSWER, scope="key-a")
    assert len(drafter.open(_request([10, 11, 12], scope="key-b")).propose(4)) == 0
    assert drafter.open(_request([10, 11, 12], scope="key-a")).propose(4).candidate_ids.tolist()[:2] == [13, 14]
    shared = SuffixDrafter(SuffixTrees(_settings(per_key=False)))
    _answer(shared, PROMPT, ANSWER, scope="key-a")
    assert shared.open(_request([10, 11, 12], scope="key-b")).propose(4).candidate_ids.tolist()[:2] == [13, 14]


def test_the_trees_are_bounded_in_outputs_and_scopes():
    trees = SuffixTrees(_settings(max_cached_requests=2, max_scopes=2))
    drafter = SuffixDrafter(trees)
    for offset in (0, 20, 40):
        _answer(drafter, PROMPT, [token + offset for token in ANSWER], scope="a")
    assert trees.cached_outputs() == 2
    # NOTE: an open request holds one of the max_cached_requests slots (its output joins the tree as it grows).
    assert drafter.open(_request([50, 51, 52], scope="a")).propose(4).candidate_ids.tolist()[:1] == [53]
    assert len(drafter.open(_request([10, 11, 12], scope="a")).propose(4)) == 0  # the oldest were evicted
    _answer(drafter, PROMPT, ANSWER, scope="b")
    _answer(drafter, PROMPT, ANSWER, scope="c")  # "a" is dropped: used longest ago
    assert trees.scopes() == 2
    assert len(drafter.open(_request([50, 51, 52], scope="a")).propose(4)) == 0


def test_the_output_bound_holds_over_all_scopes_together():
    trees = SuffixTrees(_settings(max_cached_requests=2, max_scopes=8))
    drafter = SuffixDrafter(trees)
    _answer(drafter, PROMPT, ANSWER, scope="a")
    _answer(drafter, PROMPT, [token + 20 for token in ANSWER], scope="b")
    assert trees.cached_outputs() == 2
    _answer(drafter, PROMPT, [token + 40 for token in ANSWER], scope="c")  # "a", used longest ago, gives up its output
    assert trees.cached_outputs() == 2
    assert drafter.open(_request([30, 31, 32], scope="b")).propose(4).candidate_ids.tolist()[:1] == [33]
    assert len(drafter.open(_request([10, 11, 12], scope="a")).propose(4)) == 0
    assert trees.cached_outputs() <= 2


def test_the_requests_own_prompt_and_output_draft_too():
    session = SuffixDrafter(SuffixTrees(_settings())).open(_request([4, 5, 6, 7, 8, 4, 5]))
    assert session.propose(4).candidate_ids.tolist() == [6, 7]


@pytest.fixture(scope="module")
def model_drafter(tiny_draft):
    return ModelDrafter(tiny_draft.model)


def test_without_a_confident_match_the_model_drafts_at_most_its_tokens(model_drafter):
    drafter = SuffixDrafter(SuffixTrees(_settings(min_score=3.5)), model_drafter, inner_tokens=2)
    _answer(drafter, PROMPT, ANSWER)
    prompt = [7, 8, 10, 11, 12]  # a 3-token match: a block of 3, expected accepted 3 < 3.5
    block = drafter.open(_request(prompt)).propose(6)
    assert block.candidate_ids.tolist() == model_drafter.open(_request(prompt)).propose(2).candidate_ids.tolist()
    assert block.candidate_sources() == [TokenSource.DRAFT] * 2
    confident = drafter.open(_request([7, 10, 11, 12, 13])).propose(6)  # 4 matched: expected 4 accepted
    assert confident.candidate_ids.tolist() == [14, 15, 16, 17]


def test_model_blocks_after_suffix_rounds_equal_a_fresh_sessions(model_drafter):
    drafter = SuffixDrafter(SuffixTrees(_settings(min_score=1.0)), model_drafter, inner_tokens=3)
    _answer(drafter, PROMPT, ANSWER)
    session = drafter.open(_request([7, 10, 11, 12]))
    assert session.propose(4).candidate_ids.tolist() == [13, 14, 15]
    session.feedback(1, [40])  # kept 13, the target appended 40: nothing continues "13 40"
    assert session.committed.token_ids == [7, 10, 11, 12, 13, 40]
    block = session.propose(3)
    assert block.candidate_sources() == [TokenSource.DRAFT] * 3
    assert block.candidate_ids.tolist() == model_drafter.open(_request([7, 10, 11, 12, 13, 40])).propose(3).candidate_ids.tolist()
    session.close()


class _FailingSession:
    def __init__(self, request) -> None:
        from specdec.drafters.base import CommittedSequence

        self.committed = CommittedSequence(list(request.prompt_ids))

    def propose(self, num_tokens):
        raise DraftUnavailableError("the draft service is gone")

    def feedback(self, *args):
        raise DraftUnavailableError("the draft service is gone")

    def close(self):
        pass


class _FailingDrafter:
    name = "failing"

    def open(self, request):
        return _FailingSession(request)


def test_a_failing_model_leaves_the_trees_drafting_alone():
    drafter = SuffixDrafter(SuffixTrees(_settings(min_score=100)), _FailingDrafter(), inner_tokens=2)
    _answer(SuffixDrafter(drafter.trees), PROMPT, ANSWER)
    session = drafter.open(_request([7, 10, 11, 12]))
    # Not confident: the model's turn; it failed, so the match below min_score drafts the round after all.
    assert session.propose(4).candidate_ids.tolist() == [13, 14, 15]
    assert not session.inner.alive
    session.feedback(3, [16])
    assert session.propose(4).candidate_ids.tolist() == [17]  # the trees alone from now on


def test_tree_requests_alone_get_a_tree_that_fits_the_shape():
    drafter = SuffixDrafter(SuffixTrees(_settings(per_key=False)))
    _answer(drafter, PROMPT, [10, 11, 12, 13, 14])
    _answer(drafter, PROMPT, [10, 11, 20, 21, 22])
    shape = TreeShape(branching=2, max_nodes=8)
    block = drafter.open(_request([7, 10, 11], tree=shape)).propose(3)
    assert block.tree_parents is not None and block.draft_probs is None
    check_parents(block.tree_parents)
    assert max(node_depths(block.tree_parents)) <= 3 and len(block) <= 8
    assert {12, 20} <= set(block.candidate_ids.tolist())


def test_tree_requests_with_a_model_are_the_models(model_drafter):
    drafter = SuffixDrafter(SuffixTrees(_settings()), model_drafter, inner_tokens=2)
    _answer(drafter, PROMPT, ANSWER)
    block = drafter.open(_request([10, 11, 12], tree=TreeShape(branching=2, max_nodes=4))).propose(2)
    assert TokenSource.SUFFIX not in block.candidate_sources()


def test_fit_tree_drops_nodes_too_deep_or_past_the_branching():
    # 0 and 1 under the root, 2 under 0, 3 and 4 under 2, 5 under 1, 6 a third root child
    token_ids, parents = fit_tree([10, 11, 12, 13, 14, 15, 16], [-1, -1, 0, 2, 2, 1, -1], branching=2, depth=2)
    assert token_ids == [10, 11, 12, 15]
    assert parents == [-1, -1, 0, 1]


def test_an_empty_block_when_nothing_matches():
    block = SuffixDrafter(SuffixTrees(_settings())).open(_request([1, 2, 3])).propose(4)
    assert isinstance(block, DraftBlock) and len(block) == 0
