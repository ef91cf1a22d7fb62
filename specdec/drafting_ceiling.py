"""The most drafting can gain at one session, from step costs measured at load: where the load-aware policy starts.

With draft and target on devices (or cores) of their own and each next block drafted while this one is verified
(drafters/overlap.py), a round at one session lasts at least the longer of the target's pass over K + 1 tokens and
the draft's K + 1 steps (its guess of the bonus token, then the block), and it yields at most K + 1 tokens. Plain
decoding yields one token per one-token pass. So drafting gains at most

    min(target_ms / draft_ms, (K + 1) * target_ms / verify_ms)

over plain steps, with every candidate accepted and drafting wholly hidden. Real rounds reach 0.8-0.9 of it (the
default pair, acceptance 0.97), so where the bound is below 1.25x (a draft token that costs about what a target token
does: the default pair on some 2-core CPUs), drafting cannot pay, and the policy starts at one session decided on
plain steps. Model-free candidates (prompt lookup, suffix trees) need no draft step, so the bound only picks the
start: the policy's explorations still measure drafting and switch to it where it wins (specdec/load_policy.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from specdec.drafters.base import Drafter, DraftRequest
from specdec.engines.gguf_pass_floor import probe_ids
from specdec.enums import AcceptanceMode, TokenSource
from specdec.kv_cache import PrefixCache
from specdec.sampling import SamplingParams

CONTEXT_TOKENS = 32  # before the timed steps: a short chat prompt's worth
TIMED_STEPS = 8  # per shape, after one untimed (first kernels, lazily built state)
TIME_BUDGET_S = 3.0  # a large model on a slow device stops early, with fewer samples


@dataclass(frozen=True)
class StepCosts:
    """Measured at load, ms: the target's one-token pass and its pass over K + 1 tokens, and one draft-model token
    (0: not measured, or a model-free drafter)."""

    target_ms: float
    verify_ms: float
    num_draft_tokens: int
    draft_ms: float = 0.0

    def gain_bound(self) -> float:
        """Drafting's tokens per second over plain steps' at one session, at most (the module's docstring)."""
        bound = (self.num_draft_tokens + 1) * self.target_ms / self.verify_ms
        if self.draft_ms > 0:
            bound = min(bound, self.target_ms / self.draft_ms)
        return bound

    def describe(self) -> str:
        draft = f"a draft token {self.draft_ms:.1f} ms, " if self.draft_ms > 0 else ""
        return (
            f"{draft}a target token {self.target_ms:.1f} ms, a {self.num_draft_tokens + 1}-token pass {self.verify_ms:.1f} ms: "
            f"drafting gains at most {self.gain_bound():.2f}x at one session"
        )


def _least_ms(step: Callable[[int], tuple[float | None, ...]], budget_s: float = TIME_BUDGET_S) -> tuple[float | None, ...]:
    """The least of each of `step(i)`'s timings (ms; None: a step that does not count) over TIMED_STEPS calls after an
    untimed first. NOTE: the least, not the median: interference (another process, a cold cache) only slows a step,
    and one slow sample of the target's step would raise the bound: five fresh stacks logged 11.8-19.2 ms for it."""
    deadline = time.monotonic() + budget_s
    samples: list[list[float]] = []
    for index in range(TIMED_STEPS + 1):
        measured = step(index)
        samples = samples or [[] for _ in measured]
        for kept, value in zip(samples, measured, strict=True):
            if index and value is not None:
                kept.append(value)
        if time.monotonic() > deadline:
            break
    return tuple(min(kept) if kept else None for kept in samples)


def time_target_passes(open_sequence: Callable[[int], PrefixCache], vocab_size: int, num_draft_tokens: int) -> tuple[float, float] | None:
    """(one-token pass, K + 1-token pass) in ms, on a sequence of the serving runner (`open_sequence(reserve)`),
    released after; the two shapes taken in turns, so both see the same conditions. None where the budget ran out
    before a sample of each."""
    context = probe_ids(CONTEXT_TOKENS, 0, vocab_size)
    lm = open_sequence(CONTEXT_TOKENS + num_draft_tokens + 1)
    try:
        lm.advance(context)

        def timed(new_ids: list[int]) -> float:
            started = time.perf_counter()
            lm.advance(context + new_ids, len(new_ids))  # rolls back the last probe's tokens first
            return (time.perf_counter() - started) * 1000

        one, block = _least_ms(
            lambda index: (timed(probe_ids(1, 11 + index, vocab_size)), timed(probe_ids(num_draft_tokens + 1, 11 + index, vocab_size)))
        )
    finally:
        lm.release()
    return None if one is None or block is None else (one, block)


def time_draft_token(drafter: Drafter, vocab_size: int) -> float | None:
    """The least ms of one draft-model token through a session of `drafter` (its batching, sampling and prompt lookup
    as served); steps that another source proposed (a lookup) do not count. None where none was the model's."""
    request = DraftRequest(
        prompt_ids=probe_ids(CONTEXT_TOKENS, 0, vocab_size),
        sampling=SamplingParams(temperature=0.0),
        acceptance=AcceptanceMode.REJECTION,
        seed=0,
        vocab_size=vocab_size,
    )
    session = drafter.open(request)
    try:
        session.propose(1)  # the prompt's prefill and a first token: not a draft step

        def step(_: int) -> tuple[float | None]:
            session.feedback(1, [])
            block = session.propose(1)
            return (block.compute_ms if block.candidate_sources() == [TokenSource.DRAFT] else None,)

        return _least_ms(step)[0]
    finally:
        session.close()
