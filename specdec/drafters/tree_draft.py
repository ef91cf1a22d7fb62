"""Growing a token tree with a model drafter: one tree-masked pass per depth, by draft confidence.

Each node's children are its top-`branching` tokens by the drafter's own ranking score: log q
(greedy) or log q + the keyed Gumbel noise of the position (coupled, the noise the target's choice
uses too). The first child of each node is the token a chain drafter would propose there. Shape
(dynamic, documented in docs/configuration.md): the **main chain** (first child of first child ...) always
grows to the round's K, so the tree contains the chain a chain drafter would send and never accepts
fewer tokens than it (greedy and coupled acceptance are deterministic given the prefix); the
remaining node budget goes to the other children with the highest path confidence (product of q
along the path), depth by depth. Every node of a depth is fed in one row of one pass, except the
deepest, which is never fed (nothing is drafted after it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.enums import AcceptanceMode
from specdec.kv_cache import PrefixCache
from specdec.min_tokens import MinTokensMask
from specdec.noise import keyed_gumbel
from specdec.penalties import LogitsTransform, path_rows
from specdec.sampling import SamplingParams, processed_probs
from specdec.tree import TreeShape


@dataclass(frozen=True)
class _Child:
    parent: int  # node index, -1 = the root
    token_id: int
    log_confidence: float  # log of the product of q along the root path
    main: bool  # on the main chain


@dataclass(frozen=True)
class TreeRanking:
    """How a session ranks children: its acceptance mode, sampling and the request's seed."""

    acceptance: AcceptanceMode
    sampling: SamplingParams
    seed: int

    def scores(self, logits: torch.Tensor, first_position: int) -> tuple[torch.Tensor, torch.Tensor]:
        """logits [m, vocab] of m nodes at `first_position`..: (ranking score [m, vocab], log q [m, vocab])."""
        if self.acceptance is AcceptanceMode.COUPLED:
            log_q = torch.log(processed_probs(logits, self.sampling).double())
            positions = torch.arange(first_position, first_position + logits.shape[0], device=logits.device)
            # NOTE: exactly gumbel_argmax's score, so the first child is the chain drafter's choice.
            return log_q + keyed_gumbel(self.seed, positions, logits.shape[-1]), log_q
        # Greedy: processed q is one-hot; the raw softmax ranks the runners-up (its argmax is the same).
        log_q = torch.log_softmax(logits.double(), dim=-1)
        return log_q, log_q


def draft_tree(
    lm: PrefixCache,
    committed: list[int],
    depth_limit: int,
    shape: TreeShape,
    ranking: TreeRanking,
    fit_vocab,
    transform: LogitsTransform | None = None,
    min_tokens: MinTokensMask | None = None,
) -> tuple[list[int], list[int]]:
    """Grow a tree after `committed`: (token id of each node, parent of each node), parents first.

    `transform` (the request's penalties) and `min_tokens` (its ban on EOS) are applied to each
    frontier node's logits from the tokens on its own root path, as the verifier will.
    """
    node_ids: list[int] = []
    parents: list[int] = []
    on_main: list[bool] = []  # per node: on the main chain (first child of first child ...)
    logits = lm.advance(committed)[-1:]  # [1, vocab] after the last committed token
    frontier = [-1]  # the nodes whose children the logits rows are for
    frontier_confidence = [0.0]
    for depth in range(1, depth_limit + 1):
        budget = shape.max_nodes - len(node_ids)
        if budget <= 0:
            break
        scores, log_q = ranking.scores(
            _penalised(fit_vocab(logits), transform, min_tokens, committed, frontier, node_ids, parents), len(committed) + depth - 1
        )
        children = _children(
            scores, log_q, frontier, frontier_confidence, [node < 0 or on_main[node] for node in frontier], shape.branching
        )
        # Room for the main chain's remaining depths first; the rest by confidence.
        chosen = _select(children, budget, reserve=min(depth_limit - depth, budget - 1))
        if not chosen:
            break
        first_new = len(node_ids)
        for child in chosen:
            node_ids.append(child.token_id)
            parents.append(child.parent)
            on_main.append(child.main)
        if depth == depth_limit or len(node_ids) >= shape.max_nodes:
            break
        logits = lm.grow_tree(node_ids[first_new:], parents[first_new:])  # [new, vocab]
        frontier = list(range(first_new, len(node_ids)))
        frontier_confidence = [child.log_confidence for child in chosen]
    return node_ids, parents


def _penalised(
    logits: torch.Tensor,
    transform: LogitsTransform | None,
    min_tokens: MinTokensMask | None,
    committed: list[int],
    frontier: list[int],
    node_ids: list[int],
    parents: list[int],
) -> torch.Tensor:  # [m, vocab]
    """logits [m, vocab] of the frontier nodes (-1: the root), each transformed after committed + its root path."""
    if transform is None and min_tokens is None:
        return logits
    paths = path_rows(parents)[[node + 1 for node in frontier]]  # [m, n]
    if transform is not None:
        logits = transform(logits, committed, node_ids, paths)
    return logits if min_tokens is None else min_tokens(logits, len(committed), paths)


def _children(
    scores: torch.Tensor, log_q: torch.Tensor, frontier: list[int], confidence: list[float], main: list[bool], branching: int
) -> list[_Child]:
    """scores, log_q [m, vocab]: each frontier node's top-`branching` children, best first."""
    top_scores, top_ids = scores.topk(min(branching, scores.shape[-1]), dim=-1)  # [m, b]
    top_log_q = log_q.gather(-1, top_ids)  # [m, b]
    children = []
    for row, parent in enumerate(frontier):
        for rank in range(top_ids.shape[1]):
            if not torch.isfinite(top_scores[row, rank]):
                break  # q = 0 there (top-k / top-p / min-p cut it): never proposed
            children.append(_Child(parent, int(top_ids[row, rank]), confidence[row] + float(top_log_q[row, rank]), main[row] and rank == 0))
    return children


def _select(children: list[_Child], budget: int, reserve: int) -> list[_Child]:
    main = [child for child in children if child.main]
    others = sorted((child for child in children if not child.main), key=lambda child: -child.log_confidence)
    chosen = main[:1] + others[: max(0, budget - len(main[:1]) - reserve)]
    # NOTE: parents first within the depth does not matter (parents are all one depth up), but the
    # main child leads so that a one-node-per-depth tree is exactly the chain.
    return chosen
