"""The lossless guarantees on every target engine: greedy and coupled speculation equal decoding
without it, token for token, and rejection sampling keeps the target's law (with a negative control)."""

from __future__ import annotations

import pytest
from generation_support import PROMPT
from generation_support import run as _run
from lossless_support import always_accept, joint_p_value

from specdec import acceptance_rounds
from specdec.drafters import ModelDrafter, NgramDrafter
from specdec.drafters.gguf import GgufDrafter
from specdec.drafters.suffix import SuffixDrafter
from specdec.drafters.suffix_cache import SuffixTrees
from specdec.sampling import SamplingParams
from specdec.serving.config import SuffixSection as SuffixConfig

GREEDY = SamplingParams(temperature=0)
# Suffix decoding learns from every generation before (a fresh tree per test would rarely propose anything).
SUFFIX_TREES = SuffixConfig(min_score=0.5).settings()


@pytest.fixture(scope="module")
def prompt_ids(engine_target):
    return engine_target.tokenizer(PROMPT)["input_ids"]


@pytest.fixture(scope="module")
def engine_drafters(tiny_draft, tiny_gguf_draft):
    model = ModelDrafter(tiny_draft.model)
    return {
        "model": model,
        "gguf": GgufDrafter(tiny_gguf_draft),
        "ngram": NgramDrafter(),
        "suffix": SuffixDrafter(SuffixTrees(SUFFIX_TREES)),
        "suffix+model": SuffixDrafter(SuffixTrees(SUFFIX_TREES), model, inner_tokens=2),
    }


@pytest.mark.parametrize("method", ["model", "gguf", "ngram", "suffix", "suffix+model"])
@pytest.mark.parametrize("num_draft_tokens", [1, 4, 8])
def test_greedy_speculative_equals_greedy_target_only(engine_target, engine_drafters, prompt_ids, method, num_draft_tokens):
    reference = _run(engine_target, None, prompt_ids, sampling=GREEDY, speculative=False, max_tokens=120)
    result = _run(engine_target, engine_drafters[method], prompt_ids, sampling=GREEDY, num_draft_tokens=num_draft_tokens, max_tokens=120)
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_tokens > 0  # speculation really happened
    if method.startswith("suffix"):  # the first run taught the trees this output: the second is drafted from them
        again = _run(engine_target, engine_drafters[method], prompt_ids, sampling=GREEDY, num_draft_tokens=num_draft_tokens, max_tokens=120)
        assert again.token_ids == reference.token_ids
        assert again.stats.acceptance_rate > 0.9  # the trees replay this very output


@pytest.mark.parametrize("seed", [0, 7])
def test_coupled_is_token_identical_to_target_only_with_the_same_seed(engine_target, engine_drafters, prompt_ids, seed):
    sampling = SamplingParams(temperature=1.0)
    reference = _run(engine_target, None, prompt_ids, sampling=sampling, seed=seed, speculative=False)
    for drafter in engine_drafters.values():
        result = _run(engine_target, drafter, prompt_ids, sampling=sampling, seed=seed, acceptance="coupled")
        assert result.token_ids == reference.token_ids
    assert reference.token_ids != _run(engine_target, None, prompt_ids, sampling=sampling, seed=seed + 1, speculative=False).token_ids


def test_rejection_joint_of_first_two_tokens_matches_target(engine_target, tiny_draft, prompt_ids):
    assert joint_p_value(engine_target, ModelDrafter(tiny_draft.model), prompt_ids) > 1e-3


def test_negative_control_always_accepting_drafts_fails_the_joint_test(engine_target, tiny_draft, prompt_ids, monkeypatch):
    monkeypatch.setattr(acceptance_rounds, "rejection_accept", always_accept)
    assert joint_p_value(engine_target, ModelDrafter(tiny_draft.model), prompt_ids) < 1e-3


@pytest.mark.parametrize("with_model", [False, True])
def test_rejection_joint_with_suffix_decoding_matches_target(engine_target, tiny_draft, prompt_ids, with_model):
    """The trees learn each trial's output, so later trials' second tokens are mostly suffix candidates (point-mass q)."""
    drafter = SuffixDrafter(SuffixTrees(SUFFIX_TREES), ModelDrafter(tiny_draft.model) if with_model else None, inner_tokens=2)
    assert joint_p_value(engine_target, drafter, prompt_ids) > 1e-3


def test_negative_control_always_accepting_suffix_drafts_fails_the_joint_test(engine_target, prompt_ids, monkeypatch):
    monkeypatch.setattr(acceptance_rounds, "rejection_accept", always_accept)
    assert joint_p_value(engine_target, SuffixDrafter(SuffixTrees(SUFFIX_TREES)), prompt_ids) < 1e-3
