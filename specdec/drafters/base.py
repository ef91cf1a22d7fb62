"""The one interface every drafter implements (a separate model, layer-skip, n-gram, remote).

A `Drafter` opens a `DraftSession` per generation. The session has two methods, as in
transformers' candidate generators: `propose` k candidates (with the q they were sampled from,
when the acceptance rule needs it) and `feedback` how many the target accepted plus the
token(s) it appended. The session mirrors the committed sequence from those two calls alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from specdec.batching import BatchingOptions
from specdec.constraints.matcher import GrammarConstraint
from specdec.enums import AcceptanceMode, TokenSource
from specdec.penalties import Penalties
from specdec.sampling import SamplingParams, SparseDistribution
from specdec.tree import TreeShape, check_root_path, tree_depth


@dataclass(frozen=True)
class DraftRequest:
    """What a drafter needs to know about one generation."""

    prompt_ids: list[int]
    sampling: SamplingParams
    acceptance: AcceptanceMode
    seed: int
    vocab_size: int  # width of the target's logits; draft q is over the same ids
    draft_top_k: int = 32
    tree: TreeShape | None = None  # verification=tree: the tree a session may propose; None: chains only
    penalties: Penalties = Penalties()  # the target's transform, applied to q too so more candidates are accepted
    prediction_ids: tuple[int, ...] = ()  # OpenAI predicted outputs (drafters/prediction.py); empty: none
    # When the first propose asks for none (the target decodes the first token itself): candidates
    # a session that drafts ahead (overlap.py) prepares meanwhile, past its guess of that token.
    draft_ahead_tokens: int = 0
    # Structured outputs: the target's grammar, the session's own matcher. Drafters keep their candidates
    # inside it so more are accepted (correctness never depends on it). None: unconstrained.
    constraint: GrammarConstraint | None = None
    # min_tokens (specdec.min_tokens): the target bans these ids (its EOS) until min_tokens tokens are
    # generated; drafters ban them in q too, so more candidates are accepted. 0: no ban.
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    draft_scope: str = ""  # suffix decoding: whose earlier outputs may draft here (GenerationRequest.draft_scope)


@dataclass(frozen=True)
class DraftBlock:
    candidate_ids: torch.Tensor  # [k] int64, on the CPU
    # [k, n] the sparse q each candidate was sampled from; None where the rule ignores q.
    draft_probs: SparseDistribution | None = None
    compute_ms: float = 0.0  # the drafter's own compute time for this block
    # A token tree (specdec.tree): the parent of each candidate, -1 = after the committed tokens;
    # None: a chain. Tree blocks come only in greedy and coupled modes (draft_probs None).
    tree_parents: list[int] | None = None
    # Where each candidate came from, one per candidate; empty: all from a draft model.
    sources: tuple[TokenSource, ...] = ()

    def __len__(self) -> int:
        return int(self.candidate_ids.shape[0])

    @property
    def depth(self) -> int:
        """Candidates on the longest root path: what the round's K bounds."""
        return len(self) if self.tree_parents is None else tree_depth(self.tree_parents)

    def candidate_sources(self) -> list[TokenSource]:
        return list(self.sources) if self.sources else [TokenSource.DRAFT] * len(self)

    @staticmethod
    def empty() -> DraftBlock:
        return DraftBlock(torch.empty(0, dtype=torch.long), _empty_sparse())


def _empty_sparse() -> SparseDistribution:
    return SparseDistribution(torch.empty(0, 1, dtype=torch.long), torch.empty(0, 1))


class DraftSession(Protocol):
    # The sequence this session mirrors; overlap.py snapshots and restores it around a guess.
    committed: CommittedSequence

    def propose(self, num_tokens: int) -> DraftBlock:
        """Up to `num_tokens` candidates following the committed sequence (may be fewer)."""

    def feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> None:
        """The target kept the first `num_accepted` candidates, then appended `appended_ids`.

        After a tree block, `accepted_nodes` names the kept candidates (a root path of that length).

        NOTE: bookkeeping only, no model work (the draft service runs it on its event loop);
        caches are rolled back lazily by the next `propose`.
        """

    def close(self) -> None:
        """Free per-generation state (KV cache) now."""


class Drafter(Protocol):
    name: str

    def open(self, request: DraftRequest) -> DraftSession: ...

    def batched(self, options: BatchingOptions) -> Drafter:
        """This drafter with its sessions' passes shared as `options` say (itself if it has no model)."""


@dataclass
class CommittedSequence:
    """The sequence both sides agree on, rebuilt by a session from propose/feedback."""

    token_ids: list[int]
    last_block: list[int] = field(default_factory=list)
    last_parents: list[int] | None = None  # the last block's tree; None: it was a chain

    def record_block(self, block: DraftBlock) -> None:
        self.last_block = block.candidate_ids.tolist()
        self.last_parents = block.tree_parents

    def apply_feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> list[int]:
        """Commit the accepted candidates and the appended tokens; returns the accepted nodes' indices."""
        path = accepted_path(num_accepted, accepted_nodes, len(self.last_block), self.last_parents)
        self.token_ids.extend(self.last_block[node] for node in path)
        self.token_ids.extend(appended_ids)
        self.last_block, self.last_parents = [], None
        return path

    def snapshot(self) -> CommittedSequence:
        return CommittedSequence(list(self.token_ids), list(self.last_block), self.last_parents)

    def restore(self, snapshot: CommittedSequence) -> None:
        self.token_ids = list(snapshot.token_ids)
        self.last_block = list(snapshot.last_block)
        self.last_parents = snapshot.last_parents


def accepted_path(num_accepted: int, accepted_nodes: Sequence[int] | None, num_proposed: int, parents: list[int] | None) -> list[int]:
    """The accepted candidates' indices, checked: a chain's first `num_accepted`, or a tree's root path."""
    check_num_accepted(num_accepted, num_proposed)
    if parents is None:
        if accepted_nodes and list(accepted_nodes) != list(range(num_accepted)):
            raise ValueError(f"accepted nodes {list(accepted_nodes)} after a chain block: a chain keeps its first {num_accepted}")
        return list(range(num_accepted))
    path = list(accepted_nodes or [])
    if len(path) != num_accepted:
        raise ValueError(f"num_accepted={num_accepted} but {len(path)} accepted nodes were named for the tree block")
    check_root_path(parents, path)
    return path


def check_num_accepted(num_accepted: int, num_proposed: int) -> None:
    if not 0 <= num_accepted <= num_proposed:
        raise ValueError(f"num_accepted={num_accepted} but {num_proposed} candidates were proposed")
