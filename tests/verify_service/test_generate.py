"""Generate over gRPC (verify service + draft service on loopback) matches the in-process engine."""

from __future__ import annotations

import grpc
import pytest
from lossless_support import exact_joint
from scipy import stats

from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


@pytest.fixture(scope="module")
def prompt_ids(tiny_target):
    return tiny_target.tokenizer(PROMPT)["input_ids"]


def _target_only(target, prompt_ids, **fields):
    request = GenerationRequest(prompt_ids=prompt_ids, speculative=False, ignore_eos=True, **fields)
    return SpeculativeGenerator(target).generate(request)


@pytest.mark.parametrize("num_draft_tokens", [1, 5])
def test_greedy_generate_equals_in_process_target_only(verify_client, tiny_target, prompt_ids, num_draft_tokens):
    reference = _target_only(tiny_target, prompt_ids, max_tokens=40, sampling=SamplingParams(temperature=0))
    completion = verify_client.generate(PROMPT, max_tokens=40, temperature=0, ignore_eos=True, num_draft_tokens=num_draft_tokens)
    assert completion.token_ids == reference.token_ids and completion.text == reference.text
    assert completion.summary.rounds > 0 and completion.summary.draft_tokens > 0 and not completion.summary.fallback
    assert max(r.num_candidates for r in completion.rounds) == num_draft_tokens


@pytest.mark.parametrize("seed", [0, 7])
def test_coupled_generate_equals_target_only_with_the_same_seed(verify_client, tiny_target, prompt_ids, seed):
    reference = _target_only(tiny_target, prompt_ids, max_tokens=40, sampling=SamplingParams(temperature=0.8), seed=seed)
    completion = verify_client.generate(PROMPT, max_tokens=40, temperature=0.8, seed=seed, acceptance="coupled", ignore_eos=True)
    assert completion.token_ids == reference.token_ids and completion.seed == seed
    assert completion.summary.rounds > 0 and completion.summary.draft_tokens > 0 and completion.summary.accepted_tokens > 0
    spec_off = verify_client.generate(PROMPT, max_tokens=40, temperature=0.8, seed=seed, ignore_eos=True, speculative=False)
    assert spec_off.token_ids == reference.token_ids and spec_off.summary.rounds == 0


def test_rejection_generate_passes_the_two_token_distribution_test(verify_client, tiny_target, prompt_ids):
    expected = exact_joint(tiny_target, prompt_ids)  # at temperature 1, top-k 4
    trials, counts, drafted = 600, dict.fromkeys(expected, 0), 0
    for seed in range(trials):
        # The first token comes from the target's prefill; the second is a verified draft candidate.
        completion = verify_client.generate(
            prompt_ids, max_tokens=3, temperature=1.0, top_k=4, seed=seed, ignore_eos=True, acceptance="rejection"
        )  # named: a seeded request's default is coupled
        pair = tuple(completion.token_ids[:2])
        assert pair in counts, "a pair the target can never produce"
        counts[pair] += 1
        drafted += completion.summary.draft_tokens > 0 and not completion.summary.fallback
    # Nearly every sample went through a verified draft candidate. NOTE: not all: a request's first drafting round
    # waits a bounded time for the draft to catch up on the prompt, and on a loaded machine one in 600 missed it
    # and ran that round as a plain target step (an exact sample of the target too, so the test below still holds).
    assert drafted >= 0.99 * trials
    p_value = stats.chisquare([counts[p] for p in expected], [expected[p] * trials for p in expected]).pvalue
    assert p_value > 1e-3


def test_chat_prompt_streams_text_logprobs_round_stats_and_usage(verify_client, tiny_target):
    messages = [{"role": "user", "content": "Tell me about the river."}]
    prompt_ids = tiny_target.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected_prompt_tokens = len(tiny_target.tokenizer(prompt_ids, add_special_tokens=False)["input_ids"])
    completion = verify_client.generate(messages, max_tokens=12, temperature=0, ignore_eos=True, logprobs=True, top_logprobs=2)
    assert completion.usage.prompt_tokens == expected_prompt_tokens
    assert completion.usage.completion_tokens == len(completion.token_ids) == 12
    assert [entry.token_id for entry in completion.logprobs] == completion.token_ids
    assert all(len(entry.top) == 2 and entry.logprob <= 0 for entry in completion.logprobs)
    assert completion.text == tiny_target.tokenizer.decode(completion.token_ids)
    assert all(r.target_ms > 0 for r in completion.rounds) and any(r.draft_ms > 0 for r in completion.rounds)


def test_stop_string_ends_generation_without_the_stop_text(verify_client):
    full = verify_client.generate(PROMPT, max_tokens=30, temperature=0, ignore_eos=True).text
    stop = full[10:13]
    completion = verify_client.generate(PROMPT, max_tokens=30, temperature=0, ignore_eos=True, stop=[stop])
    assert completion.finish_reason == "stop" and completion.text == full[: full.find(stop)]


def test_deadline_is_honoured_and_the_session_freed(verify_client, verify_server, draft_server):
    with pytest.raises(grpc.RpcError) as raised:
        verify_client.generate(PROMPT, max_tokens=480, temperature=0, ignore_eos=True, timeout=0.05)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    _wait_for_no_sessions(verify_client, draft_server)


def test_cancel_mid_stream_frees_verify_and_draft_sessions(verify_client, draft_server):
    stream = verify_client.generate_stream(PROMPT, max_tokens=400, temperature=0, ignore_eos=True)
    next(stream)
    next(stream)
    assert verify_client.status().active_sessions == 1
    stream.cancel()
    _wait_for_no_sessions(verify_client, draft_server)


def _wait_for_no_sessions(verify_client, draft_server, timeout: float = 10.0) -> None:
    import time

    from specdec.v1 import common_pb2, draft_pb2_grpc

    draft = draft_pb2_grpc.DraftServiceStub(grpc.insecure_channel(f"127.0.0.1:{draft_server.port}"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        verify_active = verify_client.status().active_sessions
        draft_active = draft.Status(common_pb2.ServerStatusRequest(), timeout=5).active_sessions
        if verify_active == 0 and draft_active == 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"sessions still open: verify={verify_active} draft={draft_active}")
