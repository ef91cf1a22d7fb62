"""Is a seeded answer the same text alone and under load? Each request alone, then all at once, through a gateway.

    python benchmarks/load_invariance.py --url http://localhost:8000 [--prompts 12] [--max-tokens 128] \
        [--temperature 1.0] [--rounds 2]

Half the prompts are chat prompts (benchmarks/chat-prompts.jsonl), half long ones (a chat prompt after a few hundred
words of this repository's README), so that sessions start, prefill, draft and end at different times. Every
request carries its own seed; a seeded request's text is a function of its seed (coupled acceptance, the default
for a seeded request), so each must come back the same in every round. Prints how many did, and where the first
that did not diverged.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def _prompts(count: int) -> list[str]:
    chat = [json.loads(line)["prompt"] for line in (ROOT / "benchmarks" / "chat-prompts.jsonl").read_text().splitlines()]
    words = (ROOT / "README.md").read_text().split()
    long = [f"{' '.join(words[i * 97 : i * 97 + 250 + 60 * i])}\n\n{chat[i]}" for i in range(count - count // 2)]
    return [prompt for pair in zip(chat[: count // 2], long, strict=False) for prompt in pair]


def _ask(client: httpx.Client, model: str, prompt: str, seed: int, args: argparse.Namespace) -> str:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "seed": seed,
    }
    response = client.post(f"{args.url}/v1/chat/completions", json=body, timeout=600)
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://localhost:8000")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all requests at once")
    args = parser.parse_args()
    prompts = _prompts(args.prompts)
    with httpx.Client() as client:
        model = client.get(f"{args.url}/v1/models", timeout=10).json()["data"][0]["id"]
        alone = [_ask(client, model, prompt, 1000 + index, args) for index, prompt in enumerate(prompts)]
        same, first_divergence = 0, None
        for round_index in range(args.rounds):
            order = list(range(len(prompts)))
            random.Random(round_index).shuffle(order)
            with ThreadPoolExecutor(len(prompts)) as pool:
                texts = dict(zip(order, pool.map(lambda i: _ask(client, model, prompts[i], 1000 + i, args), order), strict=True))
            for index, text in texts.items():
                if text == alone[index]:
                    same += 1
                elif first_divergence is None:
                    first_divergence = (index, next((k for k, (a, b) in enumerate(zip(text, alone[index])) if a != b), len(text)))
    total = args.rounds * len(prompts)
    print(f"load average {os.getloadavg()[0]:.2f}; {same} of {total} answers under load equal to the same request alone")
    if first_divergence is not None:
        print(f"first that differed: prompt {first_divergence[0]}, from character {first_divergence[1]}")


if __name__ == "__main__":
    main()
