"""The acceptance rules reproduce the target distribution: exactly, and by seeded Monte Carlo."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from specdec.acceptance import (
    RoundVerdict,
    acceptance_probabilities,
    coupled_accept,
    greedy_accept,
    recovery_distribution,
    rejection_accept,
)
from specdec.noise import keyed_gumbel
from specdec.sampling import SamplingParams, SparseDistribution, densify, processed_probs, sparse_top_k

SIGNIFICANCE = 1e-3


def _random_dist(vocab: int, generator: torch.Generator, zeros: int = 0) -> torch.Tensor:
    probs = torch.rand(vocab, generator=generator, dtype=torch.float64) ** 3
    if zeros:
        probs[torch.randperm(vocab, generator=generator)[:zeros]] = 0.0
    return probs / probs.sum()


def _one_step_output(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """Exact distribution of the first emitted token: sum over candidates c ~ q of
    q(c) * [a(c) * 1{x = c} + (1 - a(c)) * recovery(x)], with the implementation's a and recovery."""
    vocab = target_probs.shape[0]
    support = draft_probs.nonzero().flatten()
    accept = acceptance_probabilities(target_probs[support], draft_probs[support])
    output = torch.zeros(vocab, dtype=torch.float64)
    output[support] += draft_probs[support] * accept
    output += (draft_probs[support] * (1 - accept)).sum() * recovery_distribution(target_probs, draft_probs)
    return output


@pytest.mark.parametrize("vocab", [2, 3, 8, 50, 257])
@pytest.mark.parametrize("target_zeros,draft_zeros", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_one_rejection_step_emits_exactly_target_probs(vocab, target_zeros, draft_zeros):
    generator = torch.Generator().manual_seed(vocab * 10 + target_zeros * 2 + draft_zeros)
    for _ in range(20):
        target_probs = _random_dist(vocab, generator, zeros=min(target_zeros * vocab // 3, vocab - 1))
        draft_probs = _random_dist(vocab, generator, zeros=min(draft_zeros * vocab // 3, vocab - 1))
        assert torch.allclose(_one_step_output(target_probs, draft_probs), target_probs, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "params", [SamplingParams(top_k=3), SamplingParams(top_p=0.6), SamplingParams(temperature=0.5, top_k=5, top_p=0.9)]
)
def test_one_rejection_step_is_exact_after_truncation_and_with_sparse_draft(params):
    generator = torch.Generator().manual_seed(7)
    for _ in range(20):
        target_probs = processed_probs(torch.randn(40, generator=generator, dtype=torch.float64) * 2, params)
        draft_full = processed_probs(torch.randn(40, generator=generator, dtype=torch.float64) * 2, SamplingParams())
        draft_probs = densify(sparse_top_k(draft_full, draft_top_k=6), 40)
        assert torch.allclose(_one_step_output(target_probs, draft_probs), target_probs, atol=1e-6, rtol=0)


# --- Monte Carlo on the real rejection_accept: a chained k=3 step over vocab 8 ------------------

VOCAB, K, TRIALS = 8, 3, 3000


def _always_accept(candidate_ids, draft_probs, target_probs, generator) -> RoundVerdict:
    """Negative control: a broken rule that keeps every candidate, so the output follows q."""
    return RoundVerdict(candidate_ids.tolist(), int(torch.multinomial(target_probs[-1], 1, generator=generator)), len(candidate_ids))


def _chi_square_of_chained_steps(rule, num_pairs: int = 12) -> float:
    """Sum of chi-square statistics (first emitted token vs p_0) over random (p, q) pairs -> p-value."""
    generator = torch.Generator().manual_seed(2024)
    total_statistic, total_dof = 0.0, 0
    for _ in range(num_pairs):
        target_probs = torch.stack([_random_dist(VOCAB, generator, zeros=1) for _ in range(K + 1)])  # [K+1, V]
        draft_probs = torch.stack([_random_dist(VOCAB, generator) for _ in range(K)])  # [K, V]
        sparse = sparse_top_k(draft_probs, VOCAB)
        counts = torch.zeros(K + 1, VOCAB)
        for _ in range(TRIALS):
            candidates = torch.multinomial(draft_probs, 1, generator=generator).flatten()  # [K]
            verdict = rule(candidates, sparse, target_probs, generator)
            for position, token in enumerate(verdict.token_ids):
                counts[position, token] += 1
        for position in range(K + 1):
            expected_probs = target_probs[position]
            observed = counts[position]
            if observed.sum() < 200:
                continue
            kept = expected_probs > 0
            assert observed[~kept].sum() == 0 or rule is _always_accept, "emitted a token the target gives probability 0"
            expected = expected_probs[kept] * observed.sum()
            total_statistic += float(((observed[kept] - expected) ** 2 / expected).sum())
            total_dof += int(kept.sum()) - 1
    return float(stats.chi2.sf(total_statistic, total_dof))


def test_chained_rejection_matches_target_by_chi_square():
    assert _chi_square_of_chained_steps(rejection_accept) > SIGNIFICANCE


def test_negative_control_always_accept_fails_the_same_test():
    assert _chi_square_of_chained_steps(_always_accept) < SIGNIFICANCE


# --- Coupled (keyed Gumbel-max) sampling alone samples p -----------------------------------------


def _coupled_samples(target_probs: torch.Tensor, use_log: bool = True) -> torch.Tensor:
    positions = torch.arange(20000)
    noise = keyed_gumbel(seed=99, positions=positions, vocab_size=target_probs.shape[0])
    scores = (torch.log(target_probs) if use_log else target_probs) + noise
    return scores.argmax(dim=-1)


def _coupled_p_value(use_log: bool) -> float:
    target_probs = _random_dist(VOCAB, torch.Generator().manual_seed(5), zeros=2)
    samples = _coupled_samples(target_probs, use_log)
    observed = torch.bincount(samples, minlength=VOCAB).double()
    kept = target_probs > 0
    if observed[~kept].sum() > 0:
        return 0.0  # sampled a token of probability 0: certainly not p
    return float(stats.chisquare(observed[kept], target_probs[kept] * observed.sum()).pvalue)


def test_coupled_gumbel_max_samples_target_probs():
    assert _coupled_p_value(use_log=True) > SIGNIFICANCE


def test_negative_control_gumbel_on_probabilities_not_logs_fails():
    assert _coupled_p_value(use_log=False) < SIGNIFICANCE


# --- Rule mechanics -------------------------------------------------------------------------------


def test_greedy_accepts_matching_prefix_then_recovers_target_argmax():
    target_probs = torch.eye(6)[[1, 2, 3, 4]]  # argmax per position: 1, 2, 3, 4
    verdict = greedy_accept(torch.tensor([1, 2, 5]), target_probs)
    assert verdict.accepted_ids == [1, 2] and verdict.next_token_id == 3
    all_match = greedy_accept(torch.tensor([1, 2, 3]), target_probs)
    assert all_match.token_ids == [1, 2, 3, 4] and all_match.num_accepted == 3


def test_coupled_accept_equals_target_only_choices():
    generator = torch.Generator().manual_seed(3)
    target_probs = torch.stack([_random_dist(30, generator) for _ in range(4)])
    noise = keyed_gumbel(11, torch.arange(100, 104), 30)
    target_choices = (torch.log(target_probs) + noise).argmax(-1)
    verdict = coupled_accept(target_choices[:3].clone(), target_probs, noise)
    assert verdict.token_ids == target_choices.tolist()
    wrong = target_choices[:3].clone()
    wrong[1] = (wrong[1] + 1) % 30
    assert coupled_accept(wrong, target_probs, noise).token_ids == target_choices[:2].tolist()


def test_rejection_consumes_no_randomness_when_every_ratio_is_one():
    target_probs = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]], dtype=torch.float64)
    draft = SparseDistribution(torch.tensor([[0]]), torch.tensor([[0.5]], dtype=torch.float64))  # p(0) >= q(0)
    generator = torch.Generator().manual_seed(0)
    verdict = rejection_accept(torch.tensor([0]), draft, target_probs, generator)
    assert verdict.accepted_ids == [0]
    replay = torch.Generator().manual_seed(0)
    assert verdict.next_token_id == int(torch.multinomial(target_probs[1], 1, generator=replay))
    # The bonus draw was the only one: both generators are in the same state.
    assert torch.equal(generator.get_state(), replay.get_state())


def test_candidate_with_zero_draft_probability_is_never_accepted():
    target_probs = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    draft = SparseDistribution(torch.tensor([[2]]), torch.tensor([[1.0]], dtype=torch.float64))
    verdict = rejection_accept(torch.tensor([1]), draft, target_probs, torch.Generator().manual_seed(0))
    assert verdict.accepted_ids == [] and verdict.next_token_id == 1  # drawn from p itself


def test_nan_draft_probability_is_treated_as_invalid_and_nan_target_raises():
    target_probs = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    draft = SparseDistribution(torch.tensor([[1]]), torch.tensor([[float("nan")]], dtype=torch.float64))
    verdict = rejection_accept(torch.tensor([1]), draft, target_probs, torch.Generator().manual_seed(0))
    assert verdict.accepted_ids == [] and verdict.next_token_id == 1
    with pytest.raises(ValueError, match="NaN"):
        rejection_accept(torch.tensor([1]), draft, torch.full((2, 2), float("nan")), torch.Generator())


def test_recovery_falls_back_to_target_when_residual_is_empty():
    probs = torch.tensor([0.25, 0.75], dtype=torch.float64)
    assert torch.equal(recovery_distribution(probs, probs.clone()), probs)


def test_empty_block_samples_the_bonus_from_target():
    target_probs = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    empty = SparseDistribution(torch.empty(0, 1, dtype=torch.long), torch.empty(0, 1, dtype=torch.float64))
    verdict = rejection_accept(torch.empty(0, dtype=torch.long), empty, target_probs, torch.Generator())
    assert verdict.token_ids == [2]
