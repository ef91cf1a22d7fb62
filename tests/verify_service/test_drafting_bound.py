"""At load the draft service times a draft token (its Status says it) and verify times its own passes: where drafting
cannot gain at one session, verify's load-aware policy starts there in plain steps (specdec/drafting_ceiling.py)."""

from __future__ import annotations

import grpc
import pytest
from generation_support import ReportingDrafter

from specdec.drafters import ModelDrafter, NgramDrafter
from specdec.v1 import common_pb2, draft_pb2_grpc


def _draft_status(server) -> common_pb2.ServerStatus:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        return draft_pb2_grpc.DraftServiceStub(channel).Status(common_pb2.ServerStatusRequest(), timeout=30)


@pytest.mark.parametrize(("draft_ms", "drafting_first"), [(1e6, False), (1e-3, True)])
def test_a_draft_token_dearer_than_a_target_token_starts_one_session_plain(
    make_draft_server, make_verify_server, tiny_target, tiny_draft, draft_ms, drafting_first
):
    draft = make_draft_server(ReportingDrafter(ModelDrafter(tiny_draft.model), draft_ms), tiny_draft)
    assert _draft_status(draft).draft_step_ms == pytest.approx(draft_ms)
    verify = make_verify_server(tiny_target, f"127.0.0.1:{draft.port}", load_aware_speculation=True)
    policy = verify.servicer.load_policy
    assert policy.drafting(False) is drafting_first and policy.drafting(True) is drafting_first


def test_a_real_draft_model_reports_its_step_and_a_model_free_one_none(make_draft_server, draft_server):
    assert _draft_status(draft_server).draft_step_ms > 0
    assert _draft_status(make_draft_server(NgramDrafter(), None)).draft_step_ms == 0
