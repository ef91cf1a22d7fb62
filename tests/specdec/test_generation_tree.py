"""Tree verification in process on the tiny pair: token-identical to target-only, exact caches,
and at least the chain's accepted length."""

from __future__ import annotations

import pytest
import torch
from generation_support import run as _run
from pydantic import ValidationError

from specdec.drafters import ModelDrafter, layer_skip_drafter
from specdec.drafters.base import DraftBlock, DraftRequest
from specdec.enums import AcceptanceMode
from specdec.kv_cache import CachedSequence
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams
from specdec.target_session import TargetSession
from specdec.tree import TreeShape, check_parents, tree_depth

GREEDY = SamplingParams(temperature=0)
TREE = {"tree_branching": 2, "tree_nodes": 10}


@pytest.mark.parametrize("method", ["model", "layer_skip", "ngram"])
@pytest.mark.parametrize(("num_draft_tokens", "branching", "nodes"), [(1, 3, 3), (3, 2, 6), (5, 3, 12)])
def test_greedy_tree_equals_greedy_target_only(tiny_target, drafters, prompt_ids, method, num_draft_tokens, branching, nodes):
    reference = _run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False)
    result = _run(
        tiny_target,
        drafters[method],
        prompt_ids,
        sampling=GREEDY,
        num_draft_tokens=num_draft_tokens,
        tree_branching=branching,
        tree_nodes=nodes,
    )
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_tokens > 0


@pytest.mark.parametrize("temperature", [0.7, 1.0])
@pytest.mark.parametrize("seed", [0, 12345])
def test_coupled_tree_is_token_identical_to_target_only(tiny_target, drafters, prompt_ids, temperature, seed):
    sampling = SamplingParams(temperature=temperature)
    reference = _run(tiny_target, None, prompt_ids, sampling=sampling, seed=seed, speculative=False)
    for drafter in drafters.values():
        result = _run(tiny_target, drafter, prompt_ids, sampling=sampling, seed=seed, acceptance="coupled", num_draft_tokens=4, **TREE)
        assert result.token_ids == reference.token_ids


def test_the_model_drafter_proposes_a_tree_within_its_shape(tiny_draft, prompt_ids):
    request = DraftRequest(
        prompt_ids, SamplingParams(temperature=1.0), AcceptanceMode.COUPLED, seed=3, vocab_size=tiny_draft.vocab_size, tree=TreeShape(3, 9)
    )
    session = ModelDrafter(tiny_draft.model).open(request)
    block = session.propose(4)
    check_parents(block.tree_parents)
    assert len(block) == 9 and tree_depth(block.tree_parents) == 4 == block.depth
    assert max(block.tree_parents.count(parent) for parent in set(block.tree_parents)) <= 3
    chain = ModelDrafter(tiny_draft.model).open(request.__class__(**{**request.__dict__, "tree": None})).propose(4)
    main_chain, node = [], -1  # first child of first child ...: the chain drafter's block
    while (node := next((n for n, p in enumerate(block.tree_parents) if p == node), None)) is not None:
        main_chain.append(int(block.candidate_ids[node]))
    assert main_chain == chain.candidate_ids.tolist()
    session.close()


def test_both_caches_hold_exactly_the_accepted_path(tiny_target, tiny_draft, prompt_ids):
    """After a tree round the target's and the draft's caches equal a fresh prefill of the committed text."""
    request = GenerationRequest(prompt_ids=prompt_ids, max_tokens=40, sampling=GREEDY, num_draft_tokens=4, **TREE)
    target = TargetSession(tiny_target, request)
    draft_model = layer_skip_drafter(tiny_target.model, 3).model
    draft = ModelDrafter(draft_model).open(
        DraftRequest(list(prompt_ids), GREEDY, AcceptanceMode.GREEDY, seed=0, vocab_size=tiny_target.vocab_size, tree=request.tree)
    )
    for _ in range(3):
        block = draft.propose(4)
        verdict, _chunk = target.step(block)
        draft.feedback(verdict.num_accepted, [verdict.next_token_id], verdict.accepted_nodes)
        assert target.lm.tree_parents is None and target.lm.cached_ids == target.committed[:-1]
        expected = CachedSequence(tiny_target.model).advance(target.committed)[-1]
        torch.testing.assert_close(target.lm.advance(target.committed)[-1], expected)
    draft.propose(1)  # keeps the accepted path, then drafts one depth (no tree pass: the deepest nodes are never fed)
    committed = draft.committed.token_ids
    assert draft.lm.tree_parents is None and draft.lm.cached_ids == committed
    torch.testing.assert_close(draft.lm.advance(committed)[-1], CachedSequence(draft_model).advance(committed)[-1])
    target.close()
    draft.close()


def test_a_tree_accepts_more_per_round_than_the_chain_at_the_same_k(tiny_target, drafters, prompt_ids):
    """Deterministic (greedy / coupled with a seed): the tree holds the chain, and branches rescue rounds.

    A one-layer layer-skip draft is a weak drafter, so its runners-up matter.
    """
    drafter = layer_skip_drafter(tiny_target.model, 1)
    for fields in ({"sampling": GREEDY}, {"sampling": SamplingParams(temperature=1.0), "acceptance": "coupled", "seed": 5}):
        chain = _run(tiny_target, drafter, prompt_ids, num_draft_tokens=4, max_tokens=60, **fields).stats
        tree = _run(tiny_target, drafter, prompt_ids, num_draft_tokens=4, max_tokens=60, tree_branching=3, tree_nodes=16, **fields).stats
        assert tree.accepted_tokens / tree.rounds > chain.accepted_tokens / chain.rounds
        assert tree.rounds < chain.rounds


def test_trees_with_rejection_acceptance_are_refused_naming_the_fields(prompt_ids):
    with pytest.raises(ValidationError, match="acceptance=rejection cannot verify a token tree"):
        GenerationRequest(prompt_ids=prompt_ids, sampling=SamplingParams(temperature=0.8), acceptance="rejection", **TREE)
    # At temperature 0 the request is greedy whatever it names; without speculation nothing is verified.
    assert GenerationRequest(prompt_ids=prompt_ids, sampling=GREEDY, acceptance="rejection", **TREE).tree == TreeShape(2, 10)
    GenerationRequest(prompt_ids=prompt_ids, sampling=SamplingParams(temperature=0.8), speculative=False, **TREE)


def test_a_chain_block_in_a_tree_session_is_verified_as_a_chain(tiny_target, prompt_ids):
    target = TargetSession(tiny_target, GenerationRequest(prompt_ids=prompt_ids, sampling=GREEDY, **TREE))
    verdict, _ = target.step(DraftBlock(torch.tensor([5, 6])))
    assert verdict.accepted_nodes is None
    target.close()
