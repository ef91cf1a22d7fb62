"""The in-process speculative loop: the library API, and the reference the services match."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from specdec.acceptance import AcceptanceMode, RoundVerdict, coupled_accept, greedy_accept, rejection_accept
from specdec.drafters.base import DraftBlock, Drafter, DraftRequest, DraftSession
from specdec.errors import DraftUnavailableError, InvalidRequestError
from specdec.kv_cache import CachedSequence
from specdec.models import LoadedModel
from specdec.noise import keyed_gumbel
from specdec.request import GenerationRequest, GenerationStats
from specdec.sampling import processed_probs
from specdec.text import IncrementalDetokenizer, StopStringMatcher

log = logging.getLogger(__name__)


@dataclass
class GenerationChunk:
    """What one round adds to the output."""

    token_ids: list[int]
    text: str
    finish_reason: str | None = None  # "stop" | "length" once finished


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
        self._check_fits(request)
        target = CachedSequence(self.target.model)
        draft = self._open_draft(request, stats)
        output = _OutputTracker(self.target, request)
        committed = list(request.prompt_ids)
        generator = torch.Generator().manual_seed(request.seed)
        try:
            while output.finish_reason is None:
                num_draft = min(request.num_draft_tokens, output.remaining_budget(len(committed)) - 1)
                block, draft = _propose(draft, num_draft, stats)
                logits = target.advance(committed + block.candidate_ids.tolist(), len(block) + 1)
                verdict = self._verify(request, block, logits, len(committed), generator)
                if draft is not None:
                    draft = _feedback(draft, verdict, stats)
                if len(block):
                    stats.record_round(len(block), verdict.num_accepted)
                committed.extend(verdict.token_ids)
                yield output.push(verdict.token_ids)
        finally:
            target.release()
            if draft is not None:
                draft.close()

    def _check_fits(self, request: GenerationRequest) -> None:
        if len(request.prompt_ids) >= self.target.max_context:
            raise InvalidRequestError(
                "prompt", f"{len(request.prompt_ids)} prompt tokens leave no room in the {self.target.max_context}-token context"
            )

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

    def _verify(self, request: GenerationRequest, block: DraftBlock, logits: torch.Tensor, start: int, generator: torch.Generator) -> RoundVerdict:
        target_probs = processed_probs(logits, request.sampling)  # [k + 1, vocab]
        mode = request.effective_acceptance
        if mode is AcceptanceMode.GREEDY:
            return greedy_accept(block.candidate_ids.to(logits.device), target_probs)
        if mode is AcceptanceMode.COUPLED:
            positions = torch.arange(start, start + len(block) + 1, device=logits.device)
            gumbel = keyed_gumbel(request.seed, positions, target_probs.shape[-1])
            return coupled_accept(block.candidate_ids.to(logits.device), target_probs, gumbel)
        draft_probs = block.draft_probs if block.draft_probs is not None else DraftBlock.empty().draft_probs
        return rejection_accept(block.candidate_ids, draft_probs, target_probs, generator)


def _propose(draft: DraftSession | None, num_tokens: int, stats: GenerationStats) -> tuple[DraftBlock, DraftSession | None]:
    """The drafter's block, or an empty one (a target-only step) when it is absent or fails."""
    if draft is None:
        return DraftBlock.empty(), None
    try:
        return draft.propose(max(num_tokens, 0)), draft
    except DraftUnavailableError as error:
        log.warning("drafter failed, continuing with the target alone: %s", error)
        stats.fallback = True
        draft.close()
        return DraftBlock.empty(), None


def _feedback(draft: DraftSession, verdict: RoundVerdict, stats: GenerationStats) -> DraftSession | None:
    try:
        draft.feedback(verdict.num_accepted, [verdict.next_token_id])
        return draft
    except DraftUnavailableError as error:
        log.warning("drafter failed, continuing with the target alone: %s", error)
        stats.fallback = True
        draft.close()
        return None


class _OutputTracker:
    """Applies EOS, stop strings, max_tokens and the context limit to the emitted tokens."""

    def __init__(self, target: LoadedModel, request: GenerationRequest) -> None:
        self.request = request
        self.eos_ids = frozenset() if request.ignore_eos else target.eos_token_ids
        self.max_context = target.max_context
        self.detokenizer = IncrementalDetokenizer(target.tokenizer)
        self.stop_matcher = StopStringMatcher(request.stop)
        self.num_generated = 0
        self.finish_reason: str | None = None

    def remaining_budget(self, sequence_length: int) -> int:
        """Tokens this generation may still emit (max_tokens and the context window)."""
        return min(self.request.max_tokens - self.num_generated, self.max_context - sequence_length)

    def push(self, token_ids: list[int]) -> GenerationChunk:
        kept, text = [], []
        for token_id in token_ids:
            if token_id in self.eos_ids:
                self.finish_reason = "stop"
                break
            kept.append(token_id)
            self.num_generated += 1
            text.append(self.stop_matcher.push(self.detokenizer.push(token_id)))
            if self.stop_matcher.stopped:
                self.finish_reason = "stop"
                break
            if self.num_generated >= self.request.max_tokens or self.remaining_budget(len(self.request.prompt_ids) + self.num_generated) <= 0:
                self.finish_reason = "length"
                break
        if self.finish_reason is not None and not self.stop_matcher.stopped:
            text.append(self.stop_matcher.push(self.detokenizer.flush()))
        if self.finish_reason is not None and not self.stop_matcher.stopped:
            text.append(self.stop_matcher.flush())
        return GenerationChunk(kept, "".join(text), self.finish_reason)
