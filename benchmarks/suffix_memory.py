"""Suffix decoding's global trees after many requests: resident memory, and what a round costs.

    python benchmarks/suffix_memory.py [--requests 10000] [--prompt-tokens 300] [--output-tokens 160] [--out FILE.json]

Each request opens a session on one scope's trees (specdec/drafters/suffix_cache.py, the settings' defaults), extends its
output one round at a time (4 tokens a round, as a verify service does) with a speculation before each round, and
closes. Tokens are drawn from a Zipf law over SmolLM2's 49,152 ids with recurring phrases, so the trees see both repeats
(what they exist for) and novel text, which grows them most: an upper bound for real traffic, which repeats more.
Memory is the process's resident set (VmRSS) before and after; the per-round cost is the wall time of one speculate
call and one extend, medians over the last 1,000 requests (the trees are fullest then).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import time
from pathlib import Path

from specdec.drafters.suffix_cache import SuffixTrees
from specdec.serving.config import SuffixSection

VOCAB = 49_152
ROUND_TOKENS = 4


def resident_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class Text:
    """Zipf-distributed token ids, with phrases of 8-32 tokens that recur across requests."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.cumulative = list(itertools.accumulate(1 / (rank + 1) ** 1.1 for rank in range(VOCAB)))
        self.phrases = [self.fresh(self.random.randint(8, 32)) for _ in range(500)]

    def fresh(self, length: int) -> list[int]:
        return self.random.choices(range(VOCAB), cum_weights=self.cumulative, k=length)

    def tokens(self, length: int) -> list[int]:
        out: list[int] = []
        while len(out) < length:
            out += self.random.choice(self.phrases) if self.random.random() < 0.3 else self.fresh(16)
        return out[:length]


def run(requests: int, prompt_tokens: int, output_tokens: int) -> dict:
    trees = SuffixTrees(SuffixSection().settings())
    text = Text(seed=0)
    settings = trees.settings
    before = resident_mib()
    speculate_us, extend_us = [], []
    started = time.perf_counter()
    for index in range(requests):
        prompt, output = text.tokens(prompt_tokens), text.tokens(output_tokens)
        handle = trees.open("", prompt)
        sequence = list(prompt)
        for start in range(0, output_tokens, ROUND_TOKENS):
            tick = time.perf_counter()
            handle.speculate(sequence, settings.draft_tokens, settings, tree=False)
            middle = time.perf_counter()
            handle.extend(output[start : start + ROUND_TOKENS])
            if index >= requests - 1000:
                speculate_us.append((middle - tick) * 1e6)
                extend_us.append((time.perf_counter() - middle) * 1e6)
            sequence += output[start : start + ROUND_TOKENS]
        handle.close()
    return {
        "requests": requests,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "cached_outputs": trees.cached_outputs(),
        "resident_mib_before": round(before, 1),
        "resident_mib_after": round(resident_mib(), 1),
        "speculate_us_median": round(statistics.median(speculate_us), 1),
        "extend_us_median": round(statistics.median(extend_us), 1),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--output-tokens", type=int, default=160)
    parser.add_argument("--out")
    args = parser.parse_args()
    result = run(args.requests, args.prompt_tokens, args.output_tokens)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
