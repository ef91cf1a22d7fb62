"""The gguf drafter behind the draft service (prompt lookup, overlap and batching on), with a verify
service on loopback: token-identical to speculation off for the tiny pair's GGUF and for SmolLM2
drafted by its own Q4_1 file, concurrent sessions sharing llama.cpp passes, and a llama.cpp failure
mid-request falling back with the output unchanged."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import start_draft_server, start_verify_server
from gguf_support import load_draft_gguf

from specdec.bundled import bundled_model_path
from specdec.cli.client import VerifyClient
from specdec.drafters.gguf import GgufDrafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.engines.hf import load_model
from specdec.serving.rpc.convert import vocab_fingerprint

CHAT = [{"role": "user", "content": "Name three colours and say which one you like best."}]
PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


class Stack:
    """Verify (target) -> draft service (GGUF behind prompt lookup, overlap on, batched)."""

    def __init__(self, service_loop, target, gguf) -> None:
        self.gguf = gguf
        drafter = PromptLookupDrafter(GgufDrafter(gguf), LookupSettings(min_ngram=1))
        self.draft = start_draft_server(service_loop, drafter, gguf, overlap=True, max_batch_size=4)
        self.verify = start_verify_server(service_loop, target, f"127.0.0.1:{self.draft.port}")
        self.client = VerifyClient(f"127.0.0.1:{self.verify.port}")

    def identical_to_speculation_off(self, prompt, **settings) -> None:
        reference = self.client.generate(prompt, speculative=False, **settings)
        for num_draft_tokens in (1, 2, 4):
            completion = self.client.generate(prompt, num_draft_tokens=num_draft_tokens, **settings)
            assert completion.token_ids == reference.token_ids, f"K={num_draft_tokens}"
            assert completion.summary.draft_tokens > 0 and not completion.summary.fallback

    def stop(self, service_loop) -> None:
        self.client.close()
        service_loop.run(self.verify.stop(0))
        service_loop.run(self.draft.stop(0))
        self.gguf.close()


@pytest.fixture(scope="module")
def tiny_stack(service_loop, tiny_target, tiny_ggufs):
    stack = Stack(service_loop, tiny_target, load_draft_gguf(tiny_ggufs.draft))
    yield stack
    stack.stop(service_loop)


@pytest.fixture(scope="module")
def smollm2_stack(service_loop, default_target_dir):
    target = load_model(str(default_target_dir), device="cpu", dtype="float32")
    stack = Stack(service_loop, target, load_draft_gguf(bundled_model_path("smollm2-135m-instruct")))
    yield stack
    stack.stop(service_loop)


@pytest.mark.parametrize(
    "settings", [{"temperature": 0}, {"temperature": 0.8, "seed": 11, "acceptance": "coupled"}], ids=["greedy", "coupled"]
)
def test_tiny_gguf_draft_is_token_identical_to_speculation_off(tiny_stack, settings):
    tiny_stack.identical_to_speculation_off(PROMPT, max_tokens=40, ignore_eos=True, **settings)


@pytest.mark.parametrize(
    "settings", [{"temperature": 0}, {"temperature": 0.8, "seed": 5, "acceptance": "coupled"}], ids=["greedy", "coupled"]
)
def test_smollm2_drafted_by_its_own_gguf_is_token_identical_to_speculation_off(smollm2_stack, settings):
    smollm2_stack.identical_to_speculation_off(CHAT, max_tokens=32, **settings)


def test_smollm2_own_gguf_agrees_with_the_target_on_most_greedy_tokens(smollm2_stack):
    completion = smollm2_stack.client.generate(CHAT, max_tokens=48, temperature=0, num_draft_tokens=2)
    summary = completion.summary
    assert summary.accepted_tokens / summary.draft_tokens > 0.7  # the same Q4_1 weights (0.97 on Spec-Bench, docs/benchmarks.md)
    status = smollm2_stack.draft.servicer._status
    assert status["vocab_fingerprint"] == vocab_fingerprint(smollm2_stack.verify.servicer.target.tokenizer)


def test_concurrent_sessions_share_llama_cpp_passes_and_each_stays_identical(tiny_stack):
    prompts = [PROMPT, "Once upon a time there was", "Hello! How are you today?", "Speculative decoding lets a small"]
    settings = {"max_tokens": 32, "temperature": 0, "ignore_eos": True, "num_draft_tokens": 2}
    references = [tiny_stack.client.generate(prompt, **{**settings, "speculative": False}).token_ids for prompt in prompts]
    batches = tiny_stack.draft.servicer.metrics.registry.get_sample_value
    multi_before = batches("specdec_batch_size_count") - batches("specdec_batch_size_bucket", {"le": "1.0"})
    with ThreadPoolExecutor(len(prompts)) as pool:
        completions = list(pool.map(lambda prompt: tiny_stack.client.generate(prompt, **settings), prompts))
    assert [completion.token_ids for completion in completions] == references
    assert not any(completion.summary.fallback for completion in completions)
    assert batches("specdec_batch_size_count") - batches("specdec_batch_size_bucket", {"le": "1.0"}) > multi_before


def test_a_llama_cpp_failure_mid_request_falls_back_and_the_output_is_unchanged(service_loop, tiny_target, tiny_ggufs, monkeypatch):
    gguf = load_draft_gguf(tiny_ggufs.draft, context_tokens=256)
    monkeypatch.setattr(gguf.budget, "capacity_tokens", 1 << 20)  # so llama_decode itself runs out of cells
    stack = Stack(service_loop, tiny_target, gguf)
    try:
        settings = {"max_tokens": 300, "temperature": 0.8, "seed": 2, "acceptance": "coupled", "ignore_eos": True}
        reference = stack.client.generate(PROMPT, speculative=False, **settings)
        completion = stack.client.generate(PROMPT, **settings)
    finally:
        stack.stop(service_loop)
    assert completion.token_ids == reference.token_ids
    assert completion.summary.fallback and completion.summary.draft_tokens > 0
