"""Keyed Gumbel noise: a pure function of (seed, position, token id), uniform and independent."""

from __future__ import annotations

import torch
from scipy import stats

from specdec.noise import gumbel_argmax, keyed_gumbel, keyed_gumbel_at, keyed_uniform


def test_same_key_same_noise_and_no_hidden_state():
    positions = torch.tensor([0, 5, 123456])
    first = keyed_uniform(7, positions, 1000)
    torch.manual_seed(0)  # global RNG state must not matter
    assert torch.equal(first, keyed_uniform(7, positions, 1000))


def test_noise_of_a_token_does_not_depend_on_vocab_size_or_other_positions():
    wide = keyed_uniform(3, torch.tensor([10, 11, 12]), 5000)
    narrow = keyed_uniform(3, torch.tensor([11]), 300)
    assert torch.equal(wide[1, :300], narrow[0])


def test_different_seeds_and_positions_give_unrelated_noise():
    base = keyed_uniform(1, torch.tensor([4]), 20000)[0]
    other_seed = keyed_uniform(2, torch.tensor([4]), 20000)[0]
    other_position = keyed_uniform(1, torch.tensor([5]), 20000)[0]
    for other in (other_seed, other_position):
        assert abs(float(torch.corrcoef(torch.stack([base, other]))[0, 1])) < 0.03


def test_large_seeds_are_accepted_and_distinct():
    positions = torch.tensor([0])
    assert not torch.equal(keyed_uniform(2**63 + 5, positions, 64), keyed_uniform(5, positions, 64))


def test_uniform_is_in_open_interval_and_uniform():
    values = keyed_uniform(42, torch.arange(20), 10000).flatten()
    assert values.min() > 0 and values.max() < 1
    assert stats.kstest(values.numpy(), "uniform").pvalue > 1e-3


def test_gumbel_has_standard_gumbel_distribution():
    values = keyed_gumbel(9, torch.arange(10), 10000).flatten()
    assert stats.kstest(values.numpy(), "gumbel_r").pvalue > 1e-3


def test_gumbel_argmax_never_picks_zero_probability_tokens():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5]] * 500)
    choices = gumbel_argmax(probs, keyed_gumbel(0, torch.arange(500), 4))
    assert set(choices.tolist()) == {1, 3}


def test_noise_at_a_few_token_ids_is_the_full_rows_noise_there():
    token_ids = torch.tensor([0, 5, 299, 77, 123])
    for seed, position in ((0, 0), (7, 13), (2**63 + 5, 4000)):
        assert torch.equal(keyed_gumbel_at(seed, position, token_ids), keyed_gumbel(seed, torch.tensor([position]), 300)[0, token_ids])
