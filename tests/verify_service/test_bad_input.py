"""The verify service refuses malformed requests with the right status, naming the field, and keeps serving."""

from __future__ import annotations

import time

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from specdec.cli.client import VerifyClient, generation_options
from specdec.v1 import common_pb2, verify_pb2, verify_pb2_grpc

VERIFY_SERVICE = "specdec.v1.VerifyService"
TIMEOUT = 30


@pytest.fixture(scope="module")
def channel(verify_server):
    with grpc.insecure_channel(f"127.0.0.1:{verify_server.port}") as channel:
        yield channel


@pytest.fixture(scope="module")
def stub(channel):
    return verify_pb2_grpc.VerifyServiceStub(channel)


@pytest.fixture(scope="module")
def prompt_ids(tiny_target):
    return tiny_target.tokenizer("Once upon a time")["input_ids"]


def _generate_error(stub, options: verify_pb2.GenerationOptions, **request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Generate(verify_pb2.GenerateRequest(options=options, **request), timeout=TIMEOUT))
    return caught.value


def _verify_error(stub, messages: list[verify_pb2.VerifyRequest]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Verify(iter(messages), timeout=TIMEOUT))
    return caught.value


def _open(prompt_ids, **settings) -> verify_pb2.VerifyRequest:
    return verify_pb2.VerifyRequest(open=verify_pb2.VerifyOpen(options=generation_options(prompt_ids, **settings)))


def _block(candidates, rows=()) -> verify_pb2.VerifyRequest:
    block = common_pb2.CandidateBlock(token_ids=candidates)
    for ids, probs in rows:
        block.draft_probs.add(token_ids=ids, probs=probs)
    return verify_pb2.VerifyRequest(block=block)


# --- Generate -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad_id", [512, 10**6, -1])
def test_generate_refuses_token_ids_outside_the_vocab(stub, prompt_ids, tiny_target, bad_id):
    assert tiny_target.vocab_size == 512
    error = _generate_error(stub, generation_options([*prompt_ids, bad_id], max_tokens=4))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "options.token_ids" in error.details() and str(bad_id) in error.details() and "vocabulary" in error.details()


def test_generate_refuses_empty_text(stub):
    error = _generate_error(stub, generation_options("", max_tokens=4))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("options.text:")


def test_generate_refuses_empty_token_ids(stub):
    options = verify_pb2.GenerationOptions(token_ids=verify_pb2.TokenIds(ids=[]), max_tokens=4)
    assert options.WhichOneof("prompt") == "token_ids"
    error = _generate_error(stub, options)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "options.token_ids" in error.details()


def test_generate_refuses_a_missing_prompt(stub):
    error = _generate_error(stub, verify_pb2.GenerationOptions(max_tokens=4))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "options.prompt" in error.details()


def test_generate_refuses_prompt_plus_max_tokens_over_the_context(stub, tiny_target):
    assert tiny_target.max_context == 512
    error = _generate_error(stub, generation_options([5] * 500, max_tokens=100))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = error.details()
    assert "max_tokens" in details and "500" in details and "100" in details and "512" in details


LONGEST_TINY_TOKEN = 13  # characters of the tiny tokenizer's longest vocabulary entry


@pytest.mark.parametrize(
    ("prompt", "field", "size"),
    [
        ("a" * (512 * LONGEST_TINY_TOKEN + 1), "options.text", "6657 characters"),
        ([{"role": "user", "content": "a" * 4000}, {"role": "user", "content": "b" * 3000}], "options.chat.messages", "7000 characters"),
        ([{"role": "user", "content": "hi"}] * 513, "options.chat.messages", "513 messages"),
        ([5] * 513, "options.token_ids", "513 tokens"),
    ],
    ids=["text", "chat", "messages", "token-ids"],
)
def test_generate_refuses_a_prompt_the_context_cannot_hold_from_its_length(stub, prompt, field, size):
    error = _generate_error(stub, generation_options(prompt, max_tokens=4))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(f"{field}: {size}") and "512 tokens" in error.details(), error.details()


def test_generate_refuses_a_prediction_the_context_cannot_hold_from_its_length(stub, prompt_ids):
    error = _generate_error(stub, generation_options(prompt_ids, max_tokens=4), prediction="a" * (512 * LONGEST_TINY_TOKEN + 1))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("prediction: 6657 characters") and "512 tokens" in error.details(), error.details()


def test_a_prompt_at_the_length_bound_is_tokenized_and_judged_by_its_tokens(stub):
    error = _generate_error(stub, generation_options("a" * (512 * LONGEST_TINY_TOKEN), max_tokens=4))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("prompt: the prompt has"), error.details()  # counted in tokens, not characters


def test_generate_refuses_negative_temperature(stub, prompt_ids):
    error = _generate_error(stub, generation_options(prompt_ids, temperature=-1.0, max_tokens=4))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "sampling.temperature" in error.details()


def test_generate_refuses_zero_top_p(stub, prompt_ids):
    error = _generate_error(stub, generation_options(prompt_ids, top_p=0.0, max_tokens=4))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "sampling.top_p" in error.details()


def test_generate_refuses_greedy_acceptance_at_positive_temperature(stub, prompt_ids):
    error = _generate_error(stub, generation_options(prompt_ids, temperature=0.5, acceptance="greedy", max_tokens=4))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "acceptance" in error.details()


@pytest.mark.parametrize(
    "request_fields,name",
    [({"top_logprobs": 21}, "top_logprobs"), ({"num_draft_tokens": 0}, "num_draft_tokens"), ({"num_draft_tokens": 65}, "num_draft_tokens")],
)
def test_generate_refuses_out_of_range_request_fields(stub, prompt_ids, request_fields, name):
    error = _generate_error(stub, generation_options(prompt_ids, max_tokens=4), **request_fields)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert name in error.details()


# --- Verify -------------------------------------------------------------------------------------


def test_verify_refuses_a_block_before_open(stub):
    error = _verify_error(stub, [_block([5], [([5], [1.0])])])
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "open" in error.details()


def test_verify_refuses_a_second_open(stub, prompt_ids):
    error = _verify_error(stub, [_open(prompt_ids, max_tokens=8), _open(prompt_ids, max_tokens=8)])
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already open" in error.details()


@pytest.mark.parametrize(
    "ids,probs,field",
    [
        ([5, 6], [1.5, -0.5], "block.draft_probs[0].probs"),
        ([5, 6], [float("nan"), 1.0], "block.draft_probs[0].probs"),
        ([5, 6], [0.5, 0.4], "block.draft_probs[0].probs"),
        ([5, 6], [0.0, 1.0], "block.draft_probs[0]"),
        ([6, 7], [0.5, 0.5], "block.draft_probs[0]"),
        ([5, 5], [0.5, 0.5], "block.draft_probs[0].token_ids"),
    ],
    ids=["negative", "nan", "sum-0.9", "zero-q-candidate", "candidate-absent", "duplicate-ids"],
)
def test_verify_refuses_malformed_q_in_rejection_mode(verify_client, prompt_ids, ids, probs, field):
    with (
        verify_client.verify_session(prompt_ids, timeout=TIMEOUT, max_tokens=8, temperature=1.0, acceptance="rejection", seed=1) as session,
        pytest.raises(grpc.RpcError) as caught,
    ):
        session.verify([5], [(ids, probs)])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith(field + ":")


@pytest.mark.parametrize(
    "settings,name",
    [
        ({"temperature": -1.0}, "options.sampling.temperature"),
        ({"top_p": 0.0}, "options.sampling.top_p"),
        ({"temperature": 0.5, "acceptance": "greedy"}, "acceptance"),
    ],
)
def test_verify_refuses_an_invalid_open(stub, prompt_ids, settings, name):
    error = _verify_error(stub, [_open(prompt_ids, max_tokens=8, **settings)])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert name in error.details()


def test_verify_refuses_a_prompt_over_the_context(stub):
    error = _verify_error(stub, [_open([5] * 500, max_tokens=100)])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_tokens" in error.details() and "500" in error.details()


def test_verify_refuses_missing_q_in_rejection_mode(stub, prompt_ids):
    error = _verify_error(stub, [_open(prompt_ids, max_tokens=8, temperature=1.0, acceptance="rejection"), _block([5, 6])])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("block.draft_probs:")


def test_verify_refuses_more_candidates_than_max_candidates(verify_client, prompt_ids):
    with verify_client.verify_session(prompt_ids, timeout=TIMEOUT, max_tokens=4, temperature=0.0) as session:
        budget = session.opened.max_candidates
        assert budget == 3  # max_tokens - 1: each round also emits one target token
        with pytest.raises(grpc.RpcError) as caught:
            session.verify([5] * (budget + 1))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "block.token_ids" in caught.value.details() and "max_candidates" in caught.value.details()


@pytest.mark.parametrize("acceptance,temperature", [("rejection", 1.0), ("coupled", 1.0), ("greedy", 0.0)])
def test_verify_accepts_an_empty_block_when_the_budget_is_zero(verify_client, prompt_ids, acceptance, temperature):
    with verify_client.verify_session(
        prompt_ids, timeout=TIMEOUT, max_tokens=1, temperature=temperature, acceptance=acceptance, seed=1
    ) as session:
        assert session.opened.max_candidates == 0
        verdict = session.verify([])
    assert verdict.num_accepted == 0 and len(verdict.token_ids) == 1 and verdict.finish_reason == "length"


def test_verify_refuses_a_block_after_the_generation_finished(verify_client, prompt_ids):
    with verify_client.verify_session(prompt_ids, timeout=TIMEOUT, max_tokens=1, temperature=0.0) as session:
        assert session.verify([]).finish_reason == "length"
        with pytest.raises(grpc.RpcError) as caught:
            session.verify([])
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "finished" in caught.value.details()


def test_verify_refuses_candidates_outside_the_vocab(verify_client, prompt_ids):
    with verify_client.verify_session(prompt_ids, timeout=TIMEOUT, max_tokens=8, temperature=0.0) as session:
        with pytest.raises(grpc.RpcError) as caught:
            session.verify([512])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "block.token_ids" in caught.value.details()


# --- still serving ------------------------------------------------------------------------------


def test_still_serves_after_the_errors_and_frees_every_session(verify_client, prompt_ids):
    completion = verify_client.generate(prompt_ids, timeout=TIMEOUT, max_tokens=6, temperature=0.0, ignore_eos=True)
    assert completion.finish_reason == "length" and len(completion.token_ids) == 6
    deadline = time.monotonic() + 5
    while verify_client.status().active_sessions and time.monotonic() < deadline:
        time.sleep(0.05)
    assert verify_client.status().active_sessions == 0


# --- session cap --------------------------------------------------------------------------------


async def _construct(server_class, config, address):
    return server_class(config, address)  # grpc.aio servers must be created on the loop that runs them


@pytest.fixture
def capped_server(service_loop, tiny_target):
    from specdec.serving.config import SpecdecConfig
    from verify_service.server import VerifyServer

    config = SpecdecConfig(verify_service={"draft_endpoint": "", "max_sessions": 1})
    server = service_loop.run(_construct(VerifyServer, config, "127.0.0.1:0"))
    service_loop.run(server.start(tiny_target))
    yield server
    service_loop.run(server.stop(0))


def test_generate_is_refused_past_max_sessions_until_one_closes(capped_server, prompt_ids):
    with VerifyClient(f"127.0.0.1:{capped_server.port}") as client:
        session = client.verify_session(prompt_ids, timeout=TIMEOUT, max_tokens=8, temperature=0.0)
        assert client.status().active_sessions == 1
        with pytest.raises(grpc.RpcError) as caught:
            client.generate(prompt_ids, timeout=TIMEOUT, max_tokens=4, temperature=0.0)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_sessions=1" in caught.value.details()
        session.close()
        deadline = time.monotonic() + 5
        while client.status().active_sessions and time.monotonic() < deadline:
            time.sleep(0.05)
        completion = client.generate(prompt_ids, timeout=TIMEOUT, max_tokens=4, temperature=0.0, ignore_eos=True)
        assert len(completion.token_ids) == 4


# --- health and reflection ----------------------------------------------------------------------


@pytest.mark.parametrize("service", ["", VERIFY_SERVICE])
def test_health_reports_serving(channel, service):
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_services_and_describes_verify(channel):
    database = ProtoReflectionDescriptorDatabase(channel)
    services = set(database.get_services())
    assert {VERIFY_SERVICE, "grpc.health.v1.Health"} <= services
    service = DescriptorPool(database).FindServiceByName(VERIFY_SERVICE)
    assert {method.name for method in service.methods} == {"Generate", "Verify", "Status"}
    assert service.methods_by_name["Generate"].input_type.full_name == "specdec.v1.GenerateRequest"
