"""GrammarConstraint on the tiny pair's tokenizer: masks after any sequence, along chains and trees, EOS only where the grammar ends."""

from __future__ import annotations

import pytest
import torch

from specdec.constraints import matcher
from specdec.constraints.grammars import json_schema_grammar, regex_grammar
from specdec.constraints.matcher import GrammarConstraint, compiled_matcher, grammar_prefix
from specdec.errors import InvalidRequestError

PROMPT = [5, 6, 7, 8]


@pytest.fixture(scope="module")
def make(tiny_target):
    def build(grammar: str) -> GrammarConstraint:
        return GrammarConstraint.for_model(grammar, len(PROMPT), tiny_target, tiny_target.vocab_size)

    return build


@pytest.fixture(scope="module")
def encode(tiny_target):
    return lambda text: tiny_target.tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def eos(tiny_target):
    return tiny_target.tokenizer.eos_token_id


def _allows(row: torch.Tensor, token_ids) -> bool:
    return all(bool(row[token]) for token in token_ids)


def test_no_grammar_means_no_constraint(tiny_target):
    assert GrammarConstraint.for_model(None, 3, tiny_target, tiny_target.vocab_size) is None


def test_the_mask_follows_the_grammar_and_allows_eos_only_where_it_ends(make, encode, eos):
    constraint = make(regex_grammar("(cat|dog) [a-z]+", "regex"))
    cat, word = encode("cat"), encode(" fox")
    start = constraint.allowed(PROMPT)
    assert start.shape == (constraint.vocab_size,) and _allows(start, cat[:1]) and not start[eos]
    done = constraint.allowed(PROMPT + cat + word)
    assert done[eos]  # a complete match: the output may end
    assert not constraint.allowed(PROMPT + cat)[eos]  # incomplete: it may not
    assert constraint.is_finished(PROMPT + cat + word) is False  # [a-z]+ may still grow
    finished = make(regex_grammar("cat", "regex"))
    assert finished.is_finished(PROMPT + cat) and finished.allowed(PROMPT + cat).nonzero().flatten().tolist() == sorted(finished.eos_ids)


def test_masks_along_a_chain_equal_masks_after_each_prefix(make, encode):
    constraint, fresh = make(json_schema_grammar({"type": "object"}, "schema")), make(json_schema_grammar({"type": "object"}, "schema"))
    candidates = encode('{"a": [1, 2]}')
    rows = constraint.allowed_along(PROMPT, candidates)
    assert rows.shape == (len(candidates) + 1, constraint.vocab_size)
    for position in range(len(candidates) + 1):
        assert torch.equal(rows[position], fresh.allowed(PROMPT + candidates[:position]))


def test_rows_after_a_refused_candidate_or_an_eos_allow_everything(make, encode, eos):
    constraint = make(regex_grammar("cat", "regex"))
    cat = encode("cat")
    rows = constraint.allowed_along(PROMPT, [*cat, eos, 9])
    assert rows[len(cat)][eos] and rows[len(cat) + 1].all() and rows[len(cat) + 2].all()
    bad = encode("dog")
    rows = constraint.allowed_along(PROMPT, bad)
    assert not rows[0][bad[0]] and rows[1:].all()
    assert constraint.valid_prefix_length(PROMPT, [*cat, eos, 9]) == len(cat) + 1
    assert constraint.valid_prefix_length(PROMPT, bad) == 0
    assert grammar_prefix(constraint, PROMPT, [*cat, 9]) == cat and grammar_prefix(None, PROMPT, bad) == bad


def test_tree_rows_follow_each_nodes_own_root_path(make, encode):
    constraint, fresh = make(regex_grammar("(cat|dog)s?", "regex")), make(regex_grammar("(cat|dog)s?", "regex"))
    cat, dog = encode("cat"), encode("dog")
    node_ids, parents = [cat[0], dog[0]], [-1, -1]  # two root children: the rows differ per branch
    rows = constraint.allowed_along(PROMPT, node_ids, parents)
    assert torch.equal(rows[1], fresh.allowed(PROMPT + cat[:1]))
    assert torch.equal(rows[2], fresh.allowed(PROMPT + dog[:1]))


def test_the_matcher_follows_rollbacks_and_jumps_between_sequences(make, encode):
    grammar = json_schema_grammar({"type": "object", "properties": {"k": {"type": "string"}}}, "schema")
    constraint = make(grammar)
    first, second = encode('{"k": "abc"}'), encode('{"k": "xy')
    for sequence in (PROMPT + first, PROMPT + second[:3], PROMPT + first[:5], PROMPT + second, PROMPT):
        assert torch.equal(constraint.allowed(sequence), make(grammar).allowed(sequence))


def test_a_grammar_the_vocabulary_cannot_build_is_refused_naming_the_field(make):
    with pytest.raises(InvalidRequestError) as caught:
        make('{"grammars": [{"lark_grammar": "start: nope"}]}')
    assert caught.value.field == "grammar"


# --- failing closed ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "grammar",
    [
        regex_grammar("a{1000000}", "regex"),
        json_schema_grammar(
            {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a{1000}){1000}$"}}, "required": ["code"]}, "schema"
        ),
    ],
    ids=["repeat", "nested-repeat-pattern"],
)
def test_a_grammar_whose_lexer_blows_up_once_matching_starts_is_refused_when_built(make, grammar):
    with pytest.raises(InvalidRequestError, match="^grammar: cannot be enforced: lexer error"):
        make(grammar)


@pytest.mark.parametrize(
    "schema",
    [{"$ref": "#"}, {"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"}],
    ids=["self", "mutual"],
)
def test_a_grammar_no_output_satisfies_is_refused_as_unsatisfiable(make, schema):
    with pytest.raises(InvalidRequestError, match="is unsatisfiable"):
        make(json_schema_grammar(schema, "schema"))
    with pytest.raises(InvalidRequestError, match="is unsatisfiable"):
        make(regex_grammar("[^\\s\\S]", "regex"))


def test_a_matcher_that_fails_mid_generation_ends_it_instead_of_allowing_everything(make, encode, monkeypatch):
    # As if the blow-up came past the probe's steps: nothing probed, so the constraint is built.
    monkeypatch.setattr(matcher, "PROBE_STEPS", 0)
    grammar = regex_grammar("a{1000001}", "regex")
    try:
        constraint = make(grammar)
        assert constraint.allowed(PROMPT).any()
        with pytest.raises(InvalidRequestError, match="cannot be enforced: lexer error.*after 0 generated tokens"):
            constraint.allowed_along(PROMPT, encode("a"))  # was: the row after "a" allowed every token
    finally:
        compiled_matcher.cache_clear()  # the unprobed matcher must not serve later tests


def test_constraints_copy_one_compiled_matcher_and_forks_keep_their_state(make, encode):
    compiled_matcher.cache_clear()
    grammar = regex_grammar("(cat|dog) [a-z]+", "regex")
    first, second = make(grammar), make(grammar)
    assert compiled_matcher.cache_info().misses == 1 and compiled_matcher.cache_info().hits == 1
    cat = encode("cat")
    first.allowed(PROMPT + cat)
    fork = first.fork()
    assert fork.consumed == first.consumed == cat and fork.matcher is not first.matcher
    assert torch.equal(fork.allowed(PROMPT + cat), second.allowed(PROMPT + cat))
