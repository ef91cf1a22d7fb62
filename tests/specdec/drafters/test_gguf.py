"""The gguf drafter in the in-process loop: token-identical to the target alone (greedy, coupled),
exact under rejection (chi-square with a negative control), and a llama.cpp failure mid-request
falls back with the output unchanged. The service path (overlap, batching) is in
tests/draft_service/test_gguf.py."""

from __future__ import annotations

import pytest
import torch
from gguf_support import load_draft_gguf
from lossless_support import always_accept, joint_p_value

from specdec import acceptance_rounds
from specdec.drafters import DraftRequest
from specdec.drafters.gguf import GgufDrafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.enums import AcceptanceMode
from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def prompt_ids(tiny_target):
    return tiny_target.tokenizer(PROMPT)["input_ids"]


def _with_lookup(model) -> PromptLookupDrafter:
    return PromptLookupDrafter(GgufDrafter(model), LookupSettings(min_ngram=1))


def _run(target, drafter, prompt_ids, **fields):
    request = GenerationRequest(prompt_ids=prompt_ids, **{"max_tokens": 40, "ignore_eos": True, **fields})
    return SpeculativeGenerator(target, drafter).generate(request)


def test_the_targets_own_gguf_drafts_what_the_target_picks(tiny_target, tiny_gguf_target, prompt_ids):
    result = _run(tiny_target, GgufDrafter(tiny_gguf_target), prompt_ids, sampling=GREEDY, num_draft_tokens=4)
    assert result.token_ids == _run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False).token_ids
    assert result.stats.acceptance_rate > 0.9  # the same weights: misaligned positions or a stale cache would show here


@pytest.mark.parametrize("num_draft_tokens", [1, 2, 4])
@pytest.mark.parametrize("which", ["tiny_gguf_target", "tiny_gguf_draft"])
def test_greedy_behind_prompt_lookup_equals_the_target_alone(tiny_target, prompt_ids, request, which, num_draft_tokens):
    drafter = _with_lookup(request.getfixturevalue(which))
    result = _run(tiny_target, drafter, prompt_ids, sampling=GREEDY, num_draft_tokens=num_draft_tokens)
    assert result.token_ids == _run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False).token_ids
    assert result.stats.draft_tokens > 0 and not result.stats.fallback


@pytest.mark.parametrize("num_draft_tokens", [1, 2, 4])
@pytest.mark.parametrize("seed", [0, 7])
def test_coupled_behind_prompt_lookup_equals_the_target_alone_with_the_same_seed(
    tiny_target, tiny_gguf_draft, prompt_ids, seed, num_draft_tokens
):
    sampling = SamplingParams(temperature=0.8)
    reference = _run(tiny_target, None, prompt_ids, sampling=sampling, seed=seed, speculative=False)
    result = _run(
        tiny_target,
        _with_lookup(tiny_gguf_draft),
        prompt_ids,
        sampling=sampling,
        seed=seed,
        acceptance="coupled",
        num_draft_tokens=num_draft_tokens,
    )
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_tokens > 0 and not result.stats.fallback


def test_adaptive_k_chooses_k_per_round_and_stays_identical(tiny_target, tiny_gguf_draft, prompt_ids):
    reference = _run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False)
    result = _run(tiny_target, GgufDrafter(tiny_gguf_draft), prompt_ids, sampling=GREEDY, adaptive_k=True, num_draft_tokens=4)
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_tokens > 0 and not result.stats.fallback


def test_rejection_blocks_carry_the_sparse_q_each_candidate_was_drawn_from(tiny_target, tiny_gguf_draft, prompt_ids):
    request = DraftRequest(
        prompt_ids, SamplingParams(temperature=0.9), AcceptanceMode.REJECTION, seed=1, vocab_size=tiny_target.vocab_size, draft_top_k=16
    )
    session = GgufDrafter(tiny_gguf_draft).open(request)
    try:
        block = session.propose(4)
    finally:
        session.close()
    ids, probs = block.draft_probs
    assert ids.shape == probs.shape == (4, 16)
    assert torch.allclose(probs.sum(-1), torch.ones(4, dtype=probs.dtype))
    assert all(candidate in ids[row].tolist() for row, candidate in enumerate(block.candidate_ids.tolist()))


def test_rejection_joint_of_the_first_two_tokens_matches_the_target(tiny_target, tiny_gguf_draft, prompt_ids):
    assert joint_p_value(tiny_target, _with_lookup(tiny_gguf_draft), prompt_ids) > 1e-3


def test_negative_control_always_accepting_the_gguf_draft_fails_the_joint_test(tiny_target, tiny_gguf_draft, prompt_ids, monkeypatch):
    monkeypatch.setattr(acceptance_rounds, "rejection_accept", always_accept)
    assert joint_p_value(tiny_target, GgufDrafter(tiny_gguf_draft), prompt_ids) < 1e-3


def test_a_llama_cpp_failure_mid_request_falls_back_with_the_output_unchanged(tiny_target, tiny_ggufs, prompt_ids, monkeypatch):
    # A real llama.cpp error: the accounting lets the sequence outgrow the context's 256 cells, so
    # llama_decode itself finds no KV slot partway through the generation.
    model = load_draft_gguf(tiny_ggufs.draft, context_tokens=256)
    try:
        monkeypatch.setattr(model.budget, "capacity_tokens", 1 << 20)
        sampling = SamplingParams(temperature=0.8)
        reference = _run(tiny_target, None, prompt_ids, sampling=sampling, seed=3, speculative=False, max_tokens=300)
        result = _run(tiny_target, GgufDrafter(model), prompt_ids, sampling=sampling, seed=3, acceptance="coupled", max_tokens=300)
    finally:
        model.close()
    assert result.token_ids == reference.token_ids
    assert result.stats.fallback and result.stats.draft_tokens > 0
