"""Tree-masked packed passes: each node scored as if its root path were a plain sequence, and the
cache after keeping one path equal to a fresh prefill of that path."""

from __future__ import annotations

import pytest
import torch

from specdec.batching import default_runner
from specdec.batching.packed_forward import PackedRow, _attention_mask, _positions
from specdec.errors import SpecdecError
from specdec.kv_cache import CachedSequence

PREFIX = [5 + (7 * index) % 200 for index in range(9)]
# node:        0   1   2   3   4   5   6
NODE_IDS = [11, 12, 13, 14, 15, 16, 17]
PARENTS = [-1, -1, 0, 0, 1, 2, 5]


def _root_path(node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = PARENTS[node]
    return path[::-1]


def _ids(path: list[int]) -> list[int]:
    return [NODE_IDS[node] for node in path]


@pytest.fixture(scope="module")
def tiny_target64(tiny_pair_paths):
    from specdec.engines.hf import load_model

    return load_model(tiny_pair_paths.target, device="cpu", dtype="float64")


def _fresh_logits(model, sequence: list[int]) -> torch.Tensor:  # [vocab]
    return CachedSequence(model).advance(sequence)[-1]


def test_mask_and_positions_of_a_tree_after_a_causal_token(tiny_target64):
    runner = default_runner(tiny_target64.model)
    kv = runner.open_sequence(32).kv
    row = PackedRow(kv, [7, 11, 12, 13], start=4, num_logits=4, tree_parents=[-1, -1, 0])
    assert _positions(row).tolist() == [4, 5, 5, 6]  # the causal token, two root children, a grandchild
    mask = _attention_mask(row)
    assert mask.shape == (4, 8)
    assert mask[0].tolist() == [True] * 5 + [False] * 3
    assert mask[1].tolist() == [True] * 6 + [False, False]
    assert mask[2].tolist() == [True] * 5 + [False, True, False]  # not its sibling
    assert mask[3].tolist() == [True] * 6 + [False, True]  # its parent and itself


def test_every_node_is_scored_as_its_root_path(tiny_target64):
    model = tiny_target64.model
    sequence = default_runner(model).open_sequence(64)
    logits = sequence.advance_tree(PREFIX, NODE_IDS, PARENTS)
    assert logits.shape[0] == len(NODE_IDS) + 1
    torch.testing.assert_close(logits[0], _fresh_logits(model, PREFIX))
    for node in range(len(NODE_IDS)):
        torch.testing.assert_close(logits[node + 1], _fresh_logits(model, PREFIX + _ids(_root_path(node))))


@pytest.mark.parametrize("accepted", [[], [1], [0, 2, 5], [0, 2, 5, 6]])
def test_cache_after_keeping_a_path_equals_a_fresh_prefill(tiny_target64, accepted):
    model = tiny_target64.model
    sequence = default_runner(model).open_sequence(64)
    sequence.advance(PREFIX + [3, 4])  # an earlier round, rolled back by the tree pass
    sequence.advance_tree(PREFIX, NODE_IDS, PARENTS)
    sequence.keep_path(accepted)
    accepted_ids = _ids(accepted)
    assert sequence.cached_ids == PREFIX + accepted_ids
    assert sequence.kv.length == len(PREFIX) + len(accepted)
    follow = PREFIX + accepted_ids + [42]
    torch.testing.assert_close(sequence.advance(follow)[-1], _fresh_logits(model, follow))


def test_growing_a_tree_depth_by_depth_matches_one_pass(tiny_target64):
    """The drafter's way: one pass per depth, each frontier one row over the cached tree."""
    model = tiny_target64.model
    sequence = default_runner(model).open_sequence(8)  # small: the cache grows on demand
    sequence.advance(PREFIX)
    depth_one = sequence.grow_tree(NODE_IDS[:2], PARENTS[:2])
    depth_two = sequence.grow_tree(NODE_IDS[2:5], PARENTS[2:5])
    depth_three = sequence.grow_tree(NODE_IDS[5:6], PARENTS[5:6])
    grown = torch.cat([depth_one, depth_two, depth_three])
    expected = default_runner(model).open_sequence(64).advance_tree(PREFIX, NODE_IDS[:6], PARENTS[:6])[1:]
    torch.testing.assert_close(grown, expected)
    sequence.keep_path([0, 2, 5, 6])  # node 6 was never fed: the path is kept as far as it is cached
    assert sequence.cached_ids == PREFIX + _ids([0, 2, 5])
    follow = PREFIX + _ids([0, 2, 5, 6])
    torch.testing.assert_close(sequence.advance(follow)[-1], _fresh_logits(model, follow))


def test_a_hugging_face_cache_refuses_trees_naming_the_setting(tiny_target):
    with pytest.raises(SpecdecError, match="verification=tree"):
        CachedSequence(tiny_target.model).advance_tree(PREFIX, NODE_IDS, PARENTS)
