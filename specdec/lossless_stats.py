"""The statistics behind `specdec check-lossless`'s rejection check, testable without a server.

Each sample is the tuple of a request's first few generated tokens (its joint outcome). Per prompt,
a two-sample chi-square homogeneity test compares the outcomes with speculation on and off; the
prompts are independent strata, so their statistics and degrees of freedom add up to one test.

Rare outcomes are binned by prefix: an outcome seen too rarely to test on its own is merged into
its prefix one token shorter ("these first two tokens, then anything else"), and so on down to the
empty prefix, so the first tokens' distribution stays tested where the full tuples are too rare.

What a PASS means: a sample of n outcomes per side, over cells with `dof` degrees of freedom, gives
the chi-square statistic a noncentrality of at least 2 n d^2 when the binned distributions are a
total-variation distance d apart (Cauchy-Schwarz: sum (p_i - q_i)^2 / m_i >= (sum |p_i - q_i|)^2
for the pooled m_i, equality when the difference is spread in proportion to the cells' mass, the
hardest case). `detectable_tv` solves for the d that the test rejects with the stated power.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from scipy.optimize import brentq
from scipy.stats import chi2, chi2_contingency, ncx2

Outcome = tuple[str, ...]

SIGNIFICANCE = 0.01  # the false-alarm rate of the rejection check
POWER = 0.8  # the probability of catching a difference of the printed distance
MIN_EXPECTED = 5.0  # per side and cell: the usual condition for the chi-square approximation


@dataclass(frozen=True)
class JointTest:
    """A stratified two-sample chi-square test: one stratum per prompt."""

    p_value: float
    statistic: float
    dof: int
    cells: int
    samples: float  # per side, over all prompts (per prompt the harmonic mean of the two sides' sizes)

    @property
    def detectable_tv(self) -> float | None:
        """The smallest total-variation distance between the binned outcome distributions (each
        prompt's) that this test detects with probability POWER at SIGNIFICANCE; None without a test."""
        return detectable_tv(self.samples, self.dof) if self.dof else None


def bin_outcomes(first: Counter[Outcome], second: Counter[Outcome], min_pooled: float = 2 * MIN_EXPECTED) -> list[tuple[int, int]]:
    """(count in first, count in second) per cell, every cell holding at least `min_pooled` samples
    of both together where possible: rare outcomes merge into their one-token-shorter prefix until
    they are common enough; a residue too small for a cell of its own joins the smallest cell."""
    cells: dict[Outcome, list[int]] = {}
    for side, counts in enumerate((first, second)):
        for outcome, count in counts.items():
            cells.setdefault(tuple(outcome), [0, 0])[side] += count
    for length in range(max(map(len, cells), default=0), 0, -1):
        for outcome in [o for o in cells if len(o) == length and sum(cells[o]) < min_pooled]:
            pair = cells.pop(outcome)
            prefix = cells.setdefault(outcome[:-1], [0, 0])
            prefix[0] += pair[0]
            prefix[1] += pair[1]
    residue = cells.pop((), None)
    if residue is not None and (sum(residue) >= min_pooled or not cells):
        cells[()] = residue
    elif residue is not None:
        smallest = min(cells, key=lambda outcome: sum(cells[outcome]))
        cells[smallest] = [cells[smallest][0] + residue[0], cells[smallest][1] + residue[1]]
    return [(on, off) for on, off in cells.values()]


def joint_test(strata: list[tuple[Counter[Outcome], Counter[Outcome]]]) -> JointTest:
    """Chi-square over each stratum's binned outcomes, statistics and degrees of freedom summed."""
    statistic, dof, cells, samples = 0.0, 0, 0, 0.0
    for first, second in strata:
        table = bin_outcomes(first, second)
        cells += len(table)
        sizes = sum(first.values()), sum(second.values())
        samples += 2 * sizes[0] * sizes[1] / sum(sizes) if all(sizes) else 0.0
        if len(table) < 2:
            continue  # one cell: nothing to compare in this stratum
        result = chi2_contingency([[on for on, _ in table], [off for _, off in table]], correction=False)
        statistic += float(result.statistic)
        dof += int(result.dof)
    p_value = float(chi2.sf(statistic, dof)) if dof else 1.0
    return JointTest(p_value, statistic, dof, cells, samples)


def detectable_tv(samples_per_side: float, dof: int, alpha: float = SIGNIFICANCE, power: float = POWER) -> float:
    """The smallest total-variation distance a chi-square test with `dof` degrees of freedom over
    `samples_per_side` outcomes per side detects with probability `power` at level `alpha`, for
    any way the difference is spread over the cells (see the module docstring)."""
    if samples_per_side <= 0 or dof < 1:
        raise ValueError("needs at least one sample per side and one degree of freedom")
    critical = chi2.isf(alpha, dof)
    noncentrality = brentq(lambda lam: ncx2.sf(critical, dof, lam) - power, 1e-9, 1e6)
    return min(1.0, (noncentrality / (2 * samples_per_side)) ** 0.5)
