"""Direct gRPC clients that send what the draft or verify service cannot serve get INVALID_ARGUMENT
naming the field, never INTERNAL / UNKNOWN, and no ERROR line or traceback in the service's log."""

from __future__ import annotations

import grpc
import pytest
from service_support import FIELD_FIRST

from specdec.v1 import draft_pb2, draft_pb2_grpc

TINY_CONTEXT = 512  # the tiny pair's max_position_embeddings
TINY_VOCAB = 512


def _open(**fields) -> draft_pb2.ProposeRequest:
    settings = {"prompt_ids": [1, 2, 3], "vocab_size": TINY_VOCAB, "num_draft_tokens": 2, **fields}
    return draft_pb2.ProposeRequest(open=draft_pb2.ProposeOpen(**settings))


def _feedback(**fields) -> draft_pb2.ProposeRequest:
    return draft_pb2.ProposeRequest(feedback=draft_pb2.ProposeFeedback(**{"num_draft_tokens": 2, **fields}))


def _propose_error(port: int, messages: list) -> grpc.RpcError:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.RpcError) as refused:
        list(draft_pb2_grpc.DraftServiceStub(channel).Propose(iter(messages), timeout=60))
    return refused.value


def _log_since(process, offset: int) -> str:
    return process.output()[offset:]


def _assert_invalid_argument(error: grpc.RpcError, field: str) -> None:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert FIELD_FIRST.match(error.details()) and error.details().startswith(f"{field}: "), error.details()


def _assert_quiet(log: str) -> None:
    assert '"level": "error"' not in log and "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        # the vocabulary the client claims is not the model's: id 100000 has no embedding row
        ([_open(vocab_size=2**20, prompt_ids=[100_000])], "open.prompt_ids"),
        ([_open(prompt_ids=[TINY_VOCAB])], "open.prompt_ids"),
        ([_open(prompt_ids=[5] * (TINY_CONTEXT + 1))], "open.prompt_ids"),
        # 8,000 tokens appended to a 512-token-context model
        ([_open(), _feedback(num_accepted=0, appended_ids=[5] * 8000)], "feedback.appended_ids"),
        (
            [
                _open(prompt_ids=[5] * 400),
                _feedback(num_accepted=0, appended_ids=[5] * 60),
                _feedback(num_accepted=0, appended_ids=[5] * 60),
            ],
            "feedback.appended_ids",
        ),
    ],
    ids=["claimed-vocab", "id-past-vocab", "prompt-past-context", "appended-past-context", "grows-past-context"],
)
def test_draft_refuses_what_its_model_cannot_hold(stack, messages, field):
    offset = len(stack.draft.output())
    _assert_invalid_argument(_propose_error(stack.ports["draft"], messages), field)
    _assert_quiet(_log_since(stack.draft, offset))


@pytest.mark.parametrize("prompt_ids", [[1, 2, 3], [100_000]], ids=["valid-ids", "the-red-team-repro"])
def test_draft_refuses_a_vocabulary_wider_than_any_model_has(stack, prompt_ids):
    """q is padded to the claimed width: 2^32 - 1 would mean a 16 GiB tensor per candidate."""
    offset = len(stack.draft.output())
    _assert_invalid_argument(_propose_error(stack.ports["draft"], [_open(vocab_size=2**32 - 1, prompt_ids=prompt_ids)]), "open.vocab_size")
    _assert_quiet(_log_since(stack.draft, offset))


UNDECODABLE = b"\xff\xff\xff\xff"  # field number 0x1fffffff with wire type 7: no protobuf parser accepts it


@pytest.mark.parametrize(
    ("service", "method", "kind"),
    [
        ("draft", "/specdec.v1.DraftService/Propose", "stream_stream"),
        ("draft", "/specdec.v1.DraftService/Status", "unary_unary"),
        ("verify", "/specdec.v1.VerifyService/Verify", "stream_stream"),
        ("verify", "/specdec.v1.VerifyService/Generate", "unary_stream"),
    ],
)
def test_undecodable_bytes_are_invalid_argument_without_a_traceback(stack, service, method, kind):
    process = stack.processes[service]
    offset = len(process.output())
    with grpc.insecure_channel(f"127.0.0.1:{stack.ports[service]}") as channel:
        call = getattr(channel, kind)(method, request_serializer=None, response_deserializer=None)
        request = iter([UNDECODABLE]) if kind.startswith("stream") else UNDECODABLE
        with pytest.raises(grpc.RpcError) as refused:
            reply = call(request, timeout=30)
            list(reply) if kind.endswith("stream") else reply
    _assert_invalid_argument(refused.value, "request")
    _assert_quiet(_log_since(process, offset))
