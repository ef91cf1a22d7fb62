"""Structured outputs under speculation on the tiny pair: the masked target distribution, reproduced exactly.

Lossless here means: exactly what target-only decoding under the same grammar gives (README, What
"lossless" means here). Greedy and coupled are token-identical to speculation off; rejection's
first two tokens follow the exact masked joint law (chi-square), which a verifier ignoring the grammar fails
(negative control).
"""

from __future__ import annotations

import pytest
from generation_support import tiny_drafters
from lossless_support import joint_p_value

from specdec.constraints.grammars import json_schema_grammar, regex_grammar
from specdec.constraints.masking import mask_logits
from specdec.constraints.matcher import GrammarConstraint
from specdec.drafters import ModelDrafter
from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams
from specdec.target_session import TargetSession

PROMPT = 'Reply in JSON. {"name": "fox", "count": 3} {"name": "dog", "count": 12} {"name": '
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "count": {"type": "integer"}},
    "required": ["name", "count"],
    "additionalProperties": False,
}
GRAMMARS = {"json_schema": json_schema_grammar(SCHEMA, "schema"), "regex": regex_grammar("(cat|dog|bird|fish|fox)( [a-z]+){0,6}", "regex")}
GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def prompt_ids(tiny_target):
    return tiny_target.tokenizer(PROMPT)["input_ids"]


@pytest.fixture(scope="module")
def drafters(tiny_target, tiny_draft):
    return tiny_drafters(tiny_target, tiny_draft)


def _run(target, drafter, prompt_ids, grammar, **fields):
    request = GenerationRequest(prompt_ids=prompt_ids, grammar=grammar, **{"max_tokens": 40, **fields})
    return SpeculativeGenerator(target, drafter).generate(request)


def _constraint(target, prompt_ids, grammar) -> GrammarConstraint:
    return GrammarConstraint.for_model(grammar, len(prompt_ids), target, target.vocab_size)


def _matches(target, prompt_ids, grammar, token_ids) -> bool:
    return _constraint(target, prompt_ids, grammar).valid_prefix_length(prompt_ids, token_ids) == len(token_ids)


@pytest.mark.parametrize("grammar_name", sorted(GRAMMARS))
@pytest.mark.parametrize("method", ["model", "layer_skip", "ngram", "lookup+model"])
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


def _masked(target, prompt_ids, grammar):
    """The grammar as a transform of one position's logits [1, vocab] after `sequence` (for the exact joint law)."""
    constraint = _constraint(target, prompt_ids, grammar)
    return lambda logits, sequence: mask_logits(logits, constraint.allowed(sequence).unsqueeze(0))


def test_rejection_under_a_grammar_matches_the_masked_joint(tiny_target, tiny_draft, prompt_ids):
    grammar = GRAMMARS["regex"]
    transform = _masked(tiny_target, prompt_ids, grammar)
    assert joint_p_value(tiny_target, ModelDrafter(tiny_draft.model), prompt_ids, transform=transform, grammar=grammar) > 1e-3


def test_negative_control_a_verifier_that_ignores_the_grammar_fails_the_joint_test(tiny_target, tiny_draft, prompt_ids, monkeypatch):
    monkeypatch.setattr(TargetSession, "_constrained", lambda self, logits, block: logits)
    grammar = GRAMMARS["regex"]
    transform = _masked(tiny_target, prompt_ids, grammar)
    assert joint_p_value(tiny_target, ModelDrafter(tiny_draft.model), prompt_ids, trials=300, transform=transform, grammar=grammar) < 1e-3
