"""Suffix decoding: draft from suffix trees over the request's prompt and output and the scope's earlier outputs,
then from `inner` (the model drafter, local or remote) where the trees have no confident match.

Agent traffic repeats itself across requests (the same JSON shapes, SQL, tool-call boilerplate), which prompt lookup
(this request only) cannot see. Each round matches the longest suffix of the sequence (up to `max_depth` tokens) in
the trees (drafters/suffix_cache.py) and proposes the most frequent continuation: at most `max_spec_factor` times
the match length, cut where the continuation's estimated frequency drops below `min_token_prob`, and at most
`draft_tokens`. A block whose score (expected accepted tokens) reaches `min_score` goes first; otherwise `inner`
drafts the round, at most `inner_tokens` candidates (the request's K). With no inner drafter every match is used.

NOTE: lossless whatever the trees propose: suffix blocks carry a point-mass q (rejection mode), and greedy and
coupled acceptance never read q; the verifier decides every token. Trees: a session with no inner drafter proposes
the trees' token tree when the request verifies trees (greedy and coupled only); composed with a model drafter,
every block of a tree request is the model's, so its tree bookkeeping sees every round.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from specdec.acceptance_modes import rule
from specdec.batching import BatchingOptions
from specdec.constraints.matcher import grammar_prefix
from specdec.drafters.base import CommittedSequence, DraftBlock, Drafter, DraftRequest, DraftSession
from specdec.drafters.fallible import FallibleSession
from specdec.drafters.ngram import point_mass_block
from specdec.enums import TokenSource
from specdec.tree import chain_parents, node_depths

if TYPE_CHECKING:
    from specdec.drafters.suffix_cache import SuffixTrees  # arctic-inference, loaded only where suffix decoding is on


class SuffixDrafter:
    """The suffix trees first, then `inner` (None: the trees alone)."""

    def __init__(self, trees: SuffixTrees, inner: Drafter | None = None, inner_tokens: int | None = None) -> None:
        self.trees = trees
        self.inner = inner
        self.inner_tokens = inner_tokens  # most candidates per block from `inner`; None: as many as asked
        self.name = f"suffix+{inner.name}" if inner is not None else "suffix"

    def open(self, request: DraftRequest) -> SuffixSession:
        inner = self.inner.open(request) if self.inner is not None else None
        return SuffixSession(self.trees, inner, self.inner_tokens, request)

    def batched(self, options: BatchingOptions) -> SuffixDrafter:
        return SuffixDrafter(self.trees, self.inner.batched(options) if self.inner is not None else None, self.inner_tokens)


class SuffixSession:
    def __init__(self, trees: SuffixTrees, inner: DraftSession | None, inner_tokens: int | None, request: DraftRequest) -> None:
        self.settings = trees.settings
        self.inner = FallibleSession(inner, "the suffix trees")
        self.inner_tokens = inner_tokens
        self._own = CommittedSequence(list(request.prompt_ids))  # kept whatever the wrapped session does, so it can fail
        self.suffix = trees.open(request.draft_scope, request.prompt_ids)
        self.sends_q = rule(request.acceptance).needs_draft_probs
        self.constraint = request.constraint
        # Trees only alone and unconstrained (a grammar checks chains); with a model, a tree request is the model's.
        self.tree = request.tree if request.tree is not None and inner is None and request.constraint is None else None
        self.tree_request = request.tree is not None

    @property
    def enabled(self) -> bool:
        """Whether the trees draft at all: composed with a model, a tree request is the model's (until it fails)."""
        return not self.tree_request or not self.inner.alive

    @property
    def committed(self) -> CommittedSequence:
        return self._own

    def propose(self, num_tokens: int) -> DraftBlock:
        started = time.perf_counter()
        draft = self._speculate(num_tokens) if num_tokens > 0 and self.enabled else None
        block = None
        if draft is not None and (not self.inner.alive or draft.score >= self.settings.min_score):
            block = self._suffix_block(draft, num_tokens)
        if block is None:
            block = self._inner_block(num_tokens if self.inner_tokens is None else min(num_tokens, self.inner_tokens))
            if len(block) or draft is None:
                return block
            # The model had nothing this round (a remote draft still catching up on a long prompt, or failed):
            # a match below min_score still beats a plain step.
            block = self._suffix_block(draft, num_tokens)
            if block is None:
                return DraftBlock.empty()
        block = replace(block, compute_ms=(time.perf_counter() - started) * 1000)
        self._own.record_block(block)
        return block

    def _speculate(self, num_tokens: int):
        # A chain holds at most num_tokens candidates; a tree that many deep and at most max_nodes in all.
        most = min(self.tree.max_nodes if self.tree else num_tokens, self.settings.draft_tokens)
        draft = self.suffix.speculate(self._own.token_ids, most, self.settings, self.tree is not None)
        return draft if draft.token_ids else None

    def _suffix_block(self, draft, num_tokens: int) -> DraftBlock | None:
        if self.tree is not None and draft.parents != chain_parents(len(draft.parents)):
            return _tree_block(*fit_tree(draft.token_ids, draft.parents, self.tree.branching, num_tokens))
        candidates = grammar_prefix(self.constraint, self._own.token_ids, list(draft.token_ids[:num_tokens]))
        if not candidates:
            return None
        block = point_mass_block(candidates)
        return replace(block, draft_probs=block.draft_probs if self.sends_q else None, sources=(TokenSource.SUFFIX,) * len(block))

    def _inner_block(self, num_tokens: int) -> DraftBlock:
        block = self.inner.propose(num_tokens)
        self._own.record_block(block)
        return block

    def feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> None:
        before = len(self._own.token_ids)
        # NOTE: the block the round verified may not be the wrapped session's (a suffix block, or one an outer
        # drafter recorded here): it becomes the wrapped session's last block, so its feedback applies to it.
        self.inner.adopt(self._own)
        self._own.apply_feedback(num_accepted, appended_ids, accepted_nodes)
        self.suffix.extend(self._own.token_ids[before:])
        self.inner.feedback(num_accepted, appended_ids, accepted_nodes)

    def close(self) -> None:
        self.suffix.close()
        self.inner.close()


def fit_tree(token_ids: Sequence[int], parents: Sequence[int], branching: int, depth: int) -> tuple[list[int], list[int]]:
    """The tree without the nodes past `depth` or past `branching` children of one parent (nor their descendants);
    parents come first, so one pass keeps a subtree closed under parents, renumbered."""
    kept: dict[int, int] = {}  # old index -> new index
    children: dict[int, int] = {}
    depths = node_depths(parents)
    kept_ids, kept_parents = [], []
    for node, parent in enumerate(parents):
        if depths[node] > depth or (parent >= 0 and parent not in kept) or children.get(parent, 0) >= branching:
            continue
        children[parent] = children.get(parent, 0) + 1
        kept[node] = len(kept_ids)
        kept_ids.append(token_ids[node])
        kept_parents.append(kept[parent] if parent >= 0 else -1)
    return kept_ids, kept_parents


def _tree_block(token_ids: Sequence[int], parents: Sequence[int]) -> DraftBlock:
    """A token tree of suffix candidates (greedy and coupled requests only: no q)."""
    return DraftBlock(
        torch.tensor(list(token_ids), dtype=torch.long), None, tree_parents=list(parents), sources=(TokenSource.SUFFIX,) * len(token_ids)
    )


def with_suffix(drafter: Drafter | None, trees: SuffixTrees | None, inner_tokens: int) -> Drafter | None:
    """`drafter` with the suffix trees tried first; `drafter` itself without trees."""
    if trees is None:
        return drafter
    return SuffixDrafter(trees, drafter, inner_tokens)


__all__ = ["SuffixDrafter", "SuffixSession", "fit_tree", "with_suffix"]
