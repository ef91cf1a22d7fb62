"""Hypothesis-generated Propose streams (open and feedback messages in any order, any values):
each is served or refused with INVALID_ARGUMENT / FAILED_PRECONDITION naming the field; never
INTERNAL, never a hang, and the draft's sessions all end."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_support import FIELD_FIRST, sampling_params_strategy, wait_until

from specdec.v1 import draft_pb2, draft_pb2_grpc

VOCAB = 512  # the tiny pair's
TOKEN = st.one_of(st.integers(0, VOCAB - 1), st.integers(-(2**31), 2**31 - 1))
UINT32 = st.one_of(st.integers(0, 8), st.integers(0, 2**32 - 1))
REFUSALS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION}

opens = st.builds(
    lambda fields, sampling: draft_pb2.ProposeRequest(open=draft_pb2.ProposeOpen(sampling=sampling, **fields)),
    st.fixed_dictionaries(
        {
            "prompt_ids": st.lists(TOKEN, max_size=12),
            "seed": st.integers(0, 2**64 - 1),
            "acceptance": st.integers(0, 6),
            "num_draft_tokens": UINT32,
            "draft_top_k": UINT32,
            "vocab_size": st.one_of(st.just(VOCAB), UINT32),
            "vocab_fingerprint": st.one_of(st.just(""), st.text(max_size=8)),
        }
    ),
    sampling_params_strategy(),
)
feedbacks = st.builds(
    lambda accepted, appended, k: draft_pb2.ProposeRequest(
        feedback=draft_pb2.ProposeFeedback(num_accepted=accepted, appended_ids=appended, num_draft_tokens=k)
    ),
    UINT32,
    st.lists(TOKEN, max_size=3),
    UINT32,
)
streams = st.one_of(
    st.lists(st.one_of(opens, feedbacks, st.just(draft_pb2.ProposeRequest())), min_size=1, max_size=4),
    st.builds(lambda first, rest: [first, *rest], opens, st.lists(feedbacks, max_size=3)),
)


@pytest.fixture(scope="module")
def stub(draft_server):
    with grpc.insecure_channel(f"127.0.0.1:{draft_server.port}") as channel:
        yield draft_pb2_grpc.DraftServiceStub(channel)


def test_generated_propose_streams_are_served_or_refused(stub, draft_server):
    @settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(streams)
    def check(messages):
        try:
            list(stub.Propose(iter(messages), timeout=60))
        except grpc.RpcError as error:
            assert error.code() in REFUSALS, (error.code(), error.details())
            assert FIELD_FIRST.match(error.details() or "") or error.code() is grpc.StatusCode.FAILED_PRECONDITION, error.details()

    check()
    wait_until(lambda: draft_server.servicer.sessions.active == 0, 10, "draft sessions left open")
