"""Continuous batching through real draft and verify services: concurrent requests share passes,
and each one's output is what it would have been alone.

NOTE: float64 models: a pass over more rows may differ from a lone one in the last bits (as
multi-token passes do), which in float32 could flip a near-tie; see docs/benchmarks.md.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from generation_support import ReportingDrafter

from specdec.batching.packed_forward import model_parts
from specdec.cli.client import VerifyClient
from specdec.drafters import ModelDrafter

PROMPTS = [
    "Tell me about the sea.",
    "Write a poem.",
    "Why is the sky blue? Explain it to a child in detail.",
    "Hi",
    "List three colours.",
    "What is 2 + 2?",
    "Describe a forest at night, with its sounds.",
    "Count to ten.",
]


@pytest.fixture(scope="module")
def pair64(tiny_pair_paths):
    from specdec.engines.hf import load_model

    return (
        load_model(tiny_pair_paths.target, device="cpu", dtype="float64"),
        load_model(tiny_pair_paths.draft, device="cpu", dtype="float64"),
    )


@pytest.fixture
def batched_stack(pair64, make_draft_server, make_verify_server):
    """(client, verify server, draft server): services that batch up to 8 sessions."""
    clients = []

    def make(draft_ms: float | None = None, **verify_settings):
        """`draft_ms`: the draft's blocks report that cost (the load-aware policy then drafts first at one session)."""
        target, draft = pair64
        drafter = ModelDrafter(draft.model) if draft_ms is None else ReportingDrafter(ModelDrafter(draft.model), draft_ms)
        draft_server = make_draft_server(drafter, draft, max_batch_size=8, batch_wait_ms=20)
        verify = make_verify_server(target, f"127.0.0.1:{draft_server.port}", max_batch_size=8, batch_wait_ms=20, **verify_settings)
        clients.append(VerifyClient(f"127.0.0.1:{verify.port}"))
        return clients[-1], verify, draft_server

    yield make
    for client in clients:
        client.close()


def _requests(acceptance: str) -> list[dict]:
    settings = {"temperature": 0} if acceptance == "greedy" else {"temperature": 0.9, "acceptance": "coupled"}
    return [
        dict(prompt=prompt, max_tokens=12 + 5 * index, num_draft_tokens=1 + index % 4, seed=100 + index, ignore_eos=True, **settings)
        for index, prompt in enumerate(PROMPTS)
    ]


def _run_together(client: VerifyClient, requests: list[dict]) -> list[list[int]]:
    with ThreadPoolExecutor(len(requests)) as pool:
        return [completion.token_ids for completion in pool.map(lambda settings: client.generate(**settings), requests)]


def _pass_sizes(server) -> tuple[float, float]:
    registry = server.servicer.metrics.registry
    return registry.get_sample_value("specdec_batch_size_count"), registry.get_sample_value("specdec_batch_size_sum")


@pytest.mark.parametrize("acceptance", ["greedy", "coupled"])
def test_eight_concurrent_requests_equal_each_request_run_alone(batched_stack, acceptance):
    client, verify, draft = batched_stack()
    requests = _requests(acceptance)
    alone = [client.generate(**settings).token_ids for settings in requests]
    passes_alone, rows_alone = _pass_sizes(verify)
    assert rows_alone == passes_alone  # one session at a time: one row per pass
    together = _run_together(client, requests)
    assert together == alone
    passes, rows = _pass_sizes(verify)
    assert (rows - rows_alone) / (passes - passes_alone) > 1.5  # they did share target passes
    draft_passes, draft_rows = _pass_sizes(draft)
    assert draft_rows / draft_passes > 1.2  # and draft steps
    assert [len(ids) for ids in together] == [settings["max_tokens"] for settings in requests]


def test_cancelling_one_session_mid_batch_leaves_the_others_unaffected(batched_stack):
    client, _, _ = batched_stack()
    requests = _requests("greedy")[:5]
    alone = [client.generate(**settings).token_ids for settings in requests[1:]]
    doomed = client.generate_stream(**{**requests[0], "max_tokens": 400})
    with ThreadPoolExecutor(4) as pool:
        others = pool.map(lambda settings: client.generate(**settings).token_ids, requests[1:])
        next(doomed)
        doomed.cancel()
        assert list(others) == alone
    with pytest.raises(grpc.RpcError) as raised:
        list(doomed)
    assert raised.value.code() == grpc.StatusCode.CANCELLED


def test_the_memory_budget_queues_the_session_that_does_not_fit_and_refuses_the_one_that_never_can(pair64, batched_stack):
    target, _ = pair64
    bytes_per_token = model_parts(target.model).kv_shape.bytes_per_token
    requests = _requests("greedy")[:3]
    probe, _, _ = batched_stack()
    alone = [probe.generate(**settings) for settings in requests]
    reserves = [c.usage.prompt_tokens + c.usage.completion_tokens for c in alone]
    reserve, alone = max(reserves), [completion.token_ids for completion in alone]
    # Room for any two of the three sessions at once: the third must wait for one to finish.
    client, verify, _ = batched_stack(kv_cache_bytes=bytes_per_token * (sum(reserves) - 1))
    budget = verify.servicer.runner.budget
    peak = []
    watching = threading.Event()

    def watch():
        while not watching.is_set():
            peak.append(budget.sessions)
            watching.wait(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert _run_together(client, requests) == alone
    finally:
        watching.set()
        watcher.join()
    assert max(peak) == 2 and budget.sessions == 0 and budget.used_tokens == 0
    registry = verify.servicer.metrics.registry
    assert registry.get_sample_value("specdec_kv_cache_tokens", {"state": "used"}) == 0
    assert registry.get_sample_value("specdec_kv_cache_tokens", {"state": "free"}) == sum(reserves) - 1
    with pytest.raises(grpc.RpcError) as raised:
        client.generate(prompt="Hi", max_tokens=3 * reserve, ignore_eos=True)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "max_tokens" in raised.value.details()
    assert client.generate(**requests[0]).token_ids == alone[0]


def test_load_aware_speculation_switches_modes_without_changing_outputs(batched_stack):
    # A draft that reports a negligible step: one session starts drafting and compares (on the tiny pair, whose draft
    # costs about what its target does, the policy would start decided on plain steps: tests/verify_service/test_drafting_bound.py).
    client, verify, _ = batched_stack(draft_ms=1e-3, load_aware_speculation=True, load_window_s=0.05)
    requests = _requests("coupled")
    alone = [client.generate(**settings).token_ids for settings in requests[:4]]
    assert _run_together(client, requests[:4]) == alone
    policy = verify.servicer.load_policy.kinds[True]  # the requests are sampled (coupled)
    measured = {mode for load in (1, 2, 4) for mode in policy.rates(load)}
    assert measured == {True, False}  # both modes ran and were timed
    registry = verify.servicer.metrics.registry
    assert registry.get_sample_value("specdec_load_policy_drafting", {"requests": "sampled"}) == float(policy.drafting)
    # No greedy request ran: that kind is still in the mode it started in (from the step costs timed at load).
    greedy = verify.servicer.load_policy.kinds[False]
    assert not greedy.rates(1)
    assert registry.get_sample_value("specdec_load_policy_drafting", {"requests": "greedy"}) == float(greedy.drafting)
