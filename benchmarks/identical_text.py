"""Speculation on and off through a running gateway: is every answer the same text?

    python benchmarks/identical_text.py --url http://localhost:8000 --prompts benchmarks/chat-prompts.jsonl \
        [--temperature 0] [--seed 0] [--max-tokens 96] [--acceptance coupled]

Greedy (temperature 0), or any temperature with a seed and `--acceptance coupled`, must give the
same text with speculation on as off; this sends each prompt both ways and counts. It also reports
how many "on" requests drafted (rounds > 0) and fell back. `specdec bench` times the same prompts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx

from specdec.cli.bench import load_prompts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://localhost:8000")
    parser.add_argument("--prompts", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--acceptance", choices=["rejection", "coupled"])
    args = parser.parse_args()
    client = httpx.Client(base_url=args.url, timeout=600)
    model = client.get("/v1/models").json()["data"][0]["id"]
    identical = drafted = fallbacks = 0
    prompts = load_prompts(args.prompts, None, args.limit)
    for prompt in prompts:
        texts = {}
        for enabled in (True, False):
            speculative = {"enabled": enabled, **({"acceptance": args.acceptance} if args.acceptance else {})}
            body = {
                "model": model,
                "messages": prompt.messages,
                "max_tokens": args.max_tokens,
                "temperature": args.temperature,
                "seed": args.seed,
                "speculative": speculative,
            }
            reply = client.post("/v1/chat/completions", json=body).raise_for_status().json()
            texts[enabled] = reply["choices"][0]["message"]["content"]
            if enabled:
                drafted += reply["speculative"]["rounds"] > 0
                fallbacks += bool(reply["speculative"]["fallback"])
        identical += texts[True] == texts[False]
        if texts[True] != texts[False]:
            print(json.dumps({"prompt": prompt.messages[-1]["content"], "on": texts[True], "off": texts[False]}))
    print(f"identical: {identical}/{len(prompts)}; drafted: {drafted}/{len(prompts)}; fallbacks: {fallbacks}")


if __name__ == "__main__":
    main()
