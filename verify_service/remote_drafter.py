"""A Drafter whose sessions are Propose streams to a draft service.

The core loop runs in a worker thread and is synchronous; the stream lives on the service's
event loop. Each propose is one round trip (the previous round's feedback rides along with the
request for the next block) bounded by the per-round deadline; any failure raises
DraftUnavailableError, which makes the loop continue with the target alone.

Blocks the draft service never saw (an empty local block, or another drafter's recorded in this
session's sequence, as drafters/prediction.py does) reach it as appended tokens in the next feedback.

The session is catching up until the draft has answered its first block (the draft service
prefills the prompt, as the target does, and drafts ahead), and again whenever the next exchange
carries more than `_CATCH_UP_BACKLOG_TOKENS` tokens the draft has not seen (a run of a prediction's
blocks, or of plain rounds the load policy chose): on a long prompt or run, a small draft on one CPU
thread may take seconds longer than the target. Meanwhile rounds do not wait for it: after
`_CATCH_UP_WAIT_S` the round runs as a plain target step, the exchange stays in flight, and the
first round after it is answered sends the tokens decoded meanwhile as feedback (its block, drafted
for an earlier position, is dropped). A draft that has not caught up after `_CATCH_UP_LIMIT_S` has failed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Sequence
from dataclasses import replace

import grpc

from specdec.acceptance_modes import rule
from specdec.drafters.base import CommittedSequence, DraftBlock, DraftRequest
from specdec.errors import DraftUnavailableError, InvalidRequestError
from specdec.model_services.blocks import block_from_proto
from specdec.serving.rpc.convert import acceptance_to_proto, penalties_to_proto, sampling_to_proto
from specdec.v1 import draft_pb2, draft_pb2_grpc

log = logging.getLogger(__name__)

_CATCH_UP_WAIT_S = 0.25  # about a few target steps: a short prompt's draft answers within it
_CATCH_UP_LIMIT_S = 60.0
_CATCH_UP_BACKLOG_TOKENS = 16  # unseen tokens in one exchange beyond which the draft is catching up (a round adds K + 1)


class RemoteDrafter:
    name = "remote"

    def __init__(
        self,
        stub: draft_pb2_grpc.DraftServiceStub,
        loop: asyncio.AbstractEventLoop,
        round_timeout_s: float,
        vocab_fingerprint: str = "",
        deadline_s: float | None = None,
    ) -> None:
        self.stub = stub
        self.loop = loop
        self.round_timeout_s = round_timeout_s
        self.vocab_fingerprint = vocab_fingerprint
        self.deadline_s = deadline_s

    def with_deadline(self, deadline_s: float | None) -> RemoteDrafter:
        """The same drafter for one request: its Propose stream ends when the request's deadline does."""
        return RemoteDrafter(self.stub, self.loop, self.round_timeout_s, self.vocab_fingerprint, deadline_s)

    def open(self, request: DraftRequest) -> RemoteDraftSession:
        return RemoteDraftSession(self, request, self.deadline_s)


class RemoteDraftSession:
    def __init__(self, drafter: RemoteDrafter, request: DraftRequest, deadline_s: float | None) -> None:
        self.drafter = drafter
        self.request = request
        self.deadline_s = deadline_s
        self.committed = CommittedSequence(list(request.prompt_ids))
        self.call: grpc.aio.StreamStreamCall | None = None
        # The feedback the draft service has not been sent yet: (accepted of its last block, appended, accepted nodes).
        self.pending_feedback: tuple[int, list[int], list[int]] | None = None
        self.remote_block_out = False  # the last block recorded is the draft service's (its feedback is owed)
        self.closed = False
        self.caught_up = False  # the draft has answered a block: it has prefilled
        self.late: tuple[concurrent.futures.Future, float] | None = None  # an exchange still in flight while catching up, since when

    def propose(self, num_tokens: int) -> DraftBlock:
        if self.closed:
            raise DraftUnavailableError("draft session already closed")
        if self.late is not None and not self._late_answer_arrived():
            return self._local_empty()
        if num_tokens <= 0 and (self.call is not None or not self.request.draft_ahead_tokens):
            # Nothing to draft (last token of the budget, or plain rounds the load policy chose): no round
            # trip; the feedback for this round rides along with the next request, merged with what is still
            # pending. NOTE: nor is the stream opened for it, unless the draft is to draft ahead of the first
            # token: opened here, each request of a service in plain steps made the draft prefill its prompt
            # for nothing and waited for it (up to _CATCH_UP_WAIT_S), 4-8% of throughput at 8 sessions.
            return self._local_empty()
        catching_up = not self.caught_up or len(self.pending_feedback[1] if self.pending_feedback else ()) > _CATCH_UP_BACKLOG_TOKENS
        messages = self._next_messages(num_tokens)
        future = asyncio.run_coroutine_threadsafe(self._exchange(messages), self.drafter.loop)
        try:
            response = future.result(timeout=_CATCH_UP_WAIT_S if catching_up else self.drafter.round_timeout_s)
        except concurrent.futures.TimeoutError as error:
            if catching_up:
                self.late = (future, time.monotonic())
                return self._local_empty()
            future.cancel()
            raise DraftUnavailableError(
                f"the draft missed its per-round deadline of {self.drafter.round_timeout_s * 1000:.0f} ms"
            ) from error
        except Exception as error:
            raise _unavailable(error) from error
        block = self._checked_block(response, num_tokens)
        self.caught_up = self.caught_up or num_tokens > 0
        self.committed.record_block(block)
        self.remote_block_out = True
        return block

    def _local_empty(self) -> DraftBlock:
        """A round without the draft service: its tokens reach it as appended feedback later."""
        block = DraftBlock.empty()
        self.committed.record_block(block)
        return block

    def _late_answer_arrived(self) -> bool:
        """Whether the exchange in flight has been answered; its block is dropped (drafted for an
        earlier position), and the feedback pending since says 0 of it were accepted."""
        future, since = self.late
        if not future.done():
            if time.monotonic() - since > _CATCH_UP_LIMIT_S:
                raise DraftUnavailableError(f"the draft did not catch up within {_CATCH_UP_LIMIT_S:.0f} s")
            return False
        self.late = None
        try:
            future.result()
        except Exception as error:
            raise _unavailable(error) from error
        self.caught_up = True
        return True

    def _next_messages(self, num_tokens: int) -> list[draft_pb2.ProposeRequest]:
        """The request for the next block: the feedback owed, or `open` (then, when tokens were
        committed before the stream opened, an empty first block and those tokens as feedback)."""
        pending, self.pending_feedback = self.pending_feedback, None
        messages = []
        if self.call is None:
            request = self.request
            messages.append(
                draft_pb2.ProposeRequest(
                    open=draft_pb2.ProposeOpen(
                        prompt_ids=request.prompt_ids,
                        sampling=sampling_to_proto(request.sampling),
                        seed=request.seed,
                        acceptance=acceptance_to_proto(request.acceptance),
                        num_draft_tokens=0 if pending else num_tokens,
                        draft_top_k=request.draft_top_k,
                        vocab_size=request.vocab_size,
                        vocab_fingerprint=self.drafter.vocab_fingerprint,
                        tree_branching=request.tree.branching if request.tree else 0,
                        tree_nodes=request.tree.max_nodes if request.tree else 0,
                        penalties=penalties_to_proto(request.penalties),
                        draft_ahead_tokens=0 if pending or num_tokens else request.draft_ahead_tokens,
                        grammar=request.constraint.grammar if request.constraint is not None else "",
                        min_tokens=request.min_tokens,
                        stop_token_ids=request.stop_token_ids,
                        draft_scope=request.draft_scope,
                    )
                )
            )
            if not pending:
                return messages
        num_accepted, appended, accepted_nodes = pending or (0, [], [])
        messages.append(
            draft_pb2.ProposeRequest(
                feedback=draft_pb2.ProposeFeedback(
                    num_accepted=num_accepted, appended_ids=appended, num_draft_tokens=num_tokens, accepted_nodes=accepted_nodes
                )
            )
        )
        return messages

    async def _exchange(self, messages: list[draft_pb2.ProposeRequest]) -> draft_pb2.ProposeResponse:
        """Send `messages`; the answer to the last (each message is answered by one block)."""
        if self.call is None:
            self.call = self.drafter.stub.Propose(timeout=self.deadline_s)
        for message in messages:
            await self.call.write(message)
            response = await self.call.read()
            if response is grpc.aio.EOF:
                raise DraftUnavailableError("the draft service ended the stream")
        return response

    def _checked_block(self, response: draft_pb2.ProposeResponse, num_tokens: int) -> DraftBlock:
        needs_q = rule(self.request.acceptance).needs_draft_probs
        try:
            block = block_from_proto(response.block, self.request.vocab_size, needs_q, field="draft.block")
            if block.depth > num_tokens:  # past the budget: beyond max_tokens or the context, and a costlier pass
                raise InvalidRequestError("draft.block.token_ids", f"{block.depth} candidates deep, but {num_tokens} were asked for")
            tree = self.request.tree
            if block.tree_parents is not None and (tree is None or len(block) > tree.max_nodes):
                raise InvalidRequestError(
                    "draft.block.parent_indices", f"a tree of {len(block)} nodes, but the session allows {tree.max_nodes if tree else 0}"
                )
        except InvalidRequestError as error:
            # A drafter that sends an invalid block is treated like one that failed: never trusted.
            raise DraftUnavailableError(f"the draft service sent an invalid block: {error}") from error
        return replace(block, compute_ms=response.draft_ms)

    def feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> None:
        was_tree = self.committed.last_parents is not None
        block = list(self.committed.last_block)
        path = self.committed.apply_feedback(num_accepted, appended_ids, accepted_nodes)
        if self.remote_block_out:
            self.remote_block_out = False
            self.pending_feedback = (num_accepted, list(appended_ids), path if was_tree else [])
            return
        # A block the draft service never saw: what it added to the sequence rides along as appended tokens.
        added = [*(block[node] for node in path), *appended_ids]
        pending_accepted, pending_appended, pending_nodes = self.pending_feedback or (0, [], [])
        self.pending_feedback = (pending_accepted, [*pending_appended, *added], pending_nodes)

    def close(self) -> None:
        """End the stream: the draft service frees this session's KV cache at once."""
        if self.closed:
            return
        self.closed = True
        if self.late is not None:
            self.late[0].cancel()  # NOTE: before _finish, which reads the call too
        if self.call is not None:
            asyncio.run_coroutine_threadsafe(_finish(self.call), self.drafter.loop)


def _unavailable(error: Exception) -> DraftUnavailableError:
    if isinstance(error, DraftUnavailableError):
        return error
    if isinstance(error, grpc.aio.AioRpcError):
        return DraftUnavailableError(f"draft service: {error.code().name}: {error.details()}")
    return DraftUnavailableError(f"draft service: {type(error).__name__}: {error}")


async def _finish(call: grpc.aio.StreamStreamCall, timeout_s: float = 1.0) -> None:
    """Half-close and drain, so the call (and its trace span) ends cleanly; cancel if that stalls."""

    async def drain() -> None:
        await call.done_writing()
        while await call.read() is not grpc.aio.EOF:
            pass

    try:
        await asyncio.wait_for(drain(), timeout_s)
    except Exception:  # noqa: BLE001, S110 -- a failed or stalled draft: cancelling is all that is left
        pass
    finally:
        call.cancel()
