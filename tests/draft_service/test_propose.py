"""The draft service's Propose stream: blocks with a valid q, feedback, refusals, status, health, reflection."""

from __future__ import annotations

import math
import queue
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from specdec.serving.rpc.convert import vocab_fingerprint
from specdec.v1 import common_pb2, draft_pb2, draft_pb2_grpc

DRAFT_SERVICE = "specdec.v1.DraftService"
TIMEOUT = 30


@pytest.fixture(scope="module")
def channel(draft_server):
    with grpc.insecure_channel(f"127.0.0.1:{draft_server.port}") as channel:
        yield channel


@pytest.fixture(scope="module")
def stub(channel):
    return draft_pb2_grpc.DraftServiceStub(channel)


class ProposeStream:
    """One Propose call driven a message at a time: `send` returns the server's answer."""

    def __init__(self, stub) -> None:
        self.requests: queue.Queue = queue.Queue()
        self.responses = stub.Propose(iter(self.requests.get, None), timeout=TIMEOUT)

    def send(self, request: draft_pb2.ProposeRequest) -> draft_pb2.ProposeResponse:
        self.requests.put(request)
        return next(self.responses)

    def finish(self) -> list[draft_pb2.ProposeResponse]:
        self.requests.put(None)  # half-close: the server ends the stream and frees the session
        return list(self.responses)


def _open(tiny_target, **fields) -> draft_pb2.ProposeRequest:
    values = {
        "prompt_ids": tiny_target.tokenizer("Once upon a time")["input_ids"],
        "sampling": common_pb2.SamplingParams(temperature=1.0),
        "seed": 7,
        "acceptance": common_pb2.ACCEPTANCE_MODE_REJECTION,
        "num_draft_tokens": 4,
        "vocab_size": tiny_target.vocab_size,
        "vocab_fingerprint": vocab_fingerprint(tiny_target.tokenizer),
        **fields,
    }
    return draft_pb2.ProposeRequest(open=draft_pb2.ProposeOpen(**values))


def _feedback(num_accepted: int, appended_ids: list[int], num_draft_tokens: int) -> draft_pb2.ProposeRequest:
    return draft_pb2.ProposeRequest(
        feedback=draft_pb2.ProposeFeedback(num_accepted=num_accepted, appended_ids=appended_ids, num_draft_tokens=num_draft_tokens)
    )


def _assert_valid_q(block: common_pb2.CandidateBlock, vocab_size: int, width: int) -> None:
    assert len(block.draft_probs) == len(block.token_ids)
    for candidate, dist in zip(block.token_ids, block.draft_probs):
        ids, probs = list(dist.token_ids), list(dist.probs)
        assert len(ids) == len(probs) == width and len(set(ids)) == width
        assert all(0 <= token < vocab_size for token in ids)
        assert all(math.isfinite(p) and p >= 0 for p in probs)
        assert abs(sum(probs) - 1.0) < 1e-6
        assert candidate in ids and probs[ids.index(candidate)] > 0


def _error(stub, requests: list[draft_pb2.ProposeRequest]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Propose(iter(requests), timeout=TIMEOUT))
    return caught.value


def test_open_then_feedback_give_blocks_with_valid_q(stub, tiny_target):
    stream = ProposeStream(stub)
    first = stream.send(_open(tiny_target, draft_top_k=8))
    assert len(first.block.token_ids) == 4
    _assert_valid_q(first.block, tiny_target.vocab_size, width=8)
    assert first.draft_ms > 0
    second = stream.send(_feedback(2, [first.block.token_ids[3]], 3))
    assert len(second.block.token_ids) == 3
    _assert_valid_q(second.block, tiny_target.vocab_size, width=8)
    assert second.draft_ms > 0
    assert stream.finish() == []


def test_default_q_width_is_the_server_default(stub, tiny_target):
    stream = ProposeStream(stub)
    block = stream.send(_open(tiny_target)).block
    _assert_valid_q(block, tiny_target.vocab_size, width=32)
    stream.finish()


@pytest.mark.parametrize("acceptance,temperature", [(common_pb2.ACCEPTANCE_MODE_GREEDY, 0.0), (common_pb2.ACCEPTANCE_MODE_COUPLED, 1.0)])
def test_greedy_and_coupled_blocks_carry_no_q(stub, tiny_target, acceptance, temperature):
    stream = ProposeStream(stub)
    opening = _open(tiny_target, acceptance=acceptance, sampling=common_pb2.SamplingParams(temperature=temperature))
    first = stream.send(opening)
    assert len(first.block.token_ids) == 4 and len(first.block.draft_probs) == 0
    second = stream.send(_feedback(4, [first.block.token_ids[0]], 2))
    assert len(second.block.token_ids) == 2 and len(second.block.draft_probs) == 0
    stream.finish()


def test_coupled_drafting_is_deterministic_for_a_seed(stub, tiny_target):
    opening = _open(tiny_target, acceptance=common_pb2.ACCEPTANCE_MODE_COUPLED)
    blocks = []
    for _ in range(2):
        stream = ProposeStream(stub)
        blocks.append(list(stream.send(opening).block.token_ids))
        stream.finish()
    assert blocks[0] == blocks[1]


def test_q_bans_the_stop_ids_until_min_tokens(stub, tiny_target):
    """As the target's distribution does (specdec/min_tokens.py): EOS, forced here, is proposed from the 4th token on."""
    eos = min(tiny_target.eos_token_ids)
    forced = common_pb2.Penalties(logit_bias={eos: 100.0})
    unbanned = ProposeStream(stub)
    assert list(unbanned.send(_open(tiny_target, penalties=forced)).block.token_ids) == [eos] * 4
    unbanned.finish()
    stream = ProposeStream(stub)
    block = stream.send(_open(tiny_target, penalties=forced, min_tokens=3, stop_token_ids=[eos])).block
    assert eos not in block.token_ids[:3] and block.token_ids[3] == eos
    for candidate in block.draft_probs[:3]:  # q itself gives EOS nothing there
        assert all(p == 0 for token, p in zip(candidate.token_ids, candidate.probs) if token == eos)
    stream.finish()


def test_feedback_before_open_is_refused(stub):
    error = _error(stub, [_feedback(0, [5], 4)])
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "open" in error.details()


def test_second_open_is_refused(stub, tiny_target):
    error = _error(stub, [_open(tiny_target), _open(tiny_target)])
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "feedback" in error.details()


def test_num_accepted_beyond_the_block_is_refused(stub, tiny_target):
    error = _error(stub, [_open(tiny_target), _feedback(5, [5], 4)])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "feedback.num_accepted" in error.details()


@pytest.mark.parametrize("bad_id", [512, -1])
def test_appended_ids_outside_the_vocab_are_refused(stub, tiny_target, bad_id):
    error = _error(stub, [_open(tiny_target), _feedback(1, [bad_id], 3)])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "feedback.appended_ids" in error.details()


def test_mismatching_vocab_fingerprint_is_refused(stub, tiny_target, foreign_tokenizer):
    error = _error(stub, [_open(tiny_target, vocab_fingerprint=vocab_fingerprint(foreign_tokenizer))])
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "vocab_fingerprint" in error.details()


@pytest.mark.parametrize(
    "fields,name",
    [
        ({"prompt_ids": [5, 512]}, "open.prompt_ids"),
        ({"prompt_ids": [-1]}, "open.prompt_ids"),
        ({"prompt_ids": []}, "open.prompt_ids"),
        ({"vocab_size": 0}, "open.vocab_size"),
        ({"sampling": common_pb2.SamplingParams(temperature=-1.0)}, "open.sampling.temperature"),
        ({"acceptance": 99}, "open.acceptance"),
        ({"min_tokens": 2, "stop_token_ids": [512]}, "open.stop_token_ids"),
    ],
    ids=[
        "id-past-vocab",
        "negative-id",
        "empty-prompt",
        "no-vocab-size",
        "negative-temperature",
        "unknown-acceptance",
        "stop-id-past-vocab",
    ],
)
def test_invalid_open_is_refused_naming_the_field(stub, tiny_target, fields, name):
    error = _error(stub, [_open(tiny_target, **fields)])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(name)


def test_status_describes_the_draft_and_sessions_end(stub, tiny_target, tiny_draft):
    deadline = time.monotonic() + 5
    while stub.Status(common_pb2.ServerStatusRequest(), timeout=TIMEOUT).active_sessions and time.monotonic() < deadline:
        time.sleep(0.05)
    status = stub.Status(common_pb2.ServerStatusRequest(), timeout=TIMEOUT)
    assert (status.service, status.drafter, status.active_sessions) == ("draft", "model", 0)
    assert status.vocab_fingerprint == vocab_fingerprint(tiny_target.tokenizer)
    assert status.vocab_size == tiny_draft.vocab_size and status.max_sessions >= 1
    assert status.model == tiny_draft.source and status.device == "cpu"


def test_status_counts_an_open_stream(stub, tiny_target):
    stream = ProposeStream(stub)
    stream.send(_open(tiny_target))
    assert stub.Status(common_pb2.ServerStatusRequest(), timeout=TIMEOUT).active_sessions >= 1
    stream.finish()


@pytest.mark.parametrize("service", ["", DRAFT_SERVICE])
def test_health_reports_serving(channel, service):
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_draft_service(channel):
    database = ProtoReflectionDescriptorDatabase(channel)
    assert {DRAFT_SERVICE, "grpc.health.v1.Health"} <= set(database.get_services())
    assert database.FindFileContainingSymbol(DRAFT_SERVICE).name == "specdec/v1/draft.proto"


def test_blocks_longer_than_the_cap_are_refused(stub, tiny_target):
    from draft_service.servicer import MAX_DRAFT_TOKENS

    error = _error(stub, [_open(tiny_target, num_draft_tokens=MAX_DRAFT_TOKENS + 1)])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and error.details().startswith("open.num_draft_tokens")
    error = _error(stub, [_open(tiny_target), _feedback(1, [5], MAX_DRAFT_TOKENS + 1)])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and error.details().startswith("feedback.num_draft_tokens")
