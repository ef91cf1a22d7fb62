"""`specdec check-lossless`: the deployment guide's validation step 3 against a running gateway.

Fixed seeds and sampling parameters, speculation on versus off:
  greedy    the texts are identical, prompt by prompt;
  coupled   at temperature > 0 with fixed seeds, the texts are identical too;
  rejection the joint distribution of the first few generated tokens is the same, over several
            prompts (a stratified two-sample chi-square, specdec.lossless_stats).

Every "on" request asks to draft whatever the server's load-aware policy says (`"policy":
"always"`), and each check reports what its "on" arm drafted from the responses' `speculative`
statistics. A check fails when that arm did not speculate (a request that drafted nothing or fell
back, or no accepted draft token at all): equal outputs prove nothing when no draft was verified.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from dataclasses import dataclass, field

from specdec.cli.bench import Gateway
from specdec.lossless_stats import POWER, SIGNIFICANCE, Outcome, detectable_tv, joint_test

PROMPTS = [
    "Explain why the sky is blue.",
    "Write a haiku about autumn.",
    "List three uses of a paperclip.",
    "What is the capital of Japan?",
    "Describe a cat to someone who has never seen one.",
    "Give me a tip for learning to cook.",
    "Summarise the plot of a fairy tale in two sentences.",
    "Why do we need sleep?",
    "Name a famous painting and its painter.",
    "How does a bicycle stay upright?",
    "Suggest a name for a bakery.",
    "What makes a good friend?",
]
REJECTION_PROMPTS = 3  # strata of the rejection check: its samples are split over these prompts
REJECTION_TOKENS = 3  # the joint outcome: the first tokens, so accepted, recovered and bonus tokens all count
USEFUL_TV = 0.25  # a sample size that cannot detect a smaller distance even at best gets a warning
_OFF_SEEDS = 10**9  # the "off" arm's seeds start here: independent of the "on" arm's


@dataclass
class Drafting:
    """What a check's "on" arm did, from each response's `speculative` statistics."""

    requests: int = 0
    drafted: int = 0  # requests with draft tokens
    fallbacks: int = 0
    rounds: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    def add(self, stats: dict) -> None:
        self.requests += 1
        self.drafted += stats.get("draft_tokens", 0) > 0
        self.fallbacks += bool(stats.get("fallback"))
        self.rounds += stats.get("rounds", 0)
        self.draft_tokens += stats.get("draft_tokens", 0)
        self.accepted_tokens += stats.get("accepted_tokens", 0)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    def problems(self) -> list[str]:
        """Why the "on" arm did not speculate; empty when every request drafted and some draft was accepted."""
        problems = []
        if self.fallbacks:
            problems.append(
                f'{self.fallbacks}/{self.requests} "on" requests fell back to the target alone '
                "(the draft service is down, failing or too slow: see verify's log and specdec_spec_decode_fallbacks_total)"
            )
        if self.requests - self.drafted:
            problems.append(f'{self.requests - self.drafted}/{self.requests} "on" requests drafted no tokens')
        if self.requests and not self.accepted_tokens:
            problems.append("no draft token was accepted in this check")
        return problems

    def describe(self) -> str:
        return (
            f"on arm: {self.drafted}/{self.requests} requests drafted, {self.rounds} rounds, {self.draft_tokens} draft tokens, "
            f"{self.accepted_tokens} accepted (acceptance {self.acceptance_rate:.3f})"
        )


@dataclass
class CheckResult:
    name: str
    outcome: str  # what was compared and found
    drafting: Drafting
    reasons: list[str] = field(default_factory=list)  # why it failed; empty: passed

    @property
    def passed(self) -> bool:
        return not self.reasons

    @property
    def detail(self) -> str:
        why = f"; FAILED: {'; '.join(self.reasons)}" if self.reasons else ""
        return f"{self.outcome}; {self.drafting.describe()}{why}"


def _result(name: str, outcome: str, drafting: Drafting, reasons: list[str]) -> CheckResult:
    return CheckResult(name, outcome, drafting, [*reasons, *(f"the on arm did not speculate: {p}" for p in drafting.problems())])


class LosslessCheck:
    def __init__(self, base_url: str, api_key: str | None, model: str | None) -> None:
        self.gateway = Gateway(base_url, api_key, connections=1)
        self.model = model or self.gateway.first_model()

    def close(self) -> None:
        self.gateway.http.close()

    def _choice(self, prompt: str, speculative: dict, drafting: Drafting | None, **sampling) -> dict:
        """One completion's choice; an "on" request (`drafting` given) drafts every round and is counted."""
        if drafting is not None:
            speculative = {**speculative, "enabled": True, "policy": "always"}
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}], "speculative": speculative, **sampling}
        reply = self.gateway.complete(body)
        if drafting is not None:
            drafting.add(reply.get("speculative") or {})
        return reply["choices"][0]

    def _text(self, prompt: str, speculative: dict, drafting: Drafting | None, **sampling) -> str:
        return self._choice(prompt, speculative, drafting, **sampling)["message"]["content"]

    def greedy(self, prompts: list[str], max_tokens: int) -> CheckResult:
        drafting, sampling = Drafting(), {"temperature": 0, "max_tokens": max_tokens}
        differing = [p for p in prompts if self._text(p, {}, drafting, **sampling) != self._text(p, {"enabled": False}, None, **sampling)]
        return _result(
            "greedy: spec on == spec off",
            f"{len(prompts) - len(differing)}/{len(prompts)} prompts identical",
            drafting,
            [f"{len(differing)} prompts gave different texts"] if differing else [],
        )

    def coupled(self, prompts: list[str], max_tokens: int, temperature: float, seeds: int) -> CheckResult:
        cases, drafting = list(itertools.product(prompts, range(seeds))), Drafting()
        sampling = {"temperature": temperature, "max_tokens": max_tokens}
        differing = [
            (p, s)
            for p, s in cases
            if self._text(p, {"acceptance": "coupled"}, drafting, seed=s, **sampling)
            != self._text(p, {"enabled": False}, None, seed=s, **sampling)
        ]
        return _result(
            f"coupled at T={temperature}: same seed, same text",
            f"{len(cases) - len(differing)}/{len(cases)} (prompt, seed) pairs identical",
            drafting,
            [f"{len(differing)} (prompt, seed) pairs gave different texts"] if differing else [],
        )

    def _outcome(self, prompt: str, speculative: dict, drafting: Drafting | None, seed: int, temperature: float) -> Outcome:
        choice = self._choice(prompt, speculative, drafting, max_tokens=REJECTION_TOKENS, logprobs=True, seed=seed, temperature=temperature)
        return tuple(entry["token"] for entry in choice["logprobs"]["content"])

    def rejection(self, prompts: list[str], samples: int, temperature: float) -> CheckResult:
        """Joint first-token outcomes with speculation on (rejection acceptance) and off; `samples` per side, split over `prompts`."""
        drafting, strata = Drafting(), []
        for index, prompt in enumerate(prompts):
            seeds = range(samples * index // len(prompts), samples * (index + 1) // len(prompts))
            on = Counter(self._outcome(prompt, {"acceptance": "rejection"}, drafting, seed, temperature) for seed in seeds)
            off = Counter(self._outcome(prompt, {"enabled": False}, None, _OFF_SEEDS + seed, temperature) for seed in seeds)
            strata.append((on, off))
        test = joint_test(strata)
        outcome = (
            f"first {REJECTION_TOKENS} tokens jointly over {len(prompts)} prompts: chi-square p = {test.p_value:.4g} "
            f"({samples} + {samples} samples, {test.cells} cells, {test.dof} df)"
        )
        if not test.dof:
            return _result(
                f"rejection at T={temperature}: joint token distribution",
                outcome,
                drafting,
                ["every prompt's outcomes fell into one cell: nothing was compared (raise --samples)"],
            )
        outcome += (
            f"; detects a total-variation distance >= {test.detectable_tv:.3f} between the binned outcome distributions "
            f"with power {POWER} at alpha {SIGNIFICANCE}"
        )
        reasons = [f"the distributions differ (p = {test.p_value:.4g} <= alpha {SIGNIFICANCE})"] if test.p_value <= SIGNIFICANCE else []
        return _result(f"rejection at T={temperature}: joint token distribution", outcome, drafting, reasons)


def best_case_detectable_tv(samples: int) -> float:
    """The distance the rejection check could detect at best with `samples` per side (two cells per prompt)."""
    return detectable_tv(samples, REJECTION_PROMPTS)


def run(base_url: str, api_key: str | None, model: str | None, prompts: int, max_tokens: int, samples: int) -> list[CheckResult]:
    check = LosslessCheck(base_url, api_key, model)
    chosen = PROMPTS[:prompts]
    with contextlib.closing(check):
        return [
            check.greedy(chosen, max_tokens),
            check.coupled(chosen[: max(1, prompts // 2)], max_tokens, 0.8, seeds=2),
            check.rejection(PROMPTS[:REJECTION_PROMPTS], samples, 1.0),
        ]
