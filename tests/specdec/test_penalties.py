"""Penalties and logit_bias as pure functions: the definitions, and the per-position rows the verifier uses."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from specdec.errors import InvalidRequestError
from specdec.penalties import LogitsTransform, Penalties, apply_penalties, path_rows
from specdec.tree import chain_parents

VOCAB = 12
PROMPT = [1, 2, 2, 3]
STRONG = Penalties(presence_penalty=0.7, frequency_penalty=0.4, repetition_penalty=1.6, logit_bias={0: 5.0, 7: -3.0})


def _reference(logits: list[float], prompt: list[int], generated: list[int], penalties: Penalties) -> list[float]:
    """The definitions, token by token, written out plainly."""
    out = []
    for token, value in enumerate(logits):
        value += penalties.logit_bias.get(token, 0.0)
        if token in prompt or token in generated:
            value = value / penalties.repetition_penalty if value > 0 else value * penalties.repetition_penalty
        count = generated.count(token)
        value -= penalties.frequency_penalty * count + penalties.presence_penalty * (count > 0)
        out.append(value)
    return out


def test_apply_penalties_follows_the_definitions_token_by_token():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(VOCAB, generator=generator, dtype=torch.float64) * 3
    generated = [3, 5, 5, 9]
    transform = LogitsTransform(STRONG, PROMPT, VOCAB)
    got = transform(logits[None], PROMPT + generated)[0]
    assert got.tolist() == pytest.approx(_reference(logits.tolist(), PROMPT, generated, STRONG))


def test_the_prompt_counts_for_repetition_but_not_for_presence_or_frequency():
    logits = torch.ones(1, VOCAB)
    only_presence = LogitsTransform(Penalties(presence_penalty=1.0, frequency_penalty=1.0), PROMPT, VOCAB)
    assert torch.equal(only_presence(logits, PROMPT), logits)
    only_repetition = LogitsTransform(Penalties(repetition_penalty=2.0), PROMPT, VOCAB)
    expected = torch.ones(1, VOCAB)
    expected[0, PROMPT] = 0.5
    assert torch.equal(only_repetition(logits, PROMPT), expected)


def test_chain_rows_equal_the_transform_after_each_prefix_one_at_a_time():
    generator = torch.Generator().manual_seed(1)
    committed = PROMPT + [4, 4]
    candidates = [4, 6, 0, 6]
    logits = torch.randn(len(candidates) + 1, VOCAB, generator=generator)  # [k + 1, vocab]
    rows = LogitsTransform(STRONG, PROMPT, VOCAB)(logits, committed, candidates, path_rows(chain_parents(len(candidates))))
    for row in range(len(candidates) + 1):
        alone = LogitsTransform(STRONG, PROMPT, VOCAB)(logits[row : row + 1], committed + candidates[:row])
        assert torch.allclose(rows[row], alone[0])


def test_tree_rows_use_each_node_s_own_root_path_only():
    generator = torch.Generator().manual_seed(2)
    committed = PROMPT + [5]
    node_ids, parents = [5, 8, 5, 9], [-1, -1, 0, 1]  # two branches: 5 -> 5, and 8 -> 9
    logits = torch.randn(len(node_ids) + 1, VOCAB, generator=generator)
    rows = LogitsTransform(STRONG, PROMPT, VOCAB)(logits, committed, node_ids, path_rows(parents))
    root_paths = [[], [5], [8], [5, 5], [8, 9]]  # before row 0, and after each node
    for row, path in enumerate(root_paths):
        alone = LogitsTransform(STRONG, PROMPT, VOCAB)(logits[row : row + 1], committed + path)
        assert torch.allclose(rows[row], alone[0]), row


def test_a_rolled_back_sequence_is_counted_afresh():
    transform = LogitsTransform(Penalties(frequency_penalty=1.0), PROMPT, VOCAB)
    logits = torch.zeros(1, VOCAB)
    assert transform(logits, PROMPT + [6, 6, 6])[0, 6] == -3.0
    assert transform(logits, PROMPT + [6])[0, 6] == -1.0  # shorter: a drafter rolled back
    assert transform(logits, PROMPT + [7, 6])[0, 6] == -1.0  # same length, other tokens
    assert transform(logits, PROMPT + [7, 6, 6])[0, 6] == -2.0  # extended incrementally


def test_minus_infinity_stays_minus_infinity_and_no_nan_appears():
    logits = torch.full((1, VOCAB), float("-inf"))
    logits[0, :4] = torch.tensor([2.0, -1.0, 0.0, 3.0])
    out = LogitsTransform(STRONG, PROMPT, VOCAB)(logits, PROMPT + [1])
    assert not torch.isnan(out).any() and torch.isinf(out[0, 4:]).all()


def test_half_precision_logits_are_transformed_in_float32():
    out = LogitsTransform(STRONG, PROMPT, VOCAB)(torch.ones(1, VOCAB, dtype=torch.bfloat16), PROMPT)
    assert out.dtype == torch.float32


def test_defaults_are_the_identity_and_cost_nothing():
    assert Penalties().is_identity and Penalties(logit_bias={3: 0.0}).is_identity
    assert LogitsTransform.for_request(Penalties(), PROMPT, VOCAB) is None
    assert not STRONG.is_identity and LogitsTransform.for_request(STRONG, PROMPT, VOCAB) is not None


@pytest.mark.parametrize(
    "fields,where",
    [
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -2.01}, "frequency_penalty"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"repetition_penalty": float("inf")}, "repetition_penalty"),
        ({"logit_bias": {3: 100.5}}, "logit_bias"),
        ({"logit_bias": {3: float("nan")}}, "logit_bias"),
        ({"logit_bias": {-1: 1.0}}, "logit_bias"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(fields, where):
    with pytest.raises(ValidationError) as caught:
        Penalties(**fields)
    assert caught.value.errors()[0]["loc"][0] == where


def test_logit_bias_ids_outside_the_vocabulary_are_refused_naming_the_field():
    with pytest.raises(InvalidRequestError) as caught:
        Penalties(logit_bias={VOCAB: 1.0}).check_vocab(VOCAB, "options.penalties.logit_bias")
    assert caught.value.field == "options.penalties.logit_bias" and str(VOCAB) in str(caught.value)
    Penalties(logit_bias={VOCAB - 1: 1.0}).check_vocab(VOCAB, "logit_bias")


def test_apply_penalties_on_rows_counts_per_row():
    logits = torch.zeros(2, 3)
    counts = torch.tensor([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0]])
    seen = counts > 0
    out = apply_penalties(logits, counts, seen, None, Penalties(frequency_penalty=1.0, presence_penalty=0.5))
    assert out.tolist() == [[0.0, -2.5, 0.0], [-1.5, 0.0, 0.0]]
