"""Tree acceptance walks down the tree along the target's own choices; tree helpers."""

from __future__ import annotations

import pytest
import torch

from specdec.acceptance import accept_tree_path, coupled_accept, coupled_tree_accept, greedy_accept, greedy_tree_accept
from specdec.errors import InvalidRequestError
from specdec.noise import keyed_gumbel
from specdec.tree import ancestor_mask, chain_parents, check_parents, check_root_path, node_depths, tree_depth

# node:        0   1   2   3   4   5
NODE_IDS = torch.tensor([10, 20, 11, 12, 21, 13])
PARENTS = [-1, -1, 0, 0, 1, 3]


def _choices(after_root: int, after_node: dict[int, int]) -> torch.Tensor:  # [n + 1]
    return torch.tensor([after_root] + [after_node.get(node, 99) for node in range(len(PARENTS))])


def test_walks_the_branch_the_target_chooses_then_appends_its_choice():
    verdict = accept_tree_path(NODE_IDS, PARENTS, _choices(10, {0: 12, 3: 13, 5: 7}))
    assert verdict.accepted_nodes == [0, 3, 5]
    assert verdict.accepted_ids == [10, 12, 13]
    assert verdict.next_token_id == 7  # the bonus after the deepest accepted node
    assert verdict.num_candidates == 6 and verdict.accepted_path == [0, 3, 5]


def test_second_root_child_and_a_mismatch_below_it():
    verdict = accept_tree_path(NODE_IDS, PARENTS, _choices(20, {1: 5}))
    assert verdict.accepted_nodes == [1] and verdict.token_ids == [20, 5]


def test_no_child_matches_the_target_choice():
    verdict = accept_tree_path(NODE_IDS, PARENTS, _choices(30, {}))
    assert verdict.accepted_nodes == [] and verdict.token_ids == [30]


def test_a_chain_tree_gives_the_chain_verdict():
    candidate_ids = torch.tensor([4, 5, 6, 7])
    target_probs = torch.softmax(torch.randn(5, 16, generator=torch.Generator().manual_seed(3)), -1)
    target_probs[0, 4] = target_probs[1, 5] = 5.0  # the first two candidates are the target's argmax
    chain, tree = greedy_accept(candidate_ids, target_probs), greedy_tree_accept(candidate_ids, chain_parents(4), target_probs)
    assert tree.token_ids == chain.token_ids and tree.accepted_path == chain.accepted_path == [0, 1]
    gumbel = keyed_gumbel(7, torch.arange(10, 15), 16)
    coupled_chain = coupled_accept(candidate_ids, target_probs, gumbel)
    assert coupled_tree_accept(candidate_ids, chain_parents(4), target_probs, gumbel).token_ids == coupled_chain.token_ids


def test_coupled_tree_emits_the_target_only_tokens():
    """Whatever branch is accepted, each emitted token is argmax(log p + noise) of its own row."""
    vocab = 32
    target_probs = torch.softmax(torch.randn(len(PARENTS) + 1, vocab, generator=torch.Generator().manual_seed(1)), -1).double()
    positions = torch.tensor([50] + [50 + depth for depth in node_depths(PARENTS)])
    gumbel = keyed_gumbel(11, positions, vocab)
    choices = (target_probs.log() + gumbel).argmax(-1)
    node_ids = NODE_IDS.clone()
    node_ids[1] = choices[0]  # the target's first choice is root child 1
    node_ids[4] = choices[2]  # and its second is node 4, below it
    verdict = coupled_tree_accept(node_ids, PARENTS, target_probs, gumbel)
    assert verdict.accepted_nodes == [1, 4]
    assert verdict.token_ids == [int(choices[0]), int(choices[2]), int(choices[5])]


def test_tree_helpers():
    assert node_depths(PARENTS) == [1, 1, 2, 2, 2, 3] and tree_depth(PARENTS) == 3 and tree_depth([]) == 0
    mask = ancestor_mask(PARENTS)
    assert mask[5].tolist() == [True, False, False, True, False, True]
    assert mask[1].tolist() == [False, True, False, False, False, False]
    assert chain_parents(3) == [-1, 0, 1]
    check_parents(PARENTS)
    with pytest.raises(InvalidRequestError, match="node 2 has parent 2"):
        check_parents([-1, 0, 2])
    check_root_path(PARENTS, [0, 3, 5])
    check_root_path(PARENTS, [])
    for bad in ([3], [0, 4], [1, 4, 5], [9]):
        with pytest.raises(ValueError, match="not a path from the root"):
            check_root_path(PARENTS, bad)
