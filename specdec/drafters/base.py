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

from specdec.enums import AcceptanceMode
from specdec.sampling import SamplingParams, SparseDistribution


@dataclass(frozen=True)
class DraftRequest:
    """What a drafter needs to know about one generation."""

    prompt_ids: list[int]
    sampling: SamplingParams
    acceptance: AcceptanceMode
    seed: int
    vocab_size: int  # width of the target's logits; draft q is over the same ids
    draft_top_k: int = 32


@dataclass(frozen=True)
class DraftBlock:
    candidate_ids: torch.Tensor  # [k] int64, on the CPU
    # [k, n] the sparse q each candidate was sampled from; None where the rule ignores q.
    draft_probs: SparseDistribution | None = None
    compute_ms: float = 0.0  # the drafter's own compute time for this block

    def __len__(self) -> int:
        return int(self.candidate_ids.shape[0])

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

    def feedback(self, num_accepted: int, appended_ids: Sequence[int]) -> None:
        """The target kept the first `num_accepted` candidates, then appended `appended_ids`.

        NOTE: bookkeeping only, no model work (the draft service runs it on its event loop);
        caches are rolled back lazily by the next `propose`.
        """

    def close(self) -> None:
        """Free per-generation state (KV cache) now."""


class Drafter(Protocol):
    name: str

    def open(self, request: DraftRequest) -> DraftSession: ...


@dataclass
class CommittedSequence:
    """The sequence both sides agree on, rebuilt by a session from propose/feedback."""

    token_ids: list[int]
    last_block: list[int] = field(default_factory=list)

    def record_block(self, block: DraftBlock) -> None:
        self.last_block = block.candidate_ids.tolist()

    def apply_feedback(self, num_accepted: int, appended_ids: Sequence[int]) -> None:
        check_num_accepted(num_accepted, len(self.last_block))
        self.token_ids.extend(self.last_block[:num_accepted])
        self.token_ids.extend(appended_ids)
        self.last_block = []

    def snapshot(self) -> CommittedSequence:
        return CommittedSequence(list(self.token_ids), list(self.last_block))

    def restore(self, snapshot: CommittedSequence) -> None:
        self.token_ids = list(snapshot.token_ids)
        self.last_block = list(snapshot.last_block)


def check_num_accepted(num_accepted: int, num_proposed: int) -> None:
    if not 0 <= num_accepted <= num_proposed:
        raise ValueError(f"num_accepted={num_accepted} but {num_proposed} candidates were proposed")
