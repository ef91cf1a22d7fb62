"""Speculation where it pays at the current load, measured rather than assumed.

Batching changes the trade: alone, a target pass costs about the same for 1 or 2 tokens, so
drafting is nearly free; with many sessions in one pass every drafted token is compute the pass
must do, and past some load plain batched decoding delivers more tokens per second. Where that
point lies depends on the models, the device and the acceptance rate, so the service measures it.

Time is cut into windows. In each window every session of the service either drafts (its K, fixed
or adaptive) or not (K = 0, plain target steps). Per load level (open sessions, in power-of-two
buckets) the policy keeps the tokens per second each mode delivered (a moving average over its
windows) and runs the better one, trying the other every `explore_every` windows so that a change
of workload is noticed. The choice never affects what is generated: any K is lossless.

NOTE: a mode's rate is tokens per second of its sessions' own round time, not of wall time: time
in which no speculative round ran (idle gaps, requests without speculation, prefill queues) would
otherwise count against whichever mode happened to be on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

_RATE_SMOOTHING = 0.5


@dataclass
class _Window:
    drafting: bool
    load_bucket: int
    started: float
    tokens: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})  # per mode of the rounds that ended here
    round_s: dict[bool, float] = field(default_factory=lambda: {True: 0.0, False: 0.0})


@dataclass
class _BucketStats:
    rate: dict[bool, float] = field(default_factory=dict)  # mode (drafting?) -> tokens per second
    windows_since_explore: int = 0


def load_bucket(load: int) -> int:
    """1, 2, 3-4, 5-8, 9-16, ...: the bucket's upper bound."""
    bucket = 1
    while bucket < load:
        bucket *= 2
    return bucket


class LoadAwareSpeculation:
    def __init__(self, load: Callable[[], int], window_s: float = 2.0, explore_every: int = 6,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.load = load  # open sessions now
        self.window_s = window_s
        self.explore_every = explore_every
        self.clock = clock
        self.buckets: dict[int, _BucketStats] = {}
        self._lock = threading.Lock()
        self._window = _Window(True, load_bucket(max(1, load())), clock())

    def drafting_allowed(self) -> bool:
        """Whether sessions draft this round (called by each session before each round)."""
        with self._lock:
            now = self.clock()
            if now - self._window.started >= self.window_s:
                self._close_window(now)
            return self._window.drafting

    @property
    def drafting(self) -> bool:
        return self._window.drafting

    def record_round(self, drafting: bool, num_tokens: int, seconds: float) -> None:
        """One session's round: whether it drafted (the mode it was given), its tokens and its duration."""
        with self._lock:
            self._window.tokens[drafting] += num_tokens
            self._window.round_s[drafting] += seconds

    def rates(self, load: int) -> dict[bool, float]:
        stats = self.buckets.get(load_bucket(load))
        return dict(stats.rate) if stats else {}

    def _close_window(self, now: float) -> None:
        window = self._window
        stats = self.buckets.setdefault(window.load_bucket, _BucketStats())
        for drafting in (True, False):  # a round that began before the switch counts for the mode it ran in
            if window.tokens[drafting] and window.round_s[drafting] > 0:
                rate = window.tokens[drafting] / window.round_s[drafting]
                previous = stats.rate.get(drafting)
                stats.rate[drafting] = rate if previous is None else previous + _RATE_SMOOTHING * (rate - previous)
        bucket = load_bucket(max(1, self.load()))
        self._window = _Window(self._next_mode(self.buckets.setdefault(bucket, _BucketStats())), bucket, now)

    def _next_mode(self, stats: _BucketStats) -> bool:
        for drafting in (True, False):  # measure both modes at this load first
            if drafting not in stats.rate:
                return drafting
        best = stats.rate[True] >= stats.rate[False]
        stats.windows_since_explore += 1
        if stats.windows_since_explore >= self.explore_every:
            stats.windows_since_explore = 0
            return not best
        return best
