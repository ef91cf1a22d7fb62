"""Predicted outputs (OpenAI `prediction`): draft from the text the user expects, then from `inner`.

An edit (re-emit a file with a small change) is mostly a copy of the prediction. Each round finds
where the generated tokens stand in the prediction and proposes what follows there: the longest
suffix of the generated tokens (up to `max_ngram`) that occurs in the prediction, at the occurrence
nearest to where the previous alignment expects it (so a change that inserts, deletes or rewrites
tokens re-aligns a few tokens after it). Before the output has entered the prediction, it proposes
the prediction's start (after a preamble such as an opening fence). Where nothing aligns after that,
the wrapped drafter proposes (prompt lookup, then the draft model), at most `inner_tokens` candidates.

NOTE: lossless whatever the prediction says: its blocks carry a point-mass q (rejection mode) and
greedy / coupled acceptance never read q; the verifier decides every token. After a predicted block
is rejected at its first candidate, the next `backoff` rounds (doubling, up to `max_backoff`) go to
the wrapped drafter: text that has left the prediction does not pay a wasted verification each round.
When the wrapped drafter fails (a remote draft that misses its deadline on a loaded host), the
session goes on with the prediction alone instead of failing the whole draft.
Predicted blocks start at `start_tokens` and double after each block accepted in full (up to the
round's budget, prediction_draft_tokens): a long verbatim copy takes few rounds, while a block that
runs into an edit costs the target no more than `start_tokens` positions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specdec.batching import BatchingOptions
from specdec.constraints.matcher import grammar_prefix
from specdec.drafters.base import CommittedSequence, DraftBlock, Drafter, DraftRequest, DraftSession
from specdec.drafters.fallible import FallibleSession
from specdec.drafters.ngram import point_mass_block
from specdec.enums import AcceptanceMode, TokenSource

_ENTRY_NGRAM = 2  # matched suffix tokens that show the output has entered the prediction


@dataclass(frozen=True)
class PredictionSettings:
    inner_tokens: int  # most candidates per block from the wrapped drafter (the request's K)
    max_ngram: int = 4  # longest generated suffix aligned first
    min_ngram: int = 1  # shortest that still counts (nearest to the expected place, so 1 is safe enough)
    max_backoff: int = 8  # most rounds handed to the wrapped drafter after a predicted block fails outright
    start_tokens: int = 16  # first predicted block length, and the length again after a partial acceptance
    max_tokens: int = 64  # longest a predicted block grows to (the round's budget caps it too)


class PredictionDrafter:
    """`inner` (any drafter, or None: the prediction alone), with the request's prediction tried first."""

    def __init__(self, inner: Drafter | None, settings: PredictionSettings) -> None:
        self.inner = inner
        self.settings = settings
        self.name = f"prediction+{inner.name}" if inner is not None else "prediction"

    def open(self, request: DraftRequest) -> PredictionSession:
        return PredictionSession(self.inner.open(request) if self.inner is not None else None, self.settings, request)

    def batched(self, options: BatchingOptions) -> PredictionDrafter:
        return PredictionDrafter(self.inner.batched(options) if self.inner is not None else None, self.settings)


class PredictionSession:
    def __init__(self, inner: DraftSession | None, settings: PredictionSettings, request: DraftRequest) -> None:
        self.inner = FallibleSession(inner, "the prediction")
        self.settings = settings
        self.prompt_length = len(request.prompt_ids)
        self.alignment = PredictionAlignment(request.prediction_ids)
        self.sends_q = request.acceptance is AcceptanceMode.REJECTION  # the only rule that reads q
        self._own = CommittedSequence(list(request.prompt_ids))  # kept whatever the wrapped session does, so it can fail
        self.backoff = _Backoff(settings.max_backoff)
        self.last_predicted = 0  # candidates of the last block that came from the prediction
        self.block_tokens = settings.start_tokens  # length of the next predicted block (grows while it is accepted in full)
        self.constraint = request.constraint

    @property
    def committed(self) -> CommittedSequence:
        return self._own

    def propose(self, num_tokens: int) -> DraftBlock:
        started = time.perf_counter()
        settings = self.settings
        candidates = []
        if num_tokens > 0 and self.backoff.ready():
            generated = self.committed.token_ids[self.prompt_length :]
            candidates = self.alignment.continuation(generated, min(num_tokens, self.block_tokens), settings.max_ngram, settings.min_ngram)
            candidates = grammar_prefix(self.constraint, self.committed.token_ids, candidates)
        self.last_predicted = len(candidates)
        if not candidates:
            return self._inner_block(min(num_tokens, settings.inner_tokens))
        block = point_mass_block(candidates)
        block = replace(
            block,
            draft_probs=block.draft_probs if self.sends_q else None,
            compute_ms=(time.perf_counter() - started) * 1000,
            sources=(TokenSource.PREDICTION,) * len(block),
        )
        self._own.record_block(block)
        self.inner.adopt(self._own)  # the wrapped session's feedback then applies to the predicted block too
        return block

    def _inner_block(self, num_tokens: int) -> DraftBlock:
        block = self.inner.propose(num_tokens)
        self._own.record_block(block)
        return block

    def feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> None:
        if self.last_predicted:
            self.backoff.record(num_accepted > 0)
            full = num_accepted >= self.last_predicted
            self.block_tokens = min(2 * self.block_tokens, self.settings.max_tokens) if full else self.settings.start_tokens
        self._own.apply_feedback(num_accepted, appended_ids, accepted_nodes)
        self.inner.feedback(num_accepted, appended_ids, accepted_nodes)

    def close(self) -> None:
        self.inner.close()


class _Backoff:
    """Rounds to skip the prediction after it failed outright: 1, 2, 4, ... up to `limit`; 0 after a success."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.penalty = 0
        self.skip = 0

    def ready(self) -> bool:
        if self.skip > 0:
            self.skip -= 1
            return False
        return True

    def record(self, accepted_any: bool) -> None:
        self.penalty = 0 if accepted_any else min(self.limit, max(1, 2 * self.penalty))
        self.skip = self.penalty


class PredictionAlignment:
    """Where the generated tokens stand in the prediction, found again each round."""

    def __init__(self, prediction_ids: Sequence[int]) -> None:
        self.prediction = list(prediction_ids)
        self.positions: dict[int, list[int]] = {}  # token -> its indices in the prediction, ascending
        for index, token in enumerate(self.prediction):
            self.positions.setdefault(token, []).append(index)
        self.anchor = (0, 0)  # (generated length, the prediction index it was aligned to)
        self.entered = False  # the output has matched the prediction (see align)

    def continuation(self, generated: Sequence[int], num_tokens: int, max_ngram: int, min_ngram: int) -> list[int]:
        """Up to `num_tokens` prediction tokens after the alignment of `generated`; [] when none aligns."""
        end = self.align(generated, max_ngram, min_ngram)
        return [] if end is None else self.prediction[end : end + num_tokens]

    def align(self, generated: Sequence[int], max_ngram: int, min_ngram: int) -> int | None:
        """The prediction index where `generated` continues, or None.

        The end of the longest suffix n-gram of `generated` found in the prediction, the occurrence
        nearest to the expected index (the last alignment moved on by the tokens generated since).
        Until the output has entered the prediction (it ends with the prediction's first tokens, or a
        suffix of `_ENTRY_NGRAM` tokens matched, or one where the start proposed last expects it), what
        was generated is taken for a preamble (an opening fence, "Here is the file:"): the answer is the
        prediction's start. NOTE: a lone common token there ("\n") would otherwise pick a line of the
        prediction at random.
        """
        if not self.prediction:
            return None
        anchored_length, anchored_end = self.anchor
        expected = anchored_end + len(generated) - anchored_length
        match = self._nearest_suffix_match(generated, expected, max_ngram, min_ngram)
        if not self.entered:
            begun = self._begun(generated, max_ngram)
            if begun:
                match = (begun, begun)
            elif match is None or (match[1] < _ENTRY_NGRAM and match[0] != expected):
                self.anchor = (len(generated), 0)
                return 0
            self.entered = True
        if match is None:
            return None
        self.anchor = (len(generated), match[0])
        return match[0]

    def _begun(self, generated: Sequence[int], max_ngram: int) -> int:
        """The most tokens (up to `max_ngram`) at the prediction's start that `generated` ends with; 0 if none."""
        for size in range(min(max_ngram, len(generated), len(self.prediction)), 0, -1):
            if list(generated[len(generated) - size :]) == self.prediction[:size]:
                return size
        return 0

    def _nearest_suffix_match(self, generated: Sequence[int], expected: int, max_ngram: int, min_ngram: int) -> tuple[int, int] | None:
        """(end, size) of the longest suffix of `generated` found in the prediction, nearest `expected`."""
        if not generated:
            return None
        ends = [index + 1 for index in self.positions.get(generated[-1], ())]
        for size in range(min(max_ngram, len(generated)), min_ngram - 1, -1):
            suffix = list(generated[len(generated) - size :])
            matches = [end for end in ends if end >= size and self.prediction[end - size : end] == suffix]
            if matches:
                return min(matches, key=lambda candidate: (abs(candidate - expected), candidate)), size
        return None


def with_prediction(drafter: Drafter | None, request_prediction: Sequence[int], inner_tokens: int) -> Drafter | None:
    """`drafter` with the request's prediction drafted first; `drafter` itself when there is none."""
    if not request_prediction:
        return drafter
    return PredictionDrafter(drafter, PredictionSettings(inner_tokens=inner_tokens))
