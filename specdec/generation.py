"""The in-process speculative loop: the library API, and the reference the services match."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace

from specdec.batching import SequenceRunner
from specdec.constraints.matcher import GrammarConstraint
from specdec.drafters.base import DraftBlock, Drafter, DraftRequest, DraftSession
from specdec.drafters.prediction import with_prediction
from specdec.drafters.suffix import with_suffix
from specdec.engines.hf import LoadedModel
from specdec.enums import SpeculationPolicy, TokenSource
from specdec.errors import DraftUnavailableError
from specdec.load_policy import KindPolicy, LoadAwareSpeculation
from specdec.output import GenerationChunk
from specdec.request import GenerationRequest, GenerationStats

if TYPE_CHECKING:
    from specdec.drafters.suffix_cache import SuffixTrees
from specdec.target_session import TargetSession

log = logging.getLogger(__name__)
tracer = trace.get_tracer("specdec")


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

    def __init__(
        self,
        target: LoadedModel,
        drafter: Drafter | None = None,
        runner: SequenceRunner | None = None,
        load_policy: LoadAwareSpeculation | None = None,
        suffix: SuffixTrees | None = None,
    ) -> None:
        self.target = target
        self.drafter = drafter
        self.runner = runner  # where target sessions get caches and passes (a service's batched one); None: the model's own
        self.load_policy = load_policy  # a service's: no drafting at loads where it loses throughput
        self.suffix = suffix  # suffix decoding's trees, tried before `drafter` each round; None: off

    def generate(self, request: GenerationRequest) -> GenerationResult:
        stats = GenerationStats()
        text, token_ids, finish_reason = [], [], "length"
        for chunk in self.stream(request, stats):
            text.append(chunk.text)
            token_ids.extend(chunk.token_ids)
            finish_reason = chunk.finish_reason or finish_reason
        return GenerationResult("".join(text), token_ids, finish_reason, stats)

    def stream(self, request: GenerationRequest, stats: GenerationStats | None = None) -> Iterator[GenerationChunk]:
        """Yield each round's new tokens and text; the last chunk carries the finish reason.

        Traced as one `generate` span with a `speculative.round` span per round. NOTE: spans are
        started with explicit parents, never attached across a `yield` (each step may run in a
        different thread and context).
        """
        stats = stats if stats is not None else GenerationStats()
        span = tracer.start_span(
            "generate",
            attributes={
                "specdec.prompt_tokens": len(request.prompt_ids),
                "specdec.max_tokens": request.max_tokens,
                "specdec.acceptance": request.effective_acceptance.value,
            },
        )
        parent = trace.set_span_in_context(span)
        target = TargetSession(self.target, request, self.runner)
        draft = _Draft(self._open_draft_under(parent, request, target.constraint, stats), stats, span)
        finished = False
        try:
            for index in itertools.count():
                if target.finished:
                    finished = True
                    return
                chunk = self._round(target, draft, stats, parent, index)
                yield chunk
        except Exception as error:
            span.record_exception(error)
            span.set_status(trace.StatusCode.ERROR, str(error))
            finished = True
            raise
        finally:
            if not finished:
                span.add_event("cancelled", {"specdec.generated_tokens": target.output.num_generated})
            span.set_attributes(
                {
                    "specdec.rounds": stats.rounds,
                    "specdec.draft_tokens": stats.draft_tokens,
                    "specdec.accepted_tokens": stats.accepted_tokens,
                    "specdec.fallback": stats.fallback,
                }
            )
            target.close()
            draft.close()
            span.end()

    def _round(self, target: TargetSession, draft: _Draft, stats: GenerationStats, parent, index: int) -> GenerationChunk:
        span = tracer.start_span("speculative.round", context=parent)
        started = time.perf_counter()
        request = target.request
        policy = self._policy_for(request)
        # NOTE: round 0 never drafts (nor asks the policy): the first token comes from the target's prefill
        # and streams at once; a draft service prefills (and drafts ahead, DraftRequest.draft_ahead_tokens) meanwhile.
        policy_drafting = index > 0 and (policy is None or policy.drafting_allowed())
        budget = target.draft_budget(self.suffix.settings.draft_tokens if self.suffix is not None else 0) if policy_drafting else 0
        block = draft.propose(budget)
        drafting = draft.session is not None  # not target-only, and the drafter did not just fail
        propose_ms = (time.perf_counter() - started) * 1000
        verdict, chunk = target.step(block)
        if policy is not None and index:
            # NOTE: a session's first rounds, and its first after the mode changed, carry one-off work: the
            # prefills, and a draft catching up on the tokens of its plain rounds (for a draft as deep as the
            # target, as long as a prefill). Only rounds in the mode of the round before measure the mode.
            if draft.last_mode == policy_drafting:
                policy.record_round(policy_drafting, len(chunk.token_ids), time.perf_counter() - started)
            draft.last_mode = policy_drafting
        draft.feedback(verdict.num_accepted, [verdict.next_token_id], verdict.accepted_nodes)
        drafter = block.candidate_sources()[0].value if len(block) else None
        if drafter is not None:
            stats.record_round(len(block), verdict.num_accepted)
            stats.record_drafter(drafter, len(block), verdict.num_accepted)
        if block.sources[:1] == (TokenSource.PREDICTION,):
            stats.record_prediction(len(block), verdict.num_accepted)
        chunk.round = info = replace(
            chunk.round,
            transport_ms=max(0.0, propose_ms - block.compute_ms),
            fallback=stats.fallback,
            chosen_k=budget if drafting else None,
            drafter=drafter,
        )
        target.learn_from_round(info)
        span.set_attributes(
            {
                "specdec.round": index,
                "specdec.k": budget,
                "specdec.drafted": info.num_candidates,
                "specdec.accepted": info.num_accepted,
                "specdec.draft_ms": info.draft_ms,
                "specdec.target_ms": info.target_ms,
                "specdec.transport_ms": info.transport_ms,
                "specdec.fallback": info.fallback,
            }
        )
        span.end()
        return chunk

    def _policy_for(self, request: GenerationRequest) -> KindPolicy | None:
        # NOTE: requests without speculation, that draft always, or that bring their own draft (a prediction:
        # asked for, and free to draft), neither ask the load policy nor count in its measurements.
        auto = request.speculative and request.speculation_policy is SpeculationPolicy.AUTO and not request.prediction_ids
        return self.load_policy.for_request(not request.sampling.is_greedy) if auto and self.load_policy else None

    def _open_draft_under(
        self, parent, request: GenerationRequest, constraint: GrammarConstraint | None, stats: GenerationStats
    ) -> DraftSession | None:
        # Attached only for this call, so a remote draft's stream becomes a child of `generate`.
        token = otel_context.attach(parent)
        try:
            return self._open_draft(request, constraint, stats)
        finally:
            otel_context.detach(token)

    def _ahead_of_first_token(self, request: GenerationRequest) -> int:
        """Candidates the draft may prepare while the target decodes the first token: none for trees
        (overlap drafts chains), nor when the load policy has drafting off."""
        policy = self._policy_for(request)
        if request.tree is not None or not (policy is None or policy.drafting_allowed()):
            return 0
        return min(request.num_draft_tokens, max(0, request.max_tokens - 2))

    def _open_draft(self, request: GenerationRequest, constraint: GrammarConstraint | None, stats: GenerationStats) -> DraftSession | None:
        # The request's prediction (if any) is drafted from first, here beside the verifier: no round trip for it.
        drafter = with_suffix(self.drafter, self.suffix, request.num_draft_tokens)
        drafter = with_prediction(drafter, request.prediction_ids, request.num_draft_tokens)
        if not request.speculative or drafter is None:
            return None
        draft_request = DraftRequest(
            prompt_ids=list(request.prompt_ids),
            sampling=request.sampling,
            acceptance=request.effective_acceptance,
            seed=request.seed,
            vocab_size=self.target.vocab_size,
            draft_top_k=request.draft_top_k,
            tree=request.tree,
            penalties=request.penalties,
            prediction_ids=tuple(request.prediction_ids),
            draft_ahead_tokens=self._ahead_of_first_token(request),
            # The draft's own matcher (a copy of the target's): it drafts ahead in another thread while the target verifies.
            constraint=constraint.fork() if constraint is not None else None,
            min_tokens=request.min_tokens,
            stop_token_ids=tuple(sorted(self.target.eos_token_ids)),
            draft_scope=request.draft_scope,
        )
        try:
            return drafter.open(draft_request)
        except DraftUnavailableError as error:
            log.warning("drafter unavailable, decoding with the target alone: %s", error)
            trace.get_current_span().add_event("fallback", {"specdec.reason": str(error)})
            stats.fallback = True
            return None


class _Draft:
    """A draft session that, once it fails, is closed and replaced by target-only steps."""

    def __init__(self, session: DraftSession | None, stats: GenerationStats, span: trace.Span) -> None:
        self.session = session
        self.stats = stats
        self.span = span
        self.last_mode: bool | None = None  # whether the load-aware policy let the last round draft

    def propose(self, num_tokens: int) -> DraftBlock:
        if self.session is None:
            return DraftBlock.empty()
        try:
            return self.session.propose(num_tokens)
        except DraftUnavailableError as error:
            self._fail(error)
            return DraftBlock.empty()

    def feedback(self, num_accepted: int, appended_ids: list[int], accepted_nodes: list[int] | None = None) -> None:
        if self.session is None:
            return
        try:
            self.session.feedback(num_accepted, appended_ids, accepted_nodes)
        except DraftUnavailableError as error:
            self._fail(error)

    def _fail(self, error: DraftUnavailableError) -> None:
        log.warning("drafter failed, continuing with the target alone (still lossless): %s", error)
        self.span.add_event("fallback", {"specdec.reason": str(error)})
        self.stats.fallback = True
        self.close()

    def close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            session.close()
