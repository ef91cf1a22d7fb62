"""Hypothesis-generated GenerateRequest and Verify streams: every one is served or refused with
INVALID_ARGUMENT / FAILED_PRECONDITION naming the field; never INTERNAL, never a hang, and no session
is left behind."""

from __future__ import annotations

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_support import FIELD_FIRST, sampling_params_strategy, wait_until

from specdec.v1 import common_pb2, verify_pb2

INT32 = st.integers(-(2**31), 2**31 - 1)
UINT32 = st.one_of(st.integers(0, 8), st.integers(0, 2**32 - 1))  # small values reach generation
REFUSALS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION}
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))

chat_messages = st.lists(
    st.builds(
        verify_pb2.ChatMessage, role=st.sampled_from(["user", "system", "assistant", "tool", "", "robot"]), content=st.text(max_size=30)
    ),
    max_size=3,
).map(lambda ms: verify_pb2.ChatMessages(messages=ms))
prompts = st.one_of(
    st.builds(dict, text=st.text(min_size=1, max_size=40)),
    st.builds(dict, text=st.text(max_size=40)),
    st.builds(dict, chat=chat_messages),
    st.builds(dict, token_ids=st.lists(st.one_of(INT32, st.integers(0, 600)), max_size=20).map(lambda ids: verify_pb2.TokenIds(ids=ids))),
    st.just({}),
)


@st.composite
def generation_options(draw) -> verify_pb2.GenerationOptions:
    options = verify_pb2.GenerationOptions(
        **draw(prompts),
        sampling=draw(sampling_params_strategy()),
        stop=draw(st.lists(st.text(max_size=5), max_size=3)),
        max_tokens=draw(UINT32),
        ignore_eos=draw(st.booleans()),
        acceptance=draw(st.integers(0, 6)),
    )
    if draw(st.booleans()):
        options.seed = draw(st.integers(0, 2**64 - 1))
    return options


@st.composite
def generate_requests(draw) -> verify_pb2.GenerateRequest:
    request = verify_pb2.GenerateRequest(options=draw(generation_options()), logprobs=draw(st.booleans()), top_logprobs=draw(UINT32))
    if draw(st.booleans()):
        request.speculative = draw(st.booleans())
    if draw(st.booleans()):
        request.num_draft_tokens = draw(UINT32)
    return request


def assert_served_or_refused(call) -> None:
    try:
        call()
    except grpc.RpcError as error:
        assert error.code() in REFUSALS, (error.code(), error.details())
        assert FIELD_FIRST.match(error.details() or "") or error.code() is grpc.StatusCode.FAILED_PRECONDITION, error.details()


def _no_sessions(verify_client, draft_server) -> None:
    wait_until(lambda: verify_client.status().active_sessions == 0 and draft_server.servicer.sessions.active == 0, 10, "sessions left open")


def test_generated_generate_requests_are_served_or_refused(verify_client, draft_server):
    @FUZZ
    @given(generate_requests())
    def check(request):
        assert_served_or_refused(lambda: list(verify_client.stub.Generate(request, timeout=60)))

    check()
    _no_sessions(verify_client, draft_server)


blocks = st.builds(
    lambda ids, rows: common_pb2.CandidateBlock(token_ids=ids, draft_probs=rows),
    st.lists(st.one_of(INT32, st.integers(0, 600)), max_size=6),
    st.lists(
        st.builds(
            common_pb2.SparseDistribution,
            token_ids=st.lists(st.integers(-5, 600), max_size=4),
            probs=st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4),
        ),
        max_size=6,
    ),
)
verify_messages = st.one_of(
    st.builds(lambda options: verify_pb2.VerifyRequest(open=verify_pb2.VerifyOpen(options=options)), generation_options()),
    st.builds(lambda block: verify_pb2.VerifyRequest(block=block), blocks),
    st.just(verify_pb2.VerifyRequest()),
)


valid_open = st.builds(
    lambda temperature, acceptance: verify_pb2.VerifyRequest(
        open=verify_pb2.VerifyOpen(
            options=verify_pb2.GenerationOptions(
                text="Once upon a time", max_tokens=6, sampling=common_pb2.SamplingParams(temperature=temperature), acceptance=acceptance
            )
        )
    ),
    st.sampled_from([0.0, 0.8]),
    st.integers(0, 3),
)
# Half open validly and then send generated blocks, so block checks (not only `open`'s) are reached.
verify_streams = st.one_of(
    st.lists(verify_messages, min_size=1, max_size=4),
    st.builds(lambda first, rest: [first, *rest], valid_open, st.lists(st.builds(verify_pb2.VerifyRequest, block=blocks), max_size=3)),
)


def test_generated_verify_streams_are_served_or_refused(verify_client, draft_server):
    @FUZZ
    @given(verify_streams)
    def check(messages):
        assert_served_or_refused(lambda: list(verify_client.stub.Verify(iter(messages), timeout=60)))

    check()
    _no_sessions(verify_client, draft_server)
