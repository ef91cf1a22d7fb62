"""Prompt lookup first, then the draft model: one drafter over any model drafter.

Each block is the continuation of the latest earlier occurrence of the sequence's last n-gram
(ngram.py) when there is one, and otherwise the wrapped drafter's own block. Small chat models
quote their prompt and repeat themselves a great deal: on Spec-Bench first turns the default
pair's draft model alone agrees with SmolLM2 on 25% of greedy tokens, lookup-then-model on 43%
(docs/benchmarks.md). A looked-up block costs no model work, so it may also be longer than
what the draft model is worth drafting (`model_tokens`).

NOTE: lossless whatever is proposed: looked-up blocks carry a point-mass q (rejection mode), and
greedy and coupled acceptance never read q. Token trees stay the model's: with a tree request
every block is the wrapped session's, so its tree bookkeeping (kept paths) sees every round.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specdec.acceptance_modes import rule
from specdec.batching import BatchingOptions
from specdec.constraints.matcher import grammar_prefix
from specdec.drafters.base import CommittedSequence, DraftBlock, Drafter, DraftRequest, DraftSession
from specdec.drafters.ngram import lookup_continuation, point_mass_block


@dataclass(frozen=True)
class LookupSettings:
    min_ngram: int = 2  # shortest suffix that counts as a match
    max_ngram: int = 3  # longest suffix tried first
    model_tokens: int | None = None  # most candidates per block from the draft model; None: as many as asked

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")
        if self.model_tokens is not None and self.model_tokens < 1:
            raise ValueError(f"model_tokens must be at least 1, got {self.model_tokens}")


class PromptLookupDrafter:
    """`inner` (a model or layer-skip drafter), with prompt lookup tried before it each round."""

    def __init__(self, inner: Drafter, settings: LookupSettings) -> None:
        self.inner = inner
        self.settings = settings
        self.name = f"prompt_lookup+{inner.name}"

    def open(self, request: DraftRequest) -> PromptLookupSession:
        return PromptLookupSession(self.inner.open(request), self.settings, request)

    def batched(self, options: BatchingOptions) -> PromptLookupDrafter:
        return PromptLookupDrafter(self.inner.batched(options), self.settings)


class PromptLookupSession:
    def __init__(self, inner: DraftSession, settings: LookupSettings, request: DraftRequest) -> None:
        self.inner = inner
        self.settings = settings
        self.lookup = request.tree is None  # tree requests: the model drafts every block
        self.sends_q = rule(request.acceptance).needs_draft_probs
        self.constraint = request.constraint

    @property
    def committed(self) -> CommittedSequence:
        # One sequence for both sources: the wrapped session's (overlap.py snapshots it).
        return self.inner.committed

    def propose(self, num_tokens: int) -> DraftBlock:
        started = time.perf_counter()
        settings = self.settings
        sequence = self.committed.token_ids
        candidates = lookup_continuation(sequence, num_tokens, settings.max_ngram, settings.min_ngram) if self.lookup else []
        candidates = grammar_prefix(self.constraint, sequence, candidates)
        if not candidates:
            model_tokens = num_tokens if settings.model_tokens is None else min(num_tokens, settings.model_tokens)
            return self.inner.propose(model_tokens)
        # NOTE: recorded in the wrapped session's sequence, so its feedback applies to this block;
        # its KV cache catches up on the looked-up tokens lazily, in its next propose.
        block = point_mass_block(candidates)
        block = replace(block, draft_probs=block.draft_probs if self.sends_q else None, compute_ms=(time.perf_counter() - started) * 1000)
        self.committed.record_block(block)
        return block

    def feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> None:
        self.inner.feedback(num_accepted, appended_ids, accepted_nodes)

    def close(self) -> None:
        self.inner.close()
