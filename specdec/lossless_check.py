"""`specdec check-lossless`: the deployment guide's validation step 3 against a running gateway.

Fixed seeds and sampling parameters, speculation on versus off:
  greedy    the texts are identical, prompt by prompt;
  coupled   at temperature > 0 with fixed seeds, the texts are identical too;
  rejection the first generated token's distribution is the same (two-sample chi-square).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import httpx
from scipy.stats import chi2_contingency

PROMPTS = [
    "Explain why the sky is blue.", "Write a haiku about autumn.", "List three uses of a paperclip.",
    "What is the capital of Japan?", "Describe a cat to someone who has never seen one.", "Give me a tip for learning to cook.",
    "Summarise the plot of a fairy tale in two sentences.", "Why do we need sleep?", "Name a famous painting and its painter.",
    "How does a bicycle stay upright?", "Suggest a name for a bakery.", "What makes a good friend?",
]
SIGNIFICANCE = 1e-3


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str


class LosslessCheck:
    def __init__(self, base_url: str, api_key: str | None, model: str | None, timeout: float = 120.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)
        self.model = model or self.http.get("/v1/models").raise_for_status().json()["data"][0]["id"]

    def _choice(self, prompt: str, speculative: dict, **sampling) -> dict:
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}], "speculative": speculative, **sampling}
        reply = self.http.post("/v1/chat/completions", json=body)
        if reply.status_code != 200:
            raise RuntimeError(f"HTTP {reply.status_code}: {reply.text[:200]}")
        return reply.json()["choices"][0]

    def _text(self, prompt: str, speculative: dict, **sampling) -> str:
        return self._choice(prompt, speculative, **sampling)["message"]["content"]

    def _first_token(self, prompt: str, speculative: dict, **sampling) -> str:
        # Two tokens, so the first one goes through a round with a draft candidate.
        choice = self._choice(prompt, speculative, max_tokens=2, logprobs=True, **sampling)
        return choice["logprobs"]["content"][0]["token"]

    def greedy(self, prompts: list[str], max_tokens: int) -> CheckResult:
        differing = [p for p in prompts if self._text(p, {"enabled": True}, temperature=0, max_tokens=max_tokens)
                     != self._text(p, {"enabled": False}, temperature=0, max_tokens=max_tokens)]
        return CheckResult("greedy: spec on == spec off", not differing, f"{len(prompts) - len(differing)}/{len(prompts)} prompts identical")

    def coupled(self, prompts: list[str], max_tokens: int, temperature: float, seeds: int) -> CheckResult:
        cases = list(itertools.product(prompts, range(seeds)))
        sampling = {"temperature": temperature, "max_tokens": max_tokens}
        differing = [(p, s) for p, s in cases if self._text(p, {"enabled": True, "acceptance": "coupled"}, seed=s, **sampling)
                     != self._text(p, {"enabled": False}, seed=s, **sampling)]
        return CheckResult(f"coupled at T={temperature}: same seed, same text", not differing,
                           f"{len(cases) - len(differing)}/{len(cases)} (prompt, seed) pairs identical")

    def rejection(self, prompt: str, samples: int, temperature: float) -> CheckResult:
        """First-token distributions with speculation on (rejection) and off: a two-sample chi-square."""
        on, off = Counter(), Counter()
        for seed in range(samples):
            on[self._first_token(prompt, {"enabled": True, "acceptance": "rejection"}, seed=seed, temperature=temperature)] += 1
            off[self._first_token(prompt, {"enabled": False}, seed=10**6 + seed, temperature=temperature)] += 1
        p_value = two_sample_p_value(on, off)
        return CheckResult(f"rejection at T={temperature}: first-token distribution", p_value > SIGNIFICANCE,
                           f"chi-square p = {p_value:.4g} over {samples} + {samples} samples, {len(on | off)} distinct tokens")


def two_sample_p_value(first: Counter, second: Counter, min_expected: float = 5.0) -> float:
    """Chi-square homogeneity test; rare categories are pooled so each expected count is >= 5."""
    total = first + second
    common = [key for key, count in total.items() if count >= 2 * min_expected]
    rare = [key for key in total if key not in common]
    table = [[first[key] for key in common], [second[key] for key in common]]
    if rare:
        table[0].append(sum(first[key] for key in rare))
        table[1].append(sum(second[key] for key in rare))
    if len(table[0]) < 2:
        return 1.0  # one category: both samples agree completely
    return float(chi2_contingency(table).pvalue)


def run(base_url: str, api_key: str | None, model: str | None, prompts: int, max_tokens: int, samples: int) -> list[CheckResult]:
    check = LosslessCheck(base_url, api_key, model)
    chosen = PROMPTS[:prompts]
    return [check.greedy(chosen, max_tokens), check.coupled(chosen[: max(1, prompts // 2)], max_tokens, 0.8, seeds=2),
            check.rejection(chosen[0], samples, 1.0)]
