"""Adaptive draft length: each round, the K that maximises expected tokens per second.

With a per-candidate acceptance probability a (each candidate is kept with probability a once
all before it were), a round that drafts K candidates emits, counting the target's own token,

    E[tokens](K) = (1 - a^(K+1)) / (1 - a)            (K + 1 when a = 1)

and takes

    time(K) = K * d + T(K + 1) + [K > 0] * o

where d is the draft's cost per candidate, T(n) the target's round time when it scores n tokens,
and o the per-round overhead of asking the drafter (transport, queues). K = 0 is a plain target
step: 1 token in T(1), so speculation turns itself off where it loses. The controller picks the K
in [min_k, max_k] with the largest E[tokens](K) / time(K). Its first rounds draft max_k, then
min_k, so both ends of the target's cost curve are measured before it chooses; after that, every
`probe_every` rounds it tries a neighbour of its choice instead, to keep measuring what it would
need to change its mind (from K = 0 the neighbour is K = 1: speculation can come back).

Everything here is arithmetic over floats: no model, no clock.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


def expected_tokens(acceptance: float, num_draft_tokens: int) -> float:
    """Tokens one round emits on average: accepted candidates plus the target's own token."""
    if acceptance >= 1.0:
        return float(num_draft_tokens + 1)
    return (1.0 - acceptance ** (num_draft_tokens + 1)) / (1.0 - acceptance)


def round_ms(num_draft_tokens: int, draft_ms_per_token: float, target_ms: Callable[[int], float], overhead_ms: float) -> float:
    """Expected wall time of one round drafting `num_draft_tokens` candidates."""
    if num_draft_tokens == 0:
        return target_ms(1)  # no drafter call at all
    return num_draft_tokens * draft_ms_per_token + target_ms(num_draft_tokens + 1) + overhead_ms


def best_draft_length(
    acceptance: float, draft_ms_per_token: float, target_ms: Callable[[int], float], overhead_ms: float, min_k: int, max_k: int
) -> int:
    """The K in [min_k, max_k] with the most expected tokens per millisecond (the smaller K on a tie)."""
    best_k, best_rate = min_k, -1.0
    for k in range(min_k, max_k + 1):
        rate = expected_tokens(acceptance, k) / max(round_ms(k, draft_ms_per_token, target_ms, overhead_ms), 1e-9)
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k


class RecentMedian:
    """The low median of the last `window` samples: the typical cost of a step.

    Not the mean: a rare spike (another process took the core) would weigh on it for many rounds.
    Not the minimum: where a step is slow most of the time (a pass that threads badly), the
    typical time is what throughput pays. Of two samples the low median keeps the smaller, so
    a spike in the warm-up does not decide. Only recent samples count, so a lasting change (a
    longer context, a busier device) shows within `window` rounds.
    """

    def __init__(self, window: int) -> None:
        self.samples: deque[float] = deque(maxlen=window)

    def observe(self, sample: float) -> None:
        self.samples.append(sample)

    @property
    def value(self) -> float | None:
        return statistics.median_low(self.samples) if self.samples else None


class TargetCostTable:
    """The target's round time per number of scored tokens n: a recent median per measured n.

    Between measured n, linear interpolation. Beyond the largest, the slope of the last two
    measured points (never negative: scoring more tokens is not cheaper), flat with only one.
    Below the smallest, flat: a slope from two nearby noisy points can make a short pass look
    nearly free. (The controller measures both ends of its range first, so this is rarely used.)
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self.samples_by_n: dict[int, RecentMedian] = {}

    def observe(self, num_scored: int, milliseconds: float) -> None:
        self.samples_by_n.setdefault(num_scored, RecentMedian(self.window)).observe(milliseconds)

    def __bool__(self) -> bool:
        return bool(self.samples_by_n)

    @property
    def ms_by_n(self) -> dict[int, float]:
        return {n: samples.value for n, samples in self.samples_by_n.items()}

    def estimate(self, num_scored: int) -> float:
        table = self.ms_by_n
        if num_scored in table:
            return table[num_scored]
        known = sorted(table)
        below = [n for n in known if n < num_scored]
        above = [n for n in known if n > num_scored]
        if below and above:
            low, high = below[-1], above[0]
            return table[low] + (table[high] - table[low]) * (num_scored - low) / (high - low)
        if below:
            last = below[-1]
            return table[last] + _slope(table, below[-2:]) * (num_scored - last)
        return table[above[0]]


def _slope(ms_by_n: dict[int, float], points: list[int]) -> float:
    """Cost per extra scored token between two measured n; 0 with fewer points, never negative."""
    if len(points) < 2:
        return 0.0
    low, high = points
    return max(0.0, (ms_by_n[high] - ms_by_n[low]) / (high - low))


class AcceptanceEstimate:
    """Per-candidate acceptance as a Beta posterior whose evidence decays by `decay` each round.

    A round that kept n of K candidates observed n acceptances and, when n < K, one rejection
    (the positions after it were never tested); that is the geometric model E[tokens] assumes.
    """

    def __init__(self, prior_mean: float, prior_weight: float, decay: float) -> None:
        self.prior_accepted = prior_mean * prior_weight
        self.prior_rejected = (1.0 - prior_mean) * prior_weight
        self.decay = decay
        self.accepted = 0.0
        self.rejected = 0.0

    def observe(self, num_candidates: int, num_accepted: int) -> None:
        self.accepted = self.decay * self.accepted + num_accepted
        self.rejected = self.decay * self.rejected + (1.0 if num_accepted < num_candidates else 0.0)

    @property
    def mean(self) -> float:
        accepted = self.accepted + self.prior_accepted
        return accepted / (accepted + self.rejected + self.prior_rejected)


@dataclass(frozen=True)
class AdaptiveKSettings:
    min_k: int = 0
    max_k: int = 5
    probe_every: int = 16  # every this many rounds, try a neighbour of the best K
    acceptance_decay: float = 0.95  # evidence of a round 20 rounds ago weighs about a third
    prior_acceptance: float = 0.5
    prior_weight: float = 2.0  # in candidates: the first few rounds outweigh it
    cost_window: int = 16  # costs are the low median of this many recent samples (per n for the target)
    warmup_rounds: int = 2  # rounds at each end of the range before the first choice


class DraftLengthController:
    """One session's K: `next_k()` reads the estimates, `observe(...)` updates them after a round."""

    def __init__(self, settings: AdaptiveKSettings) -> None:
        if not 0 <= settings.min_k <= settings.max_k:
            raise ValueError(f"need 0 <= min_k <= max_k, got {settings.min_k} and {settings.max_k}")
        self.settings = settings
        self.acceptance = AcceptanceEstimate(settings.prior_acceptance, settings.prior_weight, settings.acceptance_decay)
        self.target_ms = TargetCostTable(settings.cost_window)
        self.draft_ms_per_token = RecentMedian(settings.cost_window)
        self.overhead_ms = RecentMedian(settings.cost_window)
        self.rounds = 0

    def best_k(self) -> int:
        """The K the estimates favour; the configured maximum until costs have been measured."""
        settings = self.settings
        if not self.target_ms:
            return settings.max_k
        # Unmeasured draft costs count as free, so a drafter that has not drafted yet gets tried.
        return best_draft_length(
            self.acceptance.mean,
            self.draft_ms_per_token.value or 0.0,
            self.target_ms.estimate,
            self.overhead_ms.value or 0.0,
            settings.min_k,
            settings.max_k,
        )

    def next_k(self) -> int:
        """This round's K: the best one, or on probe rounds another. Changes no state."""
        settings = self.settings
        # Round 0's costs include the prefill; then `warmup_rounds` measure each end of the range.
        if self.rounds <= settings.warmup_rounds:
            return settings.max_k
        if self.rounds <= 2 * settings.warmup_rounds:
            return settings.min_k
        best = self.best_k()
        if self.rounds % settings.probe_every:
            return best
        # Cycle through both neighbours and the bottom of the range (the K = 0 baseline: the cost
        # that decides whether speculating pays at all must not stay a stale sample).
        probes = [k for k in dict.fromkeys((best - 1, best + 1, settings.min_k)) if settings.min_k <= k <= settings.max_k and k != best]
        return probes[(self.rounds // settings.probe_every) % len(probes)] if probes else best

    def observe(self, num_candidates: int, num_accepted: int, draft_ms: float, target_ms: float, transport_ms: float) -> None:
        """Learn from one finished round (the numbers a round's RoundInfo carries)."""
        if num_candidates:
            self.acceptance.observe(num_candidates, num_accepted)
        # The first round's passes include the prompt's prefill: not a per-round cost. (A draft
        # that sat out rounds also catches up on the tokens it missed; that is counted, as it is
        # the real price of resuming.)
        if self.rounds > 0:
            self.target_ms.observe(num_candidates + 1, target_ms)
            if num_candidates:
                self.overhead_ms.observe(transport_ms)
                self.draft_ms_per_token.observe(draft_ms / num_candidates)
        self.rounds += 1
