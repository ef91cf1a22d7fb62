"""VerifyService: Generate (the service drafts remotely) and Verify (the client drafts)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc

from specdec.acceptance_modes import rule
from specdec.assembly import suffix_trees
from specdec.batching import SequenceRunner
from specdec.batching.service import service_batching
from specdec.drafting_ceiling import StepCosts, time_target_passes
from specdec.engines.base import TargetModel
from specdec.errors import InvalidRequestError
from specdec.generation import SpeculativeGenerator
from specdec.load_policy import LoadAwareSpeculation
from specdec.model_services.blocks import block_from_proto
from specdec.model_services.device_metrics import track_cuda
from specdec.output import GenerationChunk
from specdec.prompts import max_prompt_chars
from specdec.request import GenerationStats
from specdec.serving.background import background_executor
from specdec.serving.config import SpecdecConfig
from specdec.serving.metrics import VerifyMetrics
from specdec.serving.pacing import KeyedRefusalPacing
from specdec.serving.rpc.convert import vocab_fingerprint
from specdec.serving.rpc.server import SessionLimit, abort_for, run_in_thread
from specdec.serving.rpc.streams import StreamGate
from specdec.target_session import TargetSession
from specdec.v1 import common_pb2, verify_pb2, verify_pb2_grpc
from verify_service.remote_drafter import RemoteDrafter
from verify_service.requests import (
    VERIFY_MAX_CANDIDATES,
    check_prediction_size,
    check_prompt_size,
    check_request_limits,
    generate_overrides,
    generation_request,
)
from verify_service.responses import generate_response, verify_response

log = logging.getLogger(__name__)
# The client drafts, so it picks K: the budget stays the fixed cap, never adaptive. NOTE: Verify verifies chains only.
VERIFY_OVERRIDES = {"num_draft_tokens": VERIFY_MAX_CANDIDATES, "speculative": True, "adaptive_k": False, "tree_branching": 0}
PREP_WORKERS = 2  # tokenizing and checking requests: off the event loop, and apart from the generation workers
OVERSIZED_REFUSALS_PER_S = 4  # per peer: requests over a size limit, answered at this pace
LARGE_PROMPT_CHARS = 16_384  # prompts this long are tokenized one at a time (as grammars are compiled): short ones find a free prep worker


class VerifyServicer(verify_pb2_grpc.VerifyServiceServicer):
    def __init__(self, config: SpecdecConfig, metrics: VerifyMetrics | None = None) -> None:
        self.config = config
        self.target: TargetModel | None = None  # set once the model is loaded
        self.runner: SequenceRunner | None = None  # the target's sessions, batched: set with the target
        self.load_policy: LoadAwareSpeculation | None = None
        self.drafter: RemoteDrafter | None = None
        self.suffix = None  # SuffixTrees: suffix decoding's (suffix.enabled), before the remote draft
        self.fingerprint = ""
        self.metrics = metrics or VerifyMetrics()
        settings = config.verify_service
        self.sessions = SessionLimit(settings.max_sessions, self.metrics)
        self.executor = ThreadPoolExecutor(max_workers=min(32, settings.max_sessions), thread_name_prefix="verify")
        self.prep = ThreadPoolExecutor(max_workers=PREP_WORKERS, thread_name_prefix="verify-prep")
        self.streams = StreamGate(settings.stream_idle_timeout_s, settings.max_unopened_streams_per_peer, "verify_service")
        # Long prompts and grammars are prepared one at a time, at a lower priority: short plain requests always
        # find a free prep worker, and the passes on verify's core go first.
        self.heavy_prep = background_executor("verify-heavy-prep")
        self.oversized = KeyedRefusalPacing(OVERSIZED_REFUSALS_PER_S)
        self.max_prompt_chars = 0  # set with the target

    def set_target(self, target: TargetModel, drafter: RemoteDrafter | None) -> None:
        self.fingerprint = vocab_fingerprint(target.tokenizer)
        self.max_prompt_chars = max_prompt_chars(target.tokenizer, target.max_context)
        track_cuda(self.metrics, target.device)
        self.drafter = drafter
        self.suffix = suffix_trees(self.config)
        self.runner = target.batched_runner(
            service_batching(self.config.verify_service, self.config.serving.max_batch_size, self.metrics.registry)
        )
        settings = self.config.verify_service
        if settings.load_aware_speculation:
            self.load_policy = LoadAwareSpeculation(lambda: self.sessions.active, settings.load_window_s)
            for sampled, kind in LoadAwareSpeculation.KINDS.items():
                self.metrics.load_policy_drafting.labels(requests=kind).set_function(functools.partial(self.load_policy.drafting, sampled))
        self.target = target

    async def bound_drafting(self, draft_step_ms: float) -> None:
        """Time the target's passes (one token, K + 1) once at load and start the load-aware policy at one session in
        the mode they and the draft's step allow (specdec/drafting_ceiling.py)."""
        if self.load_policy is None:
            return
        num_draft_tokens = self.config.speculative.draft_tokens
        try:
            passes = await self._run(time_target_passes, self.runner.open_sequence, self.target.vocab_size, num_draft_tokens)
        except Exception:  # a measurement only: the policy keeps its default start
            log.warning("could not time the target's passes at load; the load-aware policy starts as by default", exc_info=True)
            return
        if passes is None:
            return
        costs = StepCosts(*passes, num_draft_tokens=num_draft_tokens, draft_ms=draft_step_ms)
        drafting = self.load_policy.set_gain_bound(costs.gain_bound())
        log.info("%s: %s", costs.describe(), "drafting first there" if drafting else "plain steps first there, drafting probed")

    async def _run(self, function, *args):
        return await run_in_thread(self.executor, function, *args)

    async def _require_target(self, context: grpc.aio.ServicerContext) -> TargetModel:
        if self.target is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the target model is still loading")
        return self.target

    async def _generation_request(self, options: verify_pb2.GenerationOptions, target: TargetModel, context, overrides: Callable[[], dict]):
        """Check the cheap limits (here, on the loop), then tokenize, validate and compile the grammar in a
        prep worker; `overrides()` gives the request-level fields (refused with the rest)."""
        try:
            fields = overrides()
            characters = await self._within_limits(options, fields.get("prediction", ""), target, context)
            prepare = functools.partial(generation_request, options, target, self.config, **fields)
            if characters < LARGE_PROMPT_CHARS and not options.grammar:
                return await run_in_thread(self.prep, prepare)
            return await run_in_thread(self.heavy_prep, prepare)
        except Exception as error:  # noqa: BLE001 -- mapped to a status by the one handler
            await abort_for(context, error)

    async def _within_limits(self, options: verify_pb2.GenerationOptions, prediction: str, target: TargetModel, context) -> int:
        """The size limits, checked from lengths alone; past one, the refusal is paced per peer (the gateway
        never sends such a request: a client that loops megabytes of them would take the loop otherwise).
        Returns the characters there are to tokenize."""
        try:
            check_request_limits(options)
            return check_prompt_size(options, target.max_context, self.max_prompt_chars) + check_prediction_size(
                prediction, target.max_context, self.max_prompt_chars
            )
        except InvalidRequestError:
            await self.oversized.pace(context.peer())
            raise

    async def Generate(self, request: verify_pb2.GenerateRequest, context: grpc.aio.ServicerContext):
        target = await self._require_target(context)
        async with self.sessions.hold(context):
            generation = await self._generation_request(request.options, target, context, functools.partial(generate_overrides, request))
            drafter = self.drafter.with_deadline(context.time_remaining()) if self.drafter else None
            stats = GenerationStats()
            chunks = SpeculativeGenerator(target, drafter, self.runner, self.load_policy, self.suffix).stream(generation, stats)
            timing = _EmitTiming(self.metrics)
            completion_tokens = 0
            async for chunk in self._drive(chunks, context):
                completion_tokens += len(chunk.token_ids)
                self._record_round(chunk, timing)
                yield generate_response(chunk, generation, stats, completion_tokens, target.tokenizer, request.provenance)
            if stats.fallback:
                self.metrics.fallbacks.inc()
            if generation.speculative:
                self.metrics.speculative_requests.labels(generation.speculation_policy.value, "yes" if stats.draft_tokens else "no").inc()

    def _record_round(self, chunk: GenerationChunk, timing: _EmitTiming) -> None:
        info = chunk.round
        self.metrics.record_round(info.num_candidates, info.num_accepted, info.drafter)
        if info.chosen_k is not None:
            self.metrics.chosen_k.observe(info.chosen_k)
        for phase, milliseconds in (("draft", info.draft_ms), ("target", info.target_ms), ("transport", info.transport_ms)):
            if phase == "target" or info.num_candidates:
                self.metrics.round_duration.labels(phase).observe(milliseconds / 1000)
        timing.emitted(len(chunk.token_ids))

    async def _drive(self, chunks: Iterator[GenerationChunk], context: grpc.aio.ServicerContext) -> AsyncIterator[GenerationChunk]:
        """Step the synchronous loop in a worker thread, one round at a time.

        NOTE: when the caller goes away, the in-flight round finishes first (a generator cannot be
        closed while it runs), then closing it frees the target cache and cancels the draft stream.
        """
        pending = None
        try:
            while True:
                pending = asyncio.ensure_future(self._run(next, chunks, None))
                chunk = await asyncio.shield(pending)
                pending = None
                if chunk is None:
                    return
                yield chunk
        except Exception as error:  # noqa: BLE001
            await abort_for(context, error)
        finally:
            if pending is not None:
                await asyncio.wait([pending])
            await self._run(chunks.close)

    async def Verify(self, request_iterator: AsyncIterator[verify_pb2.VerifyRequest], context: grpc.aio.ServicerContext):
        target = await self._require_target(context)
        requests = aiter(request_iterator)
        # NOTE: a stream is a session only once `open` has arrived; until then the gate bounds and times it.
        opening = await self.streams.first_message(requests, context)
        if opening is None:
            return
        async with self.sessions.hold(context):
            session = await self._open_verify_session(opening, target, context)
            try:
                yield verify_response(session, None, None)
                while (message := await self.streams.next_message(requests, context)) is not None:
                    yield await self._verify_block(session, message, context)
            finally:
                await self._run(session.close)

    async def _open_verify_session(self, message: verify_pb2.VerifyRequest, target: TargetModel, context) -> TargetSession:
        if message.WhichOneof("message") != "open":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "send `open` before any candidate block")
        generation = await self._generation_request(message.open.options, target, context, VERIFY_OVERRIDES.copy)
        try:
            return await self._run(TargetSession, target, generation, self.runner)
        except Exception as error:  # noqa: BLE001
            await abort_for(context, error)

    async def _verify_block(self, session: TargetSession, message: verify_pb2.VerifyRequest, context) -> verify_pb2.VerifyResponse:
        if message.WhichOneof("message") != "block":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the session is already open: send candidate blocks")
        if session.finished:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"the generation has finished ({session.output.finish_reason}); close the stream"
            )
        try:
            if message.block.parent_indices:
                raise InvalidRequestError("block.parent_indices", "the Verify RPC verifies chains only: send no parent_indices")
            if len(message.block.token_ids) > session.draft_budget():
                raise InvalidRequestError(
                    "block.token_ids",
                    f"{len(message.block.token_ids)} candidates, but this round's budget is {session.draft_budget()} (max_candidates)",
                )
            block = await run_in_thread(
                self.prep, block_from_proto, message.block, session.target.vocab_size, rule(session.mode).needs_draft_probs
            )
            verdict, chunk = await self._run(session.step, block)
        except Exception as error:  # noqa: BLE001
            await abort_for(context, error)
        self.metrics.record_round(len(block), verdict.num_accepted)
        self.metrics.generated_tokens.inc(len(chunk.token_ids))
        return verify_response(session, verdict, chunk)

    async def Status(self, request: common_pb2.ServerStatusRequest, context: grpc.aio.ServicerContext) -> common_pb2.ServerStatus:
        target = self.target
        status = common_pb2.ServerStatus(service="verify", active_sessions=self.sessions.active, max_sessions=self.sessions.max_sessions)
        if target is not None:
            status.model, status.vocab_size, status.device = target.source, target.vocab_size, str(target.device)
            status.vocab_fingerprint, status.max_context = self.fingerprint, target.max_context
            status.max_prompt_chars = self.max_prompt_chars
        return status


class _EmitTiming:
    """Time to first token and inter-token latency, as the caller of Generate sees them."""

    def __init__(self, metrics: VerifyMetrics) -> None:
        self.metrics = metrics
        self.started = self.last = time.perf_counter()
        self.first = True

    def emitted(self, num_tokens: int) -> None:
        if not num_tokens:
            return
        now = time.perf_counter()
        self.metrics.generated_tokens.inc(num_tokens)
        if self.first:
            self.metrics.time_to_first_token.observe(now - self.started)
            self.first = False
            num_tokens -= 1  # the first token's latency is the TTFT
        for _ in range(num_tokens):  # tokens of one round arrive together: spread the round's time
            self.metrics.inter_token_latency.observe((now - self.last) / max(1, num_tokens))
        self.last = now
