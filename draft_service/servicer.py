"""DraftService: one Propose stream per generation, each holding one drafter session."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc
from opentelemetry import trace

from specdec.acceptance_modes import TREE_REFUSAL, rule
from specdec.batching import BatchingOptions
from specdec.constraints.grammars import check_grammar_size
from specdec.constraints.matcher import GrammarConstraint
from specdec.drafters.base import Drafter, DraftRequest
from specdec.drafters.overlap import OverlappedDraftSession
from specdec.drafting_ceiling import time_draft_token
from specdec.engines.hf import LoadedModel
from specdec.enums import AcceptanceMode
from specdec.errors import InvalidRequestError, SpecdecError, check_token_ids
from specdec.limits import MAX_DRAFT_TOKENS, MAX_VOCAB_SIZE
from specdec.model_services.blocks import block_to_proto, penalties_from_proto, sampling_from_proto
from specdec.model_services.device_metrics import track_cuda
from specdec.serving.background import background_executor
from specdec.serving.metrics import DraftMetrics
from specdec.serving.pacing import KeyedRefusalPacing
from specdec.serving.rpc.convert import acceptance_from_proto, vocab_fingerprint
from specdec.serving.rpc.server import SessionLimit, abort_for, run_in_thread
from specdec.serving.rpc.streams import StreamGate
from specdec.tree import TreeShape
from specdec.v1 import common_pb2, draft_pb2, draft_pb2_grpc

log = logging.getLogger(__name__)
tracer = trace.get_tracer("specdec.draft")
DEFAULT_DRAFT_TOP_K = 32
MAX_TREE_NODES = 256  # per tree block, as GenerationRequest.tree_nodes allows
REFUSED_GRAMMARS_PER_S = 4  # per peer: opens whose grammar is refused are answered at this pace
MODEL_FREE_MAX_TOKENS = 2**20  # the sequence an n-gram session may mirror (it has no context of its own)


@dataclass
class LoadedDrafter:
    drafter: Drafter
    model: LoadedModel | None  # None for model-free drafters (n-gram)

    def status(self) -> dict:
        if self.model is None:
            return {"model": "", "vocab_fingerprint": "", "device": "cpu"}
        return {"model": self.model.source, "vocab_fingerprint": vocab_fingerprint(self.model.tokenizer), "device": str(self.model.device)}


class DraftServicer(draft_pb2_grpc.DraftServiceServicer):
    def __init__(
        self,
        max_sessions: int,
        metrics: DraftMetrics | None = None,
        overlap: bool = True,
        batching: BatchingOptions | None = None,
        open_timeout_s: float = 30.0,
    ) -> None:
        self.loaded: LoadedDrafter | None = None  # set once the model is loaded
        self.batching = batching  # how sessions share passes; None: one at a time
        self.overlap = overlap  # draft each next block while the verifier checks this one (drafters/overlap.py)
        self.metrics = metrics or DraftMetrics()
        self.sessions = SessionLimit(max_sessions, self.metrics)
        # Streams count as sessions once open. Verify is the one usual peer: it may open up to max_sessions at once.
        self.streams = StreamGate(open_timeout_s, max_sessions, "draft_service")
        self.executor = ThreadPoolExecutor(max_workers=min(32, max_sessions), thread_name_prefix="draft")
        self._status: dict = {}
        # Grammar matchers are built one at a time, at a lower priority than drafting (seconds for a large one).
        self.grammar_prep = background_executor("draft-grammar")
        self.refused_grammars = KeyedRefusalPacing(REFUSED_GRAMMARS_PER_S)

    def set_drafter(self, loaded: LoadedDrafter) -> None:
        self._status = loaded.status()
        if loaded.model is not None:
            track_cuda(self.metrics, loaded.model.device)
        if self.batching is not None:
            loaded = LoadedDrafter(loaded.drafter.batched(self.batching), loaded.model)
        self.loaded = loaded

    async def time_draft_step(self) -> float:
        """One draft-model token's cost, measured once at load for Status (verify bounds drafting's gain with it)."""
        model = self.loaded.model
        if model is None:
            return 0.0
        try:
            step_ms = await self._run(time_draft_token, self.loaded.drafter, model.vocab_size) or 0.0
        except Exception:  # a measurement only: verify then assumes no bound from the draft
            log.warning("could not time a draft step at load; verify will not bound drafting by it", exc_info=True)
            return 0.0
        self._status["draft_step_ms"] = step_ms
        log.info("a draft token costs %.1f ms here (measured at load)", step_ms)
        return step_ms

    async def _run(self, function, *args):
        return await run_in_thread(self.executor, function, *args)

    async def Propose(self, request_iterator: AsyncIterator[draft_pb2.ProposeRequest], context: grpc.aio.ServicerContext):
        if self.loaded is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the draft model is still loading")
        requests = aiter(request_iterator)
        opening = await self.streams.first_message(requests, context)
        if opening is None:
            return
        async with self.sessions.hold(context):
            sequence = self._sequence_check(opening.open.vocab_size)
            session = await self._open(opening, sequence, context)
            try:
                num_tokens = await _checked_draft_tokens(opening.open.num_draft_tokens, "open.num_draft_tokens", context)
                ahead = None
                while True:
                    response = await self._block(session, num_tokens, ahead, context)
                    # Runs while the block travels and the target verifies it; awaited before the next propose.
                    ahead = self._draft_ahead(session)
                    yield response
                    # NOTE: no idle timeout once open: verify keeps the stream through rounds it decodes alone.
                    message = await anext(requests, None)
                    if message is None:
                        return
                    num_tokens = await self._apply_feedback(session, message, sequence, context)
            finally:
                await self._run(session.close)

    def _sequence_check(self, claimed_vocab_size: int) -> SequenceCheck:
        """Ids the drafter can read (the model's own vocabulary, whatever the client claims) and a
        length its context holds."""
        model = self.loaded.model
        if model is None:
            return SequenceCheck(claimed_vocab_size, MODEL_FREE_MAX_TOKENS)
        return SequenceCheck(min(claimed_vocab_size, model.vocab_size), model.max_context)

    async def _open(
        self, message: draft_pb2.ProposeRequest, sequence: SequenceCheck, context: grpc.aio.ServicerContext
    ) -> OverlappedDraftSession:
        if message.WhichOneof("message") != "open":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the first Propose message must be `open`")
        try:
            check_grammar_size(message.open.grammar, "open.grammar")  # the cheap limit first, before any grammar work
            # NOTE: in a worker, one at a time: building a grammar's matcher over the draft's vocabulary can take seconds.
            if message.open.grammar:
                request = await run_in_thread(self.grammar_prep, self._draft_request, message.open, sequence)
            else:
                request = await self._run(self._draft_request, message.open, sequence)
            return OverlappedDraftSession(await self._run(self.loaded.drafter.open, request), request.draft_ahead_tokens)
        except InvalidRequestError as error:
            # NOTE: verify sends only grammars it compiled itself: a refused one is a direct client's, paced per peer
            # (a client looping megabytes of grammar, or pathological ones, would take the loop otherwise).
            if error.field == "open.grammar":
                await self.refused_grammars.pace(context.peer())
            await abort_for(context, error)
        except Exception as error:  # noqa: BLE001 -- mapped to a status by the one handler
            await abort_for(context, error)

    def _draft_request(self, opening: draft_pb2.ProposeOpen, sequence: SequenceCheck) -> DraftRequest:
        theirs, ours = opening.vocab_fingerprint, self._status.get("vocab_fingerprint", "")
        if theirs and ours and theirs != ours:
            raise SpecdecError("open.vocab_fingerprint: the draft's vocabulary differs from the target's; refusing to draft")
        if not 0 < opening.vocab_size <= MAX_VOCAB_SIZE:
            raise InvalidRequestError(
                "open.vocab_size", f"must be the width of the target's logits (1 to {MAX_VOCAB_SIZE}), got {opening.vocab_size}"
            )
        if not opening.prompt_ids:
            raise InvalidRequestError("open.prompt_ids", "must hold at least one token")
        sequence.extend(opening.prompt_ids, "open.prompt_ids")
        penalties = penalties_from_proto(opening.penalties, "open.penalties")
        penalties.check_vocab(opening.vocab_size, "open.penalties.logit_bias")
        check_token_ids(opening.stop_token_ids, opening.vocab_size, "open.stop_token_ids")
        return DraftRequest(
            prompt_ids=list(opening.prompt_ids),
            sampling=sampling_from_proto(opening.sampling, "open.sampling"),
            acceptance=acceptance_from_proto(opening.acceptance, "open.acceptance") or AcceptanceMode.REJECTION,
            seed=opening.seed,
            vocab_size=opening.vocab_size,
            draft_top_k=opening.draft_top_k or DEFAULT_DRAFT_TOP_K,
            tree=_tree_shape(opening),
            penalties=penalties,
            draft_ahead_tokens=0 if opening.tree_nodes else min(opening.draft_ahead_tokens, MAX_DRAFT_TOKENS),
            constraint=self._constraint(opening),
            min_tokens=opening.min_tokens,
            stop_token_ids=tuple(opening.stop_token_ids),
            draft_scope=_draft_scope(opening.draft_scope),
        )

    def _constraint(self, opening: draft_pb2.ProposeOpen) -> GrammarConstraint | None:
        """The target's grammar over this drafter's vocabulary; None without one, or for a model-free
        drafter (its lookups are then unmasked: the verifier's mask keeps the output right)."""
        model = self.loaded.model
        if not opening.grammar or model is None:
            return None
        return GrammarConstraint.for_model(opening.grammar, len(opening.prompt_ids), model, opening.vocab_size, "open.grammar")

    def _draft_ahead(self, session: OverlappedDraftSession) -> asyncio.Future | None:
        if not self.overlap:
            return None
        # NOTE: a plain executor future, not a task: draft_ahead never raises (errors wait for the next
        # propose), so a stream that ends first leaves nothing unretrieved behind.
        return asyncio.get_running_loop().run_in_executor(self.executor, session.draft_ahead)

    async def _block(
        self, session: OverlappedDraftSession, num_tokens: int, ahead: asyncio.Future | None, context: grpc.aio.ServicerContext
    ) -> draft_pb2.ProposeResponse:
        with tracer.start_as_current_span("draft.propose", attributes={"specdec.k": num_tokens}) as span:
            try:
                if ahead is not None:
                    await ahead  # one forward pass per session at a time: the pre-draft stops or finishes first
                block = await self._run(session.propose, num_tokens)
            except Exception as error:  # noqa: BLE001
                await abort_for(context, error)
            report = session.report
            span.set_attributes(
                {"specdec.drafted": len(block), "specdec.draft_ms": block.compute_ms, "specdec.predrafted": report.predrafted > 0}
            )
        if report.outcome is not None:
            self.metrics.predrafted_blocks.labels(report.outcome).inc()
            self.metrics.predraft_saved.inc(report.saved_ms / 1000)
        self.metrics.block_compute.observe(block.compute_ms / 1000)
        self.metrics.proposed_tokens.inc(len(block))
        return draft_pb2.ProposeResponse(block=block_to_proto(block), draft_ms=block.compute_ms)

    async def _apply_feedback(
        self, session: OverlappedDraftSession, message: draft_pb2.ProposeRequest, sequence: SequenceCheck, context: grpc.aio.ServicerContext
    ) -> int:
        if message.WhichOneof("message") != "feedback":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "after `open`, every Propose message must be `feedback`")
        feedback = message.feedback
        try:
            sequence.extend(feedback.appended_ids, "feedback.appended_ids", num_accepted=feedback.num_accepted)
        except InvalidRequestError as error:
            await abort_for(context, error)
        try:
            # Inline: feedback is bookkeeping only (the cache is trimmed lazily by the next propose);
            # with overlap it also tells a pre-draft in flight whether its guess held.
            session.feedback(feedback.num_accepted, list(feedback.appended_ids), list(feedback.accepted_nodes) or None)
        except ValueError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"feedback.num_accepted: {error}")
        num_tokens = await _checked_draft_tokens(feedback.num_draft_tokens, "feedback.num_draft_tokens", context)
        session.expect(num_tokens)
        return num_tokens

    async def Status(self, request: common_pb2.ServerStatusRequest, context: grpc.aio.ServicerContext) -> common_pb2.ServerStatus:
        loaded = self.loaded
        return common_pb2.ServerStatus(
            service="draft",
            drafter=loaded.drafter.name if loaded else "",
            active_sessions=self.sessions.active,
            max_sessions=self.sessions.max_sessions,
            vocab_size=loaded.model.vocab_size if loaded and loaded.model else 0,
            max_context=loaded.model.max_context if loaded and loaded.model else 0,
            **self._status,
        )


def _tree_shape(opening: draft_pb2.ProposeOpen) -> TreeShape | None:
    """The tree the verifier allows, checked; None for chains (tree_branching and tree_nodes both 0)."""
    if not opening.tree_branching and not opening.tree_nodes:
        return None
    if not opening.tree_branching or not opening.tree_nodes or opening.tree_nodes > MAX_TREE_NODES:
        raise InvalidRequestError("open.tree_nodes", f"a tree needs tree_branching >= 1 and 1 <= tree_nodes <= {MAX_TREE_NODES}")
    if not rule(acceptance_from_proto(opening.acceptance, "open.acceptance") or AcceptanceMode.REJECTION).verifies_trees:
        raise InvalidRequestError("open.acceptance", TREE_REFUSAL)
    return TreeShape(opening.tree_branching, opening.tree_nodes)


async def _checked_draft_tokens(num_tokens: int, field: str, context: grpc.aio.ServicerContext) -> int:
    if num_tokens > MAX_DRAFT_TOKENS:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: at most {MAX_DRAFT_TOKENS} per block, got {num_tokens}")
    return num_tokens


class SequenceCheck:
    """The token ids one Propose stream sends, checked as they come: ids the draft model has, and a
    sequence its context holds (the length is checked first, so a huge list costs no loop over it)."""

    def __init__(self, vocab_size: int, max_context: int) -> None:
        self.vocab_size, self.max_context = vocab_size, max_context
        self.length = 0

    def extend(self, token_ids, field: str, num_accepted: int = 0) -> None:
        self.length += num_accepted + len(token_ids)
        if self.length > self.max_context:
            raise InvalidRequestError(
                field, f"the sequence would have {self.length} tokens, past the draft model's context of {self.max_context}"
            )
        check_token_ids(token_ids, self.vocab_size, field)


MAX_DRAFT_SCOPE_CHARS = 256  # an API key id is 20


def _draft_scope(scope: str) -> str:
    if len(scope) > MAX_DRAFT_SCOPE_CHARS:
        raise InvalidRequestError("open.draft_scope", f"at most {MAX_DRAFT_SCOPE_CHARS} characters, got {len(scope)}")
    return scope
