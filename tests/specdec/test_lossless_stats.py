"""The rejection check's statistics: prefix binning, the stratified joint test (with the real
rejection sampler and two biased verifiers as negative controls), and the detectable distance."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from specdec.acceptance import RoundVerdict, rejection_accept
from specdec.lossless_stats import SIGNIFICANCE, bin_outcomes, detectable_tv, joint_test
from specdec.sampling import sparse_top_k

VOCAB, K, TOKENS = 6, 2, 3


def test_rare_outcomes_merge_into_their_prefix_and_the_counts_are_kept():
    on = Counter({("a", "b", "c"): 20, ("a", "b", "d"): 3, ("a", "b", "e"): 2, ("a", "x", "y"): 4, ("z", "z", "z"): 1})
    off = Counter({("a", "b", "c"): 18, ("a", "b", "d"): 4, ("a", "b", "e"): 2, ("a", "x", "y"): 5, ("q", "q", "q"): 1})
    cells = bin_outcomes(on, off)
    # (a,b,c) alone; (a,b,d)+(a,b,e) as "(a,b) then other" (11); (a,x,y) as "(a) then other" (9 < 10:
    # merged into (a,x), then (a)); the residue of 2 (z..., q...) joins the smallest cell.
    assert sorted(cells) == sorted([(20, 18), (5, 6), (4 + 1, 5 + 1)])
    assert sum(on for on, _ in cells) == sum(on.values()) and sum(off for _, off in cells) == sum(off.values())


def test_one_cell_means_nothing_to_compare():
    test = joint_test([(Counter({("a",): 30}), Counter({("a",): 30}))])
    assert test.dof == 0 and test.p_value == 1.0 and test.detectable_tv is None


# --- a two-state-memory "model": Markov chains over VOCAB tokens, generated like the services do -----


def _chain(generator: torch.Generator, peak: float) -> torch.Tensor:
    """[VOCAB, VOCAB]: next-token probabilities given the previous token."""
    logits = peak * torch.randn(VOCAB, VOCAB, generator=generator, dtype=torch.float64)
    return torch.softmax(logits, dim=-1)


def _target_only(target: torch.Tensor, start: int, generator: torch.Generator) -> tuple[int, ...]:
    tokens = [start]
    for _ in range(TOKENS):
        tokens.append(int(torch.multinomial(target[tokens[-1]], 1, generator=generator)))
    return tuple(tokens[1:])


def _speculative(rule, target: torch.Tensor, draft: torch.Tensor, start: int, generator: torch.Generator) -> tuple[int, ...]:
    """Rounds as in the services: K = min(2, remaining - 1) candidates, verified by `rule`."""
    tokens = [start]
    while len(tokens) <= TOKENS:
        budget = min(K, TOKENS - len(tokens))
        candidates, context = [], tokens[-1]
        for _ in range(budget):
            context = int(torch.multinomial(draft[context], 1, generator=generator))
            candidates.append(context)
        if not candidates:  # one token left: a plain target step
            tokens.append(int(torch.multinomial(target[tokens[-1]], 1, generator=generator)))
            continue
        draft_probs = sparse_top_k(draft[[tokens[-1], *candidates[:-1]]], VOCAB)  # [budget, VOCAB]: q of each candidate
        target_probs = target[[tokens[-1], *candidates]]  # [budget + 1, VOCAB]
        verdict = rule(torch.tensor(candidates, dtype=torch.int64), draft_probs, target_probs, generator)
        tokens.extend(verdict.token_ids)
    return tuple(tokens[1 : TOKENS + 1])


def _always_accept(candidate_ids, draft_probs, target_probs, generator) -> RoundVerdict:
    """Biased: keeps every candidate, so the output follows the draft."""
    bonus = int(torch.multinomial(target_probs[-1], 1, generator=generator))
    return RoundVerdict(candidate_ids.tolist(), bonus, len(candidate_ids))


def _no_residual(candidate_ids, draft_probs, target_probs, generator) -> RoundVerdict:
    """Biased in the recovered path only: accepts with min(1, p/q) but resamples p, not norm(max(p - q, 0))."""
    accepted = []
    for position, token in enumerate(candidate_ids.tolist()):
        q = float(draft_probs.probs[position][draft_probs.token_ids[position] == token].sum())
        if float(torch.rand(1, generator=generator, dtype=torch.float64)) * q > float(target_probs[position, token]):
            break
        accepted.append(token)
    return RoundVerdict(accepted, int(torch.multinomial(target_probs[len(accepted)], 1, generator=generator)), len(candidate_ids))


def _joint_p_value(rule, samples_per_prompt: int = 400, seed: int = 7) -> float:
    generator = torch.Generator().manual_seed(seed)
    target, draft = _chain(generator, 1.2), _chain(generator, 1.2)
    strata = []
    for start in range(3):  # three "prompts"
        on = Counter(_speculative(rule, target, draft, start, generator) for _ in range(samples_per_prompt))
        off = Counter(_target_only(target, start, generator) for _ in range(samples_per_prompt))
        strata.append((on, off))
    return joint_test(strata).p_value


def test_the_real_rejection_sampler_passes_the_joint_test():
    assert _joint_p_value(rejection_accept) > SIGNIFICANCE


@pytest.mark.parametrize("biased", [_always_accept, _no_residual])
def test_a_biased_verifier_is_caught(biased):
    assert _joint_p_value(biased) < SIGNIFICANCE


# --- the detectable distance: what a PASS means ----------------------------------------------------


def _power_at(distance: float, samples: int, cells: int, trials: int, rng: np.random.Generator) -> float:
    """Rejection rate of the joint test when the laws differ by `distance` in the hardest way:
    p - q proportional to the cells' mass (uniform cells, alternating signs)."""
    signs = np.array([1.0, -1.0] * (cells // 2))
    first, second = (1 + distance * signs) / cells, (1 - distance * signs) / cells
    rejected = 0
    for _ in range(trials):
        on = Counter({(str(i),): n for i, n in enumerate(rng.multinomial(samples, first))})
        off = Counter({(str(i),): n for i, n in enumerate(rng.multinomial(samples, second))})
        rejected += joint_test([(on, off)]).p_value <= SIGNIFICANCE
    return rejected / trials


def test_the_printed_distance_is_detected_with_the_stated_power_and_half_of_it_is_not():
    samples, cells = 600, 6
    distance = detectable_tv(samples, cells - 1)
    assert 0.1 < distance < 0.2
    rng = np.random.default_rng(3)
    assert 0.72 <= _power_at(distance, samples, cells, 400, rng) <= 0.9
    assert _power_at(distance / 2, samples, cells, 400, rng) < 0.3


def test_more_samples_detect_smaller_distances_and_more_cells_need_more():
    assert detectable_tv(1200, 5) == pytest.approx(detectable_tv(300, 5) / 2)
    assert detectable_tv(300, 20) > detectable_tv(300, 5)
    assert detectable_tv(1, 5) == 1.0
