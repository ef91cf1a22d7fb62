"""Speculation where it pays at the current load, measured rather than assumed.

Batching changes the trade: alone, a target pass costs about the same for 1 or 2 tokens, so
drafting is nearly free; with many sessions in one pass every drafted token is compute the pass
must do, and past some load plain batched decoding delivers more tokens per second. Where that
point lies depends on the models, the device and the acceptance rate, so the service measures it.

Time is cut into windows. In each window every session of the service either drafts (its K, fixed
or adaptive) or not (K = 0, plain target steps). Per load level (open sessions, in power-of-two
buckets) the policy compares the tokens per second of adjacent windows of the two modes and runs
the mode that wins (a moving average of the log ratio), trying the other every `explore_every`
windows so that a change of workload is noticed (up to 4x less often while explorations keep
confirming the choice; again after one window where an exploration found the other mode faster).
The choice never affects what is generated: any K is lossless.

NOTE: adjacent windows, not each mode's own average: speed per token moves with the workload (a
long prompt, a growing context, another request starting), by as much as drafting changes it.
Two windows side by side mostly see the same requests, so their ratio is drafting's effect.

NOTE: a mode's rate is tokens per second of its sessions' own round time, not of wall time: time
in which no speculative round ran (idle gaps, requests without speculation, prefill queues) would
otherwise count against whichever mode happened to be on.

NOTE: a service's first measured window is a cold start (first kernels, lazily built state, a
draft's weights not yet in cache) and measures nothing. A window lasts until it has `_MIN_ROUNDS`
rounds in its mode (rates are per round time, so it may span idle gaps): at low load a window that
caught the last round or two of a request is noise, not a measurement. The mode in use changes only when the other
wins by `_SWITCH_MARGIN`: single windows at low load differ by more than a draft's gain. The incumbent
at a load not yet compared is the mode other loads imply (`_implied_mode`), else none is chosen: drafting
runs whole windows at one session (unless the step costs measured at load bound its gain below 1.25x: then plain
steps are chosen at every load from the start, `set_gain_bound`) and plain steps above it, the other mode being probed
(`_incumbent`); the first choice
then waits for `_FIRST_SAMPLES` pairs of windows and goes to whichever mode measured faster. A margin in
drafting's favour there kept drafting wherever it lost by less than the margin (0.84-0.97x of plain steps
at 4 and 8 sessions on a 2-core CPU). A wrong choice is undone after the next exploration, which comes a
window after a probe found the other mode faster.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

log = logging.getLogger(__name__)

_RATE_SMOOTHING = 0.5
# An exploration that confirms the choice doubles the windows until the next, up to this many times
# `explore_every`: each exploration costs a window in the slower mode.
_MAX_EXPLORE_BACKOFF = 4
_SWITCH_MARGIN = 0.1  # log ratio (about 10%) the other mode must win by before the policy switches to it
# The gain bound measured at load (every candidate accepted, drafting wholly hidden: specdec/drafting_ceiling.py) above
# which one session drafts first. The default pair's drafting reached 0.8-0.9 of that bound on a 2-core CPU (bound
# 0.95-1.11: 0.85-0.92x of plain steps; 1.56: 1.25x), so below about 1.25 it loses.
_DRAFT_FIRST_BOUND = 1.25
_BOUND_REACHED = 0.85  # the share of that bound taken as drafting's gain where the policy starts decided on plain steps
_MIN_ROUNDS = 8  # rounds in its mode before a window closes (unless it saw no round at all)
# Pairs of adjacent windows before the first choice at a load: one pair at 8 sessions read drafting even with
# plain steps where it was 25% slower (the first windows of a burst), and that choice held for a dozen windows.
_FIRST_SAMPLES = 2


@dataclass
class _Window:
    drafting: bool
    load_bucket: int
    started: float
    min_s: float  # the least it lasts once it has rounds (a probe: 0)
    min_rounds: int = _MIN_ROUNDS  # rounds in its mode before it closes
    tokens: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})  # per mode of the rounds that ended here
    round_s: dict[bool, float] = field(default_factory=lambda: {True: 0.0, False: 0.0})
    rounds: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})

    def rate(self, drafting: bool) -> float | None:
        """Tokens per second of round time in a mode, None where too few rounds ran in it."""
        if self.rounds[drafting] < _MIN_ROUNDS or self.round_s[drafting] <= 0:
            return None
        return self.tokens[drafting] / self.round_s[drafting]

    def done(self, now: float, window_s: float) -> bool:
        elapsed = now - self.started
        if not any(self.rounds.values()):
            return elapsed >= window_s  # idle
        return elapsed >= self.min_s and self.rounds[self.drafting] >= self.min_rounds


@dataclass
class _BucketStats:
    rate: dict[bool, float] = field(default_factory=dict)  # mode (drafting?) -> tokens per second, for reports
    log_gain: float | None = None  # moving average of log(drafting rate / plain rate) over adjacent windows
    windows_since_explore: int = 0
    explore_interval: int = 0  # windows between explorations; 0: the policy's base
    best: bool | None = None  # the mode chosen last (before a choice here: the one implied by other loads, if any)
    samples: int = 0  # pairs of adjacent windows folded into log_gain
    explored: bool = False  # the window now closing ran the other mode
    last_sample: float | None = None  # the log gain of the last pair of adjacent windows, until a choice reads it


@dataclass(frozen=True)
class _Measured:
    """A closed window's rate in the mode it ran."""

    load_bucket: int
    drafting: bool
    rate: float


def _decide_plain(stats: _BucketStats, log_gain: float) -> None:
    """Plain steps at a load, as if its first comparisons had measured `log_gain`; a load compared already keeps its own."""
    if not stats.samples:
        stats.best, stats.log_gain, stats.samples = False, log_gain, _FIRST_SAMPLES


def load_bucket(load: int) -> int:
    """1, 2, 3-4, 5-8, 9-16, ...: the bucket's upper bound."""
    bucket = 1
    while bucket < load:
        bucket *= 2
    return bucket


class LoadAwareSpeculation:
    """The policy of a service: one `KindPolicy` per kind of request, greedy and sampled, at the service's load.

    NOTE: the kinds are measured apart because drafting's gain differs between them at the same load: greedy
    requests keep every candidate equal to the target's argmax (and replay earlier answers from suffix trees),
    sampled ones only those equal to the target's own draw. One choice for both, on a 2-core CPU, learned
    drafting from greedy replays at 8 sessions (+51%) and kept it for sampled requests, where it lost 29%.
    """

    KINDS: ClassVar[dict[bool, str]] = {False: "greedy", True: "sampled"}  # sampled? -> the name metrics and logs use

    def __init__(
        self, load: Callable[[], int], window_s: float = 2.0, explore_every: int = 6, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kinds = {sampled: KindPolicy(load, window_s, explore_every, clock, name) for sampled, name in self.KINDS.items()}

    def set_gain_bound(self, bound: float) -> bool:
        """The most drafting can gain at one session, from step costs measured at load (specdec/drafting_ceiling.py):
        below `_DRAFT_FIRST_BOUND` every load starts decided on plain steps, as if compared already (drafting at
        `_BOUND_REACHED` of the bound), so only the policy's explorations probe drafting. Returns whether drafting
        runs first at one session."""
        drafting = bound > _DRAFT_FIRST_BOUND
        if not drafting:
            for kind in self.kinds.values():
                kind.decide_plain(math.log(max(bound, 1e-6) * _BOUND_REACHED))
        return drafting

    def for_request(self, sampled: bool) -> KindPolicy:
        """The policy a session asks before each round and reports each round to: its kind's."""
        return self.kinds[sampled]

    def drafting(self, sampled: bool) -> bool:
        return self.kinds[sampled].drafting


class KindPolicy:
    """Drafting or plain steps for one kind of request, per load level (the module's docstring)."""

    def __init__(
        self, load: Callable[[], int], window_s: float, explore_every: int, clock: Callable[[], float], name: str = "greedy"
    ) -> None:
        self.name = name  # the kind of request, for the log
        self.load = load  # open sessions now
        self.window_s = window_s
        self.explore_every = explore_every
        self.clock = clock
        self.buckets: dict[int, _BucketStats] = {}
        self._lock = threading.Lock()
        self._window = _Window(True, load_bucket(max(1, load())), clock(), window_s)
        self._last: _Measured | None = None  # the window before, if it measured anything
        self._warm = False  # whether a window has measured something (the first one, cold, does not count)
        self._bound_log_gain: float | None = None  # set where the step costs timed at load decided plain steps

    def decide_plain(self, log_gain: float) -> None:
        """Plain steps at every load not compared yet, as if its first comparisons had measured `log_gain`.
        NOTE: a bound at one session bounds every load: drafting's gain only falls as sessions share passes
        (`_implied_mode`)."""
        with self._lock:
            self._bound_log_gain = log_gain
            for stats in self.buckets.values():
                _decide_plain(stats, log_gain)
            window = self._window
            if not any(window.rounds.values()) and self._stats_for(window.load_bucket).best is False:  # not begun yet
                window.drafting = False

    def drafting_allowed(self) -> bool:
        """Whether sessions draft this round (called by each session before each round)."""
        with self._lock:
            now = self.clock()
            # NOTE: a window measures one load level: when the load leaves its bucket (a burst ramping up or
            # draining, an idle gap, another client's requests) it ends there, so rounds run at one load
            # never count as another's (a draining c=4 burst's light rounds made drafting look 30% faster).
            load_changed = self._load_left_window()
            if load_changed or self._window.done(now, self.window_s):
                self._close_window(now, explore=not load_changed)
            return self._window.drafting

    def _load_left_window(self) -> bool:
        return load_bucket(max(1, self.load())) != self._window.load_bucket

    @property
    def drafting(self) -> bool:
        return self._window.drafting

    def record_round(self, drafting: bool, num_tokens: int, seconds: float) -> None:
        """One session's round: whether it drafted (the mode it was given), its tokens and its duration."""
        with self._lock:
            self._window.tokens[drafting] += num_tokens
            self._window.round_s[drafting] += seconds
            self._window.rounds[drafting] += 1

    def rates(self, load: int) -> dict[bool, float]:
        stats = self.buckets.get(load_bucket(load))
        return dict(stats.rate) if stats else {}

    def _close_window(self, now: float, explore: bool = True) -> None:
        window = self._window
        stats = self._stats_for(window.load_bucket)
        if not self._warm:
            self._warm = window.rate(True) is not None or window.rate(False) is not None
        else:
            self._fold_rates(window, stats)
            self._compare_with_last(window, stats)
        bucket = load_bucket(max(1, self.load()))
        self._window = self._next_window(self._stats_for(bucket), bucket, now, explore)
        log.debug(
            "load-aware policy, %s requests: %s window at load <= %d: %s tok/s; log gain %s; next: %s at load <= %d",
            self.name,
            "drafting" if window.drafting else "plain",
            window.load_bucket,
            window.rate(window.drafting),
            stats.log_gain,
            "drafting" if self._window.drafting else "plain",
            bucket,
        )

    def _next_window(self, stats: _BucketStats, bucket: int, now: float, explore: bool) -> _Window:
        drafting = self._next_mode(stats, bucket, explore)
        if drafting == self._incumbent(stats, bucket):
            return _Window(drafting, bucket, now, self.window_s)
        # NOTE: a probe of the mode the policy does not run (plain steps, until drafting has lost) lasts its
        # rounds only, one per session at most `_MIN_ROUNDS` times: at load 1 a window of `window_s` in plain
        # steps was a whole request without speculation, and one in a few requests at every exploration.
        return _Window(drafting, bucket, now, 0.0, _MIN_ROUNDS * bucket)

    @staticmethod
    def _fold_rates(window: _Window, stats: _BucketStats) -> None:
        for drafting in (True, False):  # a round that began before the switch counts for the mode it ran in
            rate = window.rate(drafting)
            if rate is not None:
                previous = stats.rate.get(drafting)
                stats.rate[drafting] = rate if previous is None else previous + _RATE_SMOOTHING * (rate - previous)

    def _compare_with_last(self, window: _Window, stats: _BucketStats) -> None:
        """Fold this window and the one before into the bucket's log gain when they ran different modes."""
        rate = window.rate(window.drafting)
        measured = _Measured(window.load_bucket, window.drafting, rate) if rate else None
        last, self._last = self._last, measured  # NOTE: a window that measured nothing (idle) breaks the pairing
        if measured is None or last is None or last.load_bucket != measured.load_bucket or last.drafting == measured.drafting:
            return
        drafting_rate, plain_rate = (measured.rate, last.rate) if measured.drafting else (last.rate, measured.rate)
        sample = math.log(drafting_rate / plain_rate)
        stats.last_sample = sample
        stats.samples += 1
        stats.log_gain = sample if stats.log_gain is None else stats.log_gain + _RATE_SMOOTHING * (sample - stats.log_gain)

    def _stats_for(self, bucket: int) -> _BucketStats:
        if bucket not in self.buckets:
            self.buckets[bucket] = _BucketStats(best=self._implied_mode(bucket))
            if self._bound_log_gain is not None:
                _decide_plain(self.buckets[bucket], self._bound_log_gain)
        return self.buckets[bucket]

    def _implied_mode(self, bucket: int) -> bool | None:
        """The mode a load not yet compared starts in. NOTE: drafting's cost grows with the load (each drafted
        token is work a batched pass must do): where it lost at a lower load it starts off, where it won at a
        higher load it starts on; either must still win by the margin to keep its place."""
        if any(stats.best is False for other, stats in self.buckets.items() if other < bucket):
            return False
        if any(stats.best is True for other, stats in self.buckets.items() if other > bucket):
            return True
        return None

    @staticmethod
    def _incumbent(stats: _BucketStats, bucket: int) -> bool:
        """The mode that runs whole windows at a load, the other one being probed: the choice made there (at one
        session possibly made at load, `set_gain_bound`), else the one other loads imply, else drafting for one
        session and plain steps for more.
        NOTE: before any comparison at a load above one, drafting is the mode probed: each drafted token is work
        a batched pass must do, and where that lost, whole drafting windows during the first comparisons cost
        short runs at 8 sessions 7-29% (speculation on against off, 8 chat prompts a run, on a 2-core CPU).
        The first choice still goes to whichever mode measured faster (`_best_mode`), with no margin."""
        if stats.best is not None:
            return stats.best
        return bucket == 1

    @staticmethod
    def _best_mode(stats: _BucketStats) -> bool:
        """Drafting or not at this load, from the bucket's log gain (set)."""
        if stats.best is None:
            return stats.log_gain >= 0  # no incumbent: whichever measured faster
        # Hysteresis: plain steps only where drafting loses by the margin, drafting again only where it wins by it.
        return stats.log_gain > _SWITCH_MARGIN if stats.best is False else stats.log_gain >= -_SWITCH_MARGIN

    def _next_mode(self, stats: _BucketStats, bucket: int, explore: bool = True) -> bool:
        """The mode of the next window at load `bucket`; `explore`: this window counts towards the next exploration
        (a window cut short by a change of load does not, or a flapping load would explore at every change)."""
        if stats.samples < _FIRST_SAMPLES:
            # No choice at this load yet: alternate, starting with the incumbent, until pairs of adjacent
            # windows have measured both modes.
            if self._last is None or self._last.load_bucket != bucket:
                return self._incumbent(stats, bucket)
            return not self._last.drafting
        best = self._best_mode(stats)
        interval = stats.explore_interval or self.explore_every
        sample, stats.last_sample = stats.last_sample, None
        if stats.best is not None and best != stats.best:
            interval = self.explore_every  # the better mode changed: look again soon
        elif stats.explored and sample is not None and (sample >= 0) != best:
            # The probe found the other mode faster (a changed workload, or a wrong choice): one window of the
            # chosen mode (which pairs with the probe: a second sample), then probe again.
            interval = self.explore_every
            stats.windows_since_explore = interval - 1 - explore
        elif stats.explored and sample is not None:
            interval = min(2 * interval, _MAX_EXPLORE_BACKOFF * self.explore_every)  # confirmed: look less often
        stats.explore_interval, stats.best, stats.explored = interval, best, False
        stats.windows_since_explore += explore
        if explore and stats.windows_since_explore >= interval:
            stats.windows_since_explore = 0
            stats.explored = True
            return not best
        return best
