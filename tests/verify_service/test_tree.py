"""verification: tree through real draft and verify services: the Propose stream carries trees and
accepted paths, outputs equal target-only, and rejection / Verify stay chain-only."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from specdec.cli.client import VerifyClient
from specdec.drafters import ModelDrafter
from specdec.serving.config import SpecdecConfig

PROMPTS = ["Tell me about the sea.", "Write a poem.", "Why is the sky blue?", "Count to ten."]
TREE = {"verification": "tree", "draft_tokens": 4, "tree_branching": 2, "tree_nodes": 8}


async def _construct(server_class, config, address):
    return server_class(config, address)  # grpc.aio servers must be created on the loop that runs them


@pytest.fixture
def tree_client(service_loop, tiny_target, tiny_draft, make_draft_server):
    from verify_service.server import VerifyServer

    draft = make_draft_server(ModelDrafter(tiny_draft.model), tiny_draft, max_batch_size=4, batch_wait_ms=5)
    # Drafting every round: the tiny pair would start in plain steps (the load-aware policy has its own tests).
    settings = {"draft_endpoint": f"127.0.0.1:{draft.port}", "max_batch_size": 4, "batch_wait_ms": 5, "load_aware_speculation": False}
    config = SpecdecConfig(speculative=TREE, verify_service=settings)
    verify = service_loop.run(_construct(VerifyServer, config, "127.0.0.1:0"))
    service_loop.run(verify.start(tiny_target))
    client = VerifyClient(f"127.0.0.1:{verify.port}")
    yield client
    client.close()
    service_loop.run(verify.stop(0))


@pytest.mark.parametrize("settings", [{"temperature": 0}, {"temperature": 0.9, "acceptance": "coupled"}, {"temperature": 0.8}])
def test_tree_outputs_equal_target_only_alone_and_batched(tree_client, settings):
    requests = [
        dict(prompt=prompt, max_tokens=10 + 3 * index, seed=7 + index, ignore_eos=True, **settings) for index, prompt in enumerate(PROMPTS)
    ]
    reference = [tree_client.generate(speculative=False, **request).token_ids for request in requests]
    alone = [tree_client.generate(**request) for request in requests]
    assert [completion.token_ids for completion in alone] == reference
    rounds = [round_ for completion in alone for round_ in completion.rounds]
    assert not any(completion.summary.fallback for completion in alone)
    assert all(completion.summary.rounds > 0 and completion.summary.draft_tokens > 0 for completion in alone)
    assert max(round_.num_candidates for round_ in rounds) > TREE["draft_tokens"]  # trees, wider than K
    assert sum(round_.num_accepted for round_ in rounds) > 0
    with ThreadPoolExecutor(len(requests)) as pool:
        together = list(pool.map(lambda request: tree_client.generate(**request).token_ids, requests))
    assert together == reference


def test_a_rejection_request_is_refused_naming_the_field(tree_client):
    with pytest.raises(grpc.RpcError) as caught:
        tree_client.generate(prompt="Hi", max_tokens=4, temperature=0.8, acceptance="rejection")
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "options.acceptance" in caught.value.details() and "tree" in caught.value.details()
