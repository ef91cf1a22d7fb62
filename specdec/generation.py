"""The in-process speculative loop: the library API, and the reference the services match."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from specdec.drafters.base import DraftBlock, Drafter, DraftRequest, DraftSession
from specdec.errors import DraftUnavailableError
from specdec.models import LoadedModel
from specdec.output import GenerationChunk
from specdec.request import GenerationRequest, GenerationStats
from specdec.target_session import TargetSession

log = logging.getLogger(__name__)


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    finish_reason: str
    stats: GenerationStats = field(default_factory=GenerationStats)

    def as_dict(self) -> dict:
        return {"text": self.text, "token_ids": self.token_ids, "finish_reason": self.finish_reason, "stats": self.stats.as_dict()}


class SpeculativeGenerator:
    """Drafter proposes, target verifies in one forward pass, acceptance keeps it lossless."""

    def __init__(self, target: LoadedModel, drafter: Drafter | None = None) -> None:
        self.target = target
        self.drafter = drafter

    def generate(self, request: GenerationRequest) -> GenerationResult:
        stats = GenerationStats()
        text, token_ids, finish_reason = [], [], "length"
        for chunk in self.stream(request, stats):
            text.append(chunk.text)
            token_ids.extend(chunk.token_ids)
            finish_reason = chunk.finish_reason or finish_reason
        return GenerationResult("".join(text), token_ids, finish_reason, stats)

    def stream(self, request: GenerationRequest, stats: GenerationStats | None = None) -> Iterator[GenerationChunk]:
        """Yield each round's new tokens and text; the last chunk carries the finish reason."""
        stats = stats if stats is not None else GenerationStats()
        target = TargetSession(self.target, request)
        draft = _Draft(self._open_draft(request, stats), stats)
        try:
            while not target.finished:
                started = time.perf_counter()
                block = draft.propose(target.draft_budget())
                propose_ms = (time.perf_counter() - started) * 1000
                verdict, chunk = target.step(block)
                draft.feedback(verdict.num_accepted, [verdict.next_token_id])
                if len(block):
                    stats.record_round(len(block), verdict.num_accepted)
                chunk.round = replace(chunk.round, transport_ms=max(0.0, propose_ms - block.compute_ms), fallback=stats.fallback)
                yield chunk
        finally:
            target.close()
            draft.close()

    def _open_draft(self, request: GenerationRequest, stats: GenerationStats) -> DraftSession | None:
        if not request.speculative or self.drafter is None:
            return None
        draft_request = DraftRequest(
            prompt_ids=list(request.prompt_ids),
            sampling=request.sampling,
            acceptance=request.effective_acceptance,
            seed=request.seed,
            vocab_size=self.target.vocab_size,
            draft_top_k=request.draft_top_k,
        )
        try:
            return self.drafter.open(draft_request)
        except DraftUnavailableError as error:
            log.warning("drafter unavailable, decoding with the target alone: %s", error)
            stats.fallback = True
            return None


class _Draft:
    """A draft session that, once it fails, is closed and replaced by target-only steps."""

    def __init__(self, session: DraftSession | None, stats: GenerationStats) -> None:
        self.session = session
        self.stats = stats

    def propose(self, num_tokens: int) -> DraftBlock:
        if self.session is None:
            return DraftBlock.empty()
        try:
            return self.session.propose(num_tokens)
        except DraftUnavailableError as error:
            self._fail(error)
            return DraftBlock.empty()

    def feedback(self, num_accepted: int, appended_ids: list[int]) -> None:
        if self.session is None:
            return
        try:
            self.session.feedback(num_accepted, appended_ids)
        except DraftUnavailableError as error:
            self._fail(error)

    def _fail(self, error: DraftUnavailableError) -> None:
        log.warning("drafter failed, continuing with the target alone (still lossless): %s", error)
        self.stats.fallback = True
        self.close()

    def close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            session.close()
