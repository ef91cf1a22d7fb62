"""Structured outputs under speculation on the tiny pair: the masked target distribution, reproduced exactly.

Lossless here means: exactly what target-only decoding under the same grammar gives (DESIGN.md,
constraints and penalties). Greedy and coupled are token-identical to speculation off; rejection's
first two tokens follow the exact masked joint law (chi-square), and not the unmasked one (negative control).
"""

from __future__ import annotations

import pytest
from lossless_support import JOINT_SAMPLING
from scipy import stats

from specdec.constraints.grammars import json_schema_grammar, regex_grammar
from specdec.constraints.matcher import GrammarConstraint
from specdec.drafters import ModelDrafter, NgramDrafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.generation import SpeculativeGenerator
from specdec.kv_cache import CachedSequence
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams, processed_probs

PROMPT = 'Reply in JSON. {"name": "fox", "count": 3} {"name": "dog", "count": 12} {"name": '
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "count": {"type": "integer"}},
          "required": ["name", "count"], "additionalProperties": False}
GRAMMARS = {"json_schema": json_schema_grammar(SCHEMA, "schema"),
            "regex": regex_grammar("(cat|dog|bird|fish|fox)( [a-z]+){0,6}", "regex")}
GREEDY = SamplingParams(temperature=0)
TRIALS = 1500


@pytest.fixture(scope="module")
def prompt_ids(tiny_target):
    return tiny_target.tokenizer(PROMPT)["input_ids"]


@pytest.fixture(scope="module")
def drafters(tiny_target, tiny_draft):
    return {
        "model": ModelDrafter(tiny_draft.model),
        "ngram": NgramDrafter(),
        "lookup+model": PromptLookupDrafter(ModelDrafter(tiny_draft.model), LookupSettings(min_ngram=1, model_tokens=2)),
    }


def _run(target, drafter, prompt_ids, grammar, **fields):
    request = GenerationRequest(prompt_ids=prompt_ids, grammar=grammar, **{"max_tokens": 40, **fields})
    return SpeculativeGenerator(target, drafter).generate(request)


def _matches(target, prompt_ids, grammar, token_ids) -> bool:
    constraint = GrammarConstraint.for_model(grammar, len(prompt_ids), target, target.vocab_size)
    return constraint.valid_prefix_length(prompt_ids, token_ids) == len(token_ids)


@pytest.mark.parametrize("grammar_name", sorted(GRAMMARS))
@pytest.mark.parametrize("method", ["model", "ngram", "lookup+model"])
def test_greedy_under_a_grammar_equals_target_only(tiny_target, drafters, prompt_ids, grammar_name, method):
    grammar = GRAMMARS[grammar_name]
    reference = _run(tiny_target, None, prompt_ids, grammar, sampling=GREEDY, speculative=False)
    result = _run(tiny_target, drafters[method], prompt_ids, grammar, sampling=GREEDY, num_draft_tokens=4)
    assert result.token_ids == reference.token_ids
    assert _matches(tiny_target, prompt_ids, grammar, reference.token_ids)
    unconstrained = _run(tiny_target, None, prompt_ids, None, sampling=GREEDY, speculative=False)
    assert unconstrained.token_ids != reference.token_ids  # the grammar really changed the output
    if method == "model":
        assert result.stats.draft_tokens > 0


@pytest.mark.parametrize("seed", [0, 7])
def test_coupled_under_a_grammar_equals_target_only_with_the_same_seed(tiny_target, drafters, prompt_ids, seed):
    sampling = SamplingParams(temperature=1.0)
    for grammar in GRAMMARS.values():
        reference = _run(tiny_target, None, prompt_ids, grammar, sampling=sampling, seed=seed, speculative=False)
        assert _matches(tiny_target, prompt_ids, grammar, reference.token_ids)
        for drafter in drafters.values():
            result = _run(tiny_target, drafter, prompt_ids, grammar, sampling=sampling, seed=seed, acceptance="coupled")
            assert result.token_ids == reference.token_ids


def test_a_finished_grammar_ends_with_eos_and_stop(tiny_target, tiny_draft, prompt_ids):
    grammar = regex_grammar("(cat|dog)", "regex")
    result = _run(tiny_target, ModelDrafter(tiny_draft.model), prompt_ids, grammar, sampling=SamplingParams(temperature=1.0), seed=3)
    assert result.finish_reason == "stop"
    assert result.text in ("cat", "dog")


def test_rejection_under_a_grammar_matches_the_masked_joint(tiny_target, tiny_draft, prompt_ids):
    grammar = GRAMMARS["regex"]
    counts, masked = _first_pairs(tiny_target, ModelDrafter(tiny_draft.model), prompt_ids, grammar), _joint(tiny_target, prompt_ids, grammar)
    assert _p_value(counts, masked) > 1e-3
    # Negative control: the same samples are far from the unmasked target's law.
    assert _p_value(counts, _joint(tiny_target, prompt_ids, None)) < 1e-6


def _first_pairs(target, drafter, prompt_ids, grammar) -> dict[tuple[int, int], int]:
    generator, counts = SpeculativeGenerator(target, drafter), {}
    for seed in range(TRIALS):
        request = GenerationRequest(prompt_ids=prompt_ids, grammar=grammar, max_tokens=3, sampling=JOINT_SAMPLING, seed=seed, num_draft_tokens=3)
        pair = tuple(generator.generate(request).token_ids[:2])
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def _joint(target, prompt_ids, grammar) -> dict[tuple[int, int], float]:
    """The exact law of the first two tokens under the grammar (None: unconstrained), target-only."""
    constraint = GrammarConstraint.for_model(grammar, len(prompt_ids), target, target.vocab_size)
    lm = CachedSequence(target.model)

    def probs(sequence):
        logits = lm.advance(sequence)[-1].double()
        if constraint is not None:
            logits = logits.masked_fill(~constraint.allowed(sequence), float("-inf"))
        return processed_probs(logits, JOINT_SAMPLING)

    first, joint = probs(prompt_ids), {}
    for token in first.nonzero().flatten().tolist():
        second = probs([*prompt_ids, token])
        for next_token in second.nonzero().flatten().tolist():
            joint[(token, next_token)] = float(first[token] * second[next_token])
    return joint


def _p_value(counts: dict[tuple[int, int], int], expected: dict[tuple[int, int], float]) -> float:
    if any(pair not in expected for pair in counts):
        return 0.0  # a pair this law can never produce
    observed = [counts.get(pair, 0) for pair in expected]
    return float(stats.chisquare(observed, [expected[pair] * TRIALS for pair in expected]).pvalue)
