"""Overlapped drafting: draft round r+1 while the target verifies round r.

After a session sends block B, `draft_ahead()` (run in a worker while the service waits for the
feedback) continues as if the target accepts all of B and appends the token the drafter itself
would propose next (the guessed bonus g): it drafts g, then c1, c2, ... one token at a time
through the wrapped session's own propose/feedback. So every candidate drafted ahead is drawn
exactly as a later propose from that state would draw it, and carries the q it was drawn from.
`feedback` only records the verdict (inline, no model work); the drafting thread reads it between
two tokens and stops when it contradicts the guess. The next `propose(K)` then sends c1..cK when
the guess held (drafting on if fewer are ready), or restores the committed sequence and drafts
anew; the KV cache rolls back lazily, as after any rejection.

NOTE: the verifier decides, so outputs never depend on overlap. With greedy, coupled and keyed
rejection drafting (see model.py) even the blocks are the ones a session without overlap sends;
behind prompt lookup (prompt_lookup.py) a block looked up one token at a time may follow another
earlier match than one looked up whole.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from specdec.drafters.base import CommittedSequence, DraftBlock, DraftSession, check_num_accepted
from specdec.sampling import concat_sparse


@dataclass(frozen=True)
class RoundReport:
    """How the last propose went, for the draft service's metrics and spans."""

    predrafted: int = 0  # candidates of the block that were drafted ahead
    outcome: str | None = None  # "used" (the guess held) / "discarded" / None: nothing was drafted ahead
    saved_ms: float = 0.0  # draft compute the verifier did not have to wait for


class _Ahead:
    """The continuation drafted past one block, and the feedback on that block once it arrives."""

    def __init__(self, block: list[int], limit: int) -> None:
        self.block = block
        # Candidates to draft past the guess: the K of the block just sent, until the next propose's K is known
        # (`expect`). Written by the event loop, read by the drafting thread between tokens (one assignment).
        self.limit = limit
        self.snapshot: CommittedSequence | None = None  # the committed state before the guess; set when drafting starts
        self.steps: list[DraftBlock] = []  # one token each: the guess g, then c1, c2, ...; compute_ms measured here
        self.exhausted = False  # the drafter had nothing more to propose (n-gram without a match)
        self.error: Exception | None = None
        # Written once by the event loop, read by the drafting thread between tokens (one assignment each).
        self.verdict: tuple[int, list[int]] | None = None
        self.settled_at = 0.0

    def settle(self, num_accepted: int, appended_ids: list[int]) -> None:
        self.settled_at = time.perf_counter()
        self.verdict = (num_accepted, appended_ids)

    def guess_holds(self) -> bool | None:
        """True / False once the feedback and the guess are both known, else None."""
        if self.verdict is None:
            return None
        num_accepted, appended_ids = self.verdict
        if num_accepted != len(self.block):
            return False
        if not self.steps:
            return None
        return appended_ids == self.steps[0].candidate_ids.tolist()

    def wants_more(self) -> bool:
        return not self.exhausted and self.guess_holds() is not False and len(self.steps) <= self.limit


class OverlappedDraftSession:
    """Any DraftSession, plus `draft_ahead()` to draft its next block before the feedback on this one.

    Without `draft_ahead()` calls it behaves exactly as the wrapped session. The service runs
    `draft_ahead`, `propose` and `close` in worker threads, one at a time per session; `_busy`
    guarantees it (never two forward passes over one KV cache).
    """

    def __init__(self, inner: DraftSession, first_ahead_tokens: int = 0) -> None:
        self.inner = inner
        # An empty first block (the target decodes the first token) arms this many ahead: the prefill
        # and the guess of that token, then candidates past it.
        self._first_ahead_tokens = first_ahead_tokens
        self.report = RoundReport()
        self._ahead: _Ahead | None = None
        self._closed = False
        self._busy = threading.Lock()

    @property
    def committed(self) -> CommittedSequence:
        return self.inner.committed

    def propose(self, num_tokens: int) -> DraftBlock:
        with self._busy:
            ahead, self._ahead = self._ahead, None
            block = self._next_block(ahead, num_tokens)
            limit, self._first_ahead_tokens = num_tokens or self._first_ahead_tokens, 0
            # NOTE: no drafting ahead past a tree: which of its paths will be accepted is not guessable.
            if limit > 0 and not self._closed and block.tree_parents is None:
                self._ahead = _Ahead(block.candidate_ids.tolist(), limit)
            return block

    def feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> None:
        ahead = self._ahead
        if ahead is None:  # nothing armed, so no thread is drafting: apply it now
            self.inner.feedback(num_accepted, appended_ids, accepted_nodes)
            return
        check_num_accepted(num_accepted, len(ahead.block))
        ahead.settle(num_accepted, list(appended_ids))

    def expect(self, num_tokens: int) -> None:
        """The next propose asks for `num_tokens`: draft ahead no further (an answer near max_tokens, or a smaller
        adaptive K, would otherwise wait for candidates it cannot use)."""
        ahead = self._ahead
        if ahead is not None:
            ahead.limit = min(ahead.limit, num_tokens)

    def draft_ahead(self) -> None:
        """Draft past the last block as if the guess holds: stops when contradicted, or `limit` past the guess."""
        with self._busy:
            ahead = self._ahead
            if ahead is None or ahead.snapshot is not None or self._closed:
                return
            ahead.snapshot = self.inner.committed.snapshot()
            try:
                self.inner.feedback(len(ahead.block), [])
                while ahead.wants_more() and not self._closed:
                    started = time.perf_counter()
                    step = self.inner.propose(1)
                    if not len(step):
                        ahead.exhausted = True
                        break
                    self.inner.feedback(1, [])
                    ahead.steps.append(replace(step, compute_ms=(time.perf_counter() - started) * 1000))
            except Exception as error:  # noqa: BLE001 -- re-raised by the next propose, on the path that reports errors
                ahead.error = error

    def close(self) -> None:
        self._closed = True  # a pre-draft in flight stops after its current token
        with self._busy:
            self._ahead = None
            self.inner.close()

    def _next_block(self, ahead: _Ahead | None, num_tokens: int) -> DraftBlock:
        self.report = RoundReport()
        if ahead is None:
            return self.inner.propose(num_tokens)
        if ahead.error is not None:
            raise ahead.error
        if ahead.snapshot is None:  # never drafted ahead: the plain path
            if ahead.verdict is not None:
                self.inner.feedback(*ahead.verdict)
            return self.inner.propose(num_tokens)
        if ahead.guess_holds():
            block = self._use(ahead, num_tokens)
        else:
            block = self._redraft(ahead, num_tokens)
        if ahead.verdict is None:
            return block
        return replace(block, compute_ms=(time.perf_counter() - ahead.settled_at) * 1000)

    def _use(self, ahead: _Ahead, num_tokens: int) -> DraftBlock:
        """The guess held: the inner session stands at prefix + B + g + c1..cm, all fed back."""
        candidates = ahead.steps[1 : 1 + num_tokens]
        parts = list(candidates)
        extension_ms = 0.0
        if len(candidates) < num_tokens and not ahead.exhausted:
            extension = self.inner.propose(num_tokens - len(candidates))
            parts.append(extension)
            extension_ms = extension.compute_ms
        block = _joined(parts)
        guessed = [*ahead.snapshot.token_ids, *ahead.block, *ahead.verdict[1]]
        self.inner.committed.restore(CommittedSequence(guessed, block.candidate_ids.tolist()))
        critical_ms = (time.perf_counter() - ahead.settled_at) * 1000
        saved_ms = max(0.0, sum(step.compute_ms for step in candidates) + extension_ms - critical_ms)
        self.report = RoundReport(len(candidates), "used" if candidates else None, saved_ms)
        return block

    def _redraft(self, ahead: _Ahead, num_tokens: int) -> DraftBlock:
        self.inner.committed.restore(ahead.snapshot)
        if ahead.verdict is not None:
            self.inner.feedback(*ahead.verdict)
        self.report = RoundReport(outcome="discarded" if ahead.steps else None)
        return self.inner.propose(num_tokens)


def _joined(parts: Sequence[DraftBlock]) -> DraftBlock:
    parts = [part for part in parts if len(part)]
    if not parts:
        return DraftBlock.empty()
    candidate_ids = torch.cat([part.candidate_ids for part in parts])
    sources = tuple(source for part in parts for source in part.candidate_sources())  # behind prompt lookup, a mix
    if parts[0].draft_probs is None:
        return DraftBlock(candidate_ids, sources=sources)
    # NOTE: behind prompt lookup a block joins looked-up steps (q 1 wide) and model steps (q draft_top_k wide).
    return DraftBlock(candidate_ids, concat_sparse([part.draft_probs for part in parts]), sources=sources)
