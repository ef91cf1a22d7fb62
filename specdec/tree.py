"""Token trees: the shape a drafter grows, and the structure the target's tree-masked pass needs.

A tree of n draft nodes is given by `parents`: parents[i] is the index of node i's parent among
the nodes, or -1 when node i follows the last committed token directly (a root child). Nodes are
listed parents first (parents[i] < i), so a chain of k candidates is parents = [-1, 0, ..., k-2].
A node's depth is 1 for root children; it sits at absolute position (committed length - 1 + depth)
and attends to the committed prefix plus its ancestors and itself, never to its siblings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec.errors import InvalidRequestError


@dataclass(frozen=True)
class TreeShape:
    """How big a tree a drafter may grow per round: `branching` children per node, `max_nodes` in all.

    The depth is the round's K (the `num_tokens` of propose), as for a chain.
    """

    branching: int
    max_nodes: int


def chain_parents(num_nodes: int) -> list[int]:
    """The parents of a chain: each node the child of the one before."""
    return list(range(-1, num_nodes - 1))


def node_depths(parents: Sequence[int]) -> list[int]:
    """Depth of each node: 1 for a root child, parent's depth + 1 otherwise."""
    depths: list[int] = []
    for parent in parents:
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def ancestor_mask(parents: Sequence[int], device: torch.device | None = None) -> torch.Tensor:  # [n, n] bool
    """mask[i, j] is True when node j is node i or one of its ancestors (what node i may attend to)."""
    num_nodes = len(parents)
    mask = torch.eye(num_nodes, dtype=torch.bool)
    for node, parent in enumerate(parents):
        if parent >= 0:
            mask[node] |= mask[parent]  # NOTE: parents come first, so mask[parent] is complete here
    return mask.to(device) if device is not None else mask


def check_parents(parents: Sequence[int], field: str = "block.parent_indices") -> None:
    """Refuse anything that is not a tree listed parents first."""
    for node, parent in enumerate(parents):
        if not -1 <= parent < node:
            raise InvalidRequestError(field, f"node {node} has parent {parent}; each parent must be -1 or an earlier node")


def tree_depth(parents: Sequence[int]) -> int:
    return max(node_depths(parents), default=0)


def check_root_path(parents: Sequence[int], path: Sequence[int]) -> None:
    """Refuse `path` unless it is a path of nodes from the root down (what feedback may accept)."""
    previous = -1
    for node in path:
        if not 0 <= node < len(parents) or parents[node] != previous:
            raise ValueError(f"accepted nodes {list(path)} are not a path from the root of the last tree")
        previous = node
