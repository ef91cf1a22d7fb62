"""Adaptive K as pure arithmetic: the formula, the cost and acceptance estimates, the controller."""

from __future__ import annotations

import random

import pytest

from specdec.adaptive_k import (
    AcceptanceEstimate,
    AdaptiveKSettings,
    DraftLengthController,
    RecentMedian,
    TargetCostTable,
    best_draft_length,
    expected_tokens,
    round_ms,
)


def flat(ms: float):
    return lambda n: ms


def affine(fixed_ms: float, per_token_ms: float):
    return lambda n: fixed_ms + per_token_ms * n


# --- The formula ---------------------------------------------------------------------------------


@pytest.mark.parametrize("acceptance", [0.0, 0.3, 0.9, 1.0])
@pytest.mark.parametrize("k", [0, 1, 4, 8])
def test_expected_tokens_is_the_sum_of_survival_probabilities(acceptance, k):
    # Token i (0 = the first candidate) is emitted when all candidates before it were kept.
    assert expected_tokens(acceptance, k) == pytest.approx(sum(acceptance**i for i in range(k + 1)))


def _simulated_tokens_per_round(acceptance: float, k: int, rounds: int, rng: random.Random) -> float:
    total = 0
    for _ in range(rounds):
        kept = 0
        while kept < k and rng.random() < acceptance:
            kept += 1
        total += kept + 1  # the target's own token (recovered or bonus)
    return total / rounds


def test_expected_tokens_matches_a_simulated_acceptance_process():
    measured = _simulated_tokens_per_round(0.7, 4, 20_000, random.Random(0))
    assert measured == pytest.approx(expected_tokens(0.7, 4), abs=0.03)
    # Negative control: the same measurement refutes a nearby acceptance rate.
    assert abs(measured - expected_tokens(0.6, 4)) > 0.15


def test_a_round_without_candidates_is_one_target_step():
    assert round_ms(0, draft_ms_per_token=3.0, target_ms=affine(10, 1), overhead_ms=5.0) == 11.0
    assert round_ms(2, draft_ms_per_token=3.0, target_ms=affine(10, 1), overhead_ms=5.0) == 6 + 13 + 5


# --- The choice ----------------------------------------------------------------------------------


def test_high_acceptance_and_a_cheap_draft_choose_a_long_block():
    assert best_draft_length(0.9, 0.5, flat(10.0), 0.0, min_k=0, max_k=8) == 8
    assert best_draft_length(0.9, 0.5, flat(10.0), 0.0, min_k=0, max_k=64) >= 10


def test_low_acceptance_stops_drafting():
    assert best_draft_length(0.05, 0.5, flat(10.0), 0.0, min_k=0, max_k=8) == 0


def test_min_k_keeps_drafting_even_where_it_loses():
    assert best_draft_length(0.05, 0.5, flat(10.0), 0.0, min_k=2, max_k=8) == 2


def test_a_target_cost_that_grows_with_the_block_chooses_a_shorter_block():
    on_flat = best_draft_length(0.9, 0.5, flat(10.0), 0.0, min_k=0, max_k=16)
    on_growth = best_draft_length(0.9, 0.5, affine(10.0, 2.5), 0.0, min_k=0, max_k=16)
    assert 1 <= on_growth < on_flat


def test_a_draft_as_expensive_as_the_target_never_pays():
    # Self-speculation with the target itself on a CPU: every candidate costs a target step.
    assert best_draft_length(0.99, 10.0, affine(9.0, 1.0), 0.0, min_k=0, max_k=8) == 0


def test_per_round_overhead_favours_fewer_longer_rounds_or_none():
    without = best_draft_length(0.8, 0.5, flat(10.0), 0.0, min_k=0, max_k=3)
    assert without == 3
    assert best_draft_length(0.8, 0.5, flat(10.0), 100.0, min_k=0, max_k=3) == 0


# --- Estimates -----------------------------------------------------------------------------------


def test_recent_median_ignores_a_spike_and_follows_a_lasting_change():
    costs = RecentMedian(window=5)
    assert costs.value is None
    costs.observe(200.0)  # a preempted round ...
    costs.observe(2.0)
    assert costs.value == 2.0  # ... does not decide, even among two samples
    for sample in (2.1, 150.0, 1.9):
        costs.observe(sample)
    assert costs.value == 2.1
    for sample in (5.0, 5.2, 5.1, 5.0):  # the step really got slower (a longer context)
        costs.observe(sample)
    assert costs.value == 5.0


def test_recent_median_reports_the_typical_cost_where_a_step_is_mostly_slow():
    # Negative control for the minimum: a pass that is fast once in a while is still slow.
    costs = RecentMedian(window=9)
    for sample in (2.0, 90.0, 110.0, 100.0, 95.0, 2.5, 105.0):
        costs.observe(sample)
    assert costs.value == 95.0


def test_target_cost_table_interpolates_between_measured_block_sizes():
    table = TargetCostTable(window=3)
    table.observe(1, 10.0)
    table.observe(5, 18.0)
    assert table.estimate(1) == 10.0
    assert table.estimate(3) == pytest.approx(14.0)
    assert table.estimate(9) == pytest.approx(26.0)  # the last slope, extended
    table.observe(3, 30.0)  # noise that makes the cost fall with n again ...
    assert table.estimate(9) == pytest.approx(18.0)  # ... never extrapolates a falling cost


def test_target_cost_table_is_flat_outside_a_single_point_and_below_its_range():
    table = TargetCostTable(window=3)
    table.observe(4, 12.0)
    assert table.estimate(1) == table.estimate(9) == 12.0
    table.observe(6, 20.0)
    assert table.estimate(1) == 12.0


def _observe_rounds(estimate: AcceptanceEstimate, acceptance: float, k: int, rounds: int, rng: random.Random) -> None:
    for _ in range(rounds):
        kept = 0
        while kept < k and rng.random() < acceptance:
            kept += 1
        estimate.observe(k, kept)


@pytest.mark.parametrize("true_acceptance", [0.2, 0.8])
def test_acceptance_estimate_converges_to_the_true_rate(true_acceptance):
    rng = random.Random(1)
    estimates = []
    for _ in range(200):
        estimate = AcceptanceEstimate(prior_mean=0.5, prior_weight=2.0, decay=0.95)
        _observe_rounds(estimate, true_acceptance, 5, 100, rng)
        estimates.append(estimate.mean)
    mean = sum(estimates) / len(estimates)
    # The prior pulls a little towards 0.5; the geometric counting itself is unbiased enough.
    assert mean == pytest.approx(true_acceptance, abs=0.05)
    other = 0.8 if true_acceptance == 0.2 else 0.2
    assert abs(mean - other) > 0.5  # negative control


def test_acceptance_estimate_counts_only_the_first_rejection():
    estimate = AcceptanceEstimate(prior_mean=0.5, prior_weight=0.0, decay=1.0)
    estimate.observe(4, 4)  # all kept: 4 trials, no rejection
    estimate.observe(4, 1)  # kept 1, then rejected: positions 3 and 4 were never tested
    assert (estimate.accepted, estimate.rejected) == (5, 1)
    assert estimate.mean == pytest.approx(5 / 6)


# --- The controller, against a simulated drafter and target --------------------------------------


def _run(
    controller: DraftLengthController, acceptance_by_round, rounds: int, rng: random.Random, draft_ms: float = 0.5, target_ms=None
) -> list[int]:
    target_ms = target_ms or affine(10.0, 0.2)
    chosen = []
    for index in range(rounds):
        k = controller.next_k()
        assert controller.next_k() == k  # asking twice changes nothing
        kept = 0
        while kept < k and rng.random() < acceptance_by_round(index):
            kept += 1
        prefill_ms = 500.0 if index == 0 else 0.0
        controller.observe(k, kept, draft_ms * k, target_ms(k + 1) + prefill_ms, transport_ms=0.1 if k else 0.0)
        chosen.append(k)
    return chosen


def test_controller_measures_both_ends_of_its_range_first():
    chosen = _run(DraftLengthController(AdaptiveKSettings(min_k=1, max_k=6, warmup_rounds=2)), lambda _: 0.5, 5, random.Random(0))
    assert chosen == [6, 6, 6, 1, 1]


def test_controller_converges_to_a_long_block_for_a_good_draft_and_to_none_for_a_bad_one():
    settings = AdaptiveKSettings(min_k=0, max_k=8)
    good = _run(DraftLengthController(settings), lambda _: 0.95, 200, random.Random(2))
    bad = _run(DraftLengthController(settings), lambda _: 0.05, 200, random.Random(2))
    assert sorted(good[100:])[50] == 8
    assert sorted(bad[100:])[50] == 0


def test_controller_probes_k1_from_k0_and_comes_back_when_the_draft_improves():
    settings = AdaptiveKSettings(min_k=0, max_k=8, probe_every=16)
    chosen = _run(DraftLengthController(settings), lambda index: 0.02 if index < 150 else 0.95, 300, random.Random(3))
    stopped = chosen[50:150]
    assert stopped.count(0) >= 90 and set(stopped) <= {0, 1}
    assert all(stopped[index - 50] == 1 for index in range(64, 150, 16))  # the probes
    assert sorted(chosen[250:])[25] >= 6  # speculation came back
    # Negative control: a draft that stays bad is never brought back.
    stays_bad = _run(DraftLengthController(settings), lambda _: 0.02, 300, random.Random(3))
    assert max(stays_bad[250:]) <= 1


def test_controller_follows_costs_where_acceptance_is_equal():
    settings = AdaptiveKSettings(min_k=0, max_k=8)
    cheap = _run(DraftLengthController(settings), lambda _: 0.8, 200, random.Random(4), draft_ms=0.2, target_ms=flat(10.0))
    costly = _run(DraftLengthController(settings), lambda _: 0.8, 200, random.Random(4), draft_ms=0.2, target_ms=affine(5.0, 2.5))
    assert sorted(cheap[100:])[50] == 8
    assert 1 <= sorted(costly[100:])[50] <= 4


def test_controller_stays_within_its_bounds():
    chosen = _run(DraftLengthController(AdaptiveKSettings(min_k=2, max_k=4)), lambda _: 0.01, 100, random.Random(5))
    assert set(chosen) <= {2, 3, 4} and chosen.count(2) > 80


def test_controller_refuses_bounds_in_the_wrong_order():
    with pytest.raises(ValueError, match="min_k <= max_k"):
        DraftLengthController(AdaptiveKSettings(min_k=5, max_k=3))
