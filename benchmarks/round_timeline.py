"""Where a round's time goes on a running stack: each round's wall time as a client of verify sees it, against
the phases verify reports for it (the wait for the draft's block, transport, the target's pass).

    specdec up &
    python benchmarks/round_timeline.py [--verify 127.0.0.1:50052] [--prompts 8] [--max-tokens 96] [--temperature 0]

Chat prompts (benchmarks/chat-prompts.jsonl), one at a time, straight to verify's Generate (no gateway). Rounds
are grouped by what happened: every candidate accepted, one rejected, or no candidates (plain steps: the
load-aware policy's, or a draft catching up). Run on a quiet machine: it prints the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from specdec.cli.client import VerifyClient

PROMPTS = Path(__file__).with_name("chat-prompts.jsonl")
PHASES = ("wall_ms", "draft_ms", "transport_ms", "target_ms")


def timed_rounds(client: VerifyClient, prompt: str, max_tokens: int, temperature: float) -> list[dict]:
    rounds, last = [], time.perf_counter()
    messages = [{"role": "user", "content": prompt}]
    for index, response in enumerate(client.generate_stream(messages, max_tokens=max_tokens, temperature=temperature, seed=1)):
        now = time.perf_counter()
        if response.HasField("round") and index:  # the first message carries the prefill, not a round
            info = response.round
            rounds.append(
                {
                    "wall_ms": (now - last) * 1000,
                    "draft_ms": info.draft_ms,
                    "transport_ms": info.transport_ms,
                    "target_ms": info.target_ms,
                    "candidates": info.num_candidates,
                    "accepted": info.num_accepted,
                    "tokens": len(response.token_ids),
                }
            )
        last = now
    return rounds


def summary(rounds: list[dict]) -> dict:
    groups = {
        "all accepted": [r for r in rounds if r["candidates"] and r["accepted"] == r["candidates"]],
        "one rejected": [r for r in rounds if r["candidates"] and r["accepted"] < r["candidates"]],
        "no candidates": [r for r in rounds if not r["candidates"]],
    }
    return {
        name: {"rounds": len(group), **{phase: round(statistics.fmean(r[phase] for r in group), 1) for phase in PHASES}}
        for name, group in groups.items()
        if group
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verify", default="127.0.0.1:50052")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    prompts = [json.loads(line)["prompt"] for line in PROMPTS.read_text().splitlines() if line.strip()][: args.prompts]
    print(f"load average at start: {os.getloadavg()}")
    rounds, tokens, elapsed = [], 0, 0.0
    with VerifyClient(args.verify) as client:
        client.generate([{"role": "user", "content": "warm up"}], max_tokens=8)
        for prompt in prompts:
            started = time.perf_counter()
            request_rounds = timed_rounds(client, prompt, args.max_tokens, args.temperature)
            elapsed += time.perf_counter() - started
            rounds += request_rounds
            tokens += sum(r["tokens"] for r in request_rounds)
    print(f"{tokens / elapsed:.1f} tok/s, {len(rounds)} rounds, {tokens / len(rounds):.2f} tokens a round")
    print("| rounds | count | wall ms | draft wait ms | transport ms | target ms |\n|---|---|---|---|---|---|")
    for name, group in summary(rounds).items():
        print(f"| {name} | {group['rounds']} | " + " | ".join(str(group[phase]) for phase in PHASES) + " |")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
