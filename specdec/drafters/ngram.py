"""N-gram prompt lookup: propose the tokens that followed the latest occurrence of the
sequence's last n tokens. No model, no weights; strong on summarisation, code edits, and RAG.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec.batching import BatchingOptions
from specdec.constraints.matcher import grammar_prefix
from specdec.drafters.base import CommittedSequence, DraftBlock, DraftRequest
from specdec.enums import TokenSource
from specdec.sampling import SparseDistribution


class NgramDrafter:
    name = "ngram"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def open(self, request: DraftRequest) -> NgramDraftSession:
        return NgramDraftSession(self, request)

    def batched(self, options: BatchingOptions) -> NgramDrafter:
        return self  # a lookup per session: nothing to share


class NgramDraftSession:
    def __init__(self, drafter: NgramDrafter, request: DraftRequest) -> None:
        self.drafter = drafter
        self.committed = CommittedSequence(list(request.prompt_ids))
        self.constraint = request.constraint

    def propose(self, num_tokens: int) -> DraftBlock:
        sequence = self.committed.token_ids
        candidates = grammar_prefix(
            self.constraint, sequence, lookup_continuation(sequence, num_tokens, self.drafter.max_ngram, self.drafter.min_ngram)
        )
        block = point_mass_block(candidates)
        self.committed.record_block(block)
        return block

    def feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> None:
        # A lookup proposes chains even when trees are allowed (a chain is a degenerate tree).
        self.committed.apply_feedback(num_accepted, appended_ids, accepted_nodes)

    def close(self) -> None:
        pass


def point_mass_block(candidates: list[int]) -> DraftBlock:
    """A block of looked-up candidates. The lookup is deterministic: q is a point mass on each
    candidate, sent as such so rejection sampling stays exact (accept with probability p(x))."""
    token_ids = torch.tensor(candidates, dtype=torch.long)  # [k]
    return DraftBlock(
        token_ids,
        SparseDistribution(token_ids.reshape(-1, 1), torch.ones(len(candidates), 1, dtype=torch.float64)),
        sources=(TokenSource.LOOKUP,) * len(candidates),
    )


def lookup_continuation(token_ids: Sequence[int], num_tokens: int, max_ngram: int, min_ngram: int) -> list[int]:
    """The up-to-`num_tokens` tokens after the latest earlier match of the longest suffix n-gram."""
    if num_tokens <= 0 or len(token_ids) < 2:
        return []
    tokens = list(token_ids)
    length = len(tokens)
    # Every earlier match ends on an occurrence of the last token: find those once, latest first,
    # rather than slicing at every position for every n (this runs each round, over long contexts).
    ends = [end for end in range(length - 2, -1, -1) if tokens[end] == tokens[-1]]
    for size in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        suffix = tokens[length - size :]
        for end in ends:
            if end >= size - 1 and tokens[end - size + 1 : end + 1] == suffix:
                return tokens[end + 1 : end + 1 + num_tokens]
    return []
