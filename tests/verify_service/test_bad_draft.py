"""A draft service that answers with malformed blocks (bad q, token ids outside the vocabulary,
more candidates than asked for) is never trusted: verify refuses the block, decodes with the target
alone, and the output is exactly what the target alone samples for the same seed."""

from __future__ import annotations

import math

import pytest

from specdec.cli.client import VerifyClient
from specdec.serving.rpc.server import create_server
from specdec.v1 import common_pb2, draft_pb2, draft_pb2_grpc

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
SAMPLING = {"temperature": 0.8, "seed": 7, "acceptance": "rejection", "ignore_eos": True}
VOCAB = 512  # the tiny pair's vocabulary (asserted below)


def _block(candidates: list[int], rows: list[tuple[list[int], list[float]]] | None) -> common_pb2.CandidateBlock:
    block = common_pb2.CandidateBlock(token_ids=candidates)
    for ids, probs in rows or []:
        block.draft_probs.add(token_ids=ids, probs=probs)
    return block


# name -> the block sent for a request of k candidates
BAD_BLOCKS = {
    "q does not sum to 1": lambda k: _block([5] * k, [([5], [0.5])] * k),
    "negative q": lambda k: _block([5] * k, [([5, 6], [1.5, -0.5])] * k),
    "NaN q": lambda k: _block([5] * k, [([5], [math.nan])] * k),
    "q without the candidate": lambda k: _block([5] * k, [([6], [1.0])] * k),
    "no q in rejection mode": lambda k: _block([5] * k, None),
    "q ids outside the vocab": lambda k: _block([5] * k, [([5, VOCAB], [0.5, 0.5])] * k),
    "candidate outside the vocab": lambda k: _block([VOCAB + 7] * k, [([VOCAB + 7], [1.0])] * k),
    "negative candidate id": lambda k: _block([-1] * k, [([-1], [1.0])] * k),
    "more candidates than asked": lambda k: _block([5] * (k + 60), [([5], [1.0])] * (k + 60)),
}


class _BadDraft(draft_pb2_grpc.DraftServiceServicer):
    def __init__(self, make_block) -> None:
        self.make_block = make_block

    async def Propose(self, request_iterator, context):
        async for message in request_iterator:
            asked = message.open.num_draft_tokens if message.WhichOneof("message") == "open" else message.feedback.num_draft_tokens
            yield draft_pb2.ProposeResponse(block=self.make_block(asked))

    async def Status(self, request, context):
        return common_pb2.ServerStatus(service="draft")


async def _start_bad_draft(make_block):
    server, port, _ = create_server("127.0.0.1:0", [])
    draft_pb2_grpc.add_DraftServiceServicer_to_server(_BadDraft(make_block), server)
    await server.start()
    return server, port


@pytest.fixture
def target_only(make_verify_server, tiny_target) -> list[int]:
    """Rejection-mode sampling with no draft at all: the same seeded generator as a fallback from
    the first round. (speculative=false samples with the keyed noise instead: other tokens, same law.)"""
    server = make_verify_server(tiny_target, None)
    with VerifyClient(f"127.0.0.1:{server.port}") as client:
        completion = client.generate(PROMPT, max_tokens=40, timeout=60, **SAMPLING)
    assert completion.summary.draft_tokens == 0
    return completion.token_ids


@pytest.mark.parametrize("case", BAD_BLOCKS)
def test_a_malformed_draft_block_is_refused_and_the_output_stays_exact(case, service_loop, make_verify_server, tiny_target, target_only):
    assert tiny_target.vocab_size == VOCAB
    draft, port = service_loop.run(_start_bad_draft(BAD_BLOCKS[case]))
    try:
        server = make_verify_server(tiny_target, f"127.0.0.1:{port}")
        with VerifyClient(f"127.0.0.1:{server.port}") as client:
            completion = client.generate(PROMPT, max_tokens=40, timeout=60, **SAMPLING)
            assert client.status().active_sessions == 0
    finally:
        service_loop.run(draft.stop(0))
    assert completion.token_ids == target_only
    assert completion.summary.fallback and completion.summary.draft_tokens == 0
