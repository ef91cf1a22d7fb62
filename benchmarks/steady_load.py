"""Closed-loop load against a running gateway: `--concurrency` clients, each sending the next chat prompt as soon as
its last answer arrived, for `--seconds`; prints output tok/s. A server that has been up a while under one load
is what the load-aware policy (specdec/load_policy.py) learns from; short interleaved runs mostly measure its
first windows.

    python benchmarks/steady_load.py [--url http://127.0.0.1:8000] [--concurrency 4] [--seconds 40] [--speculative on|off]
        [--temperature 0.8]

At a temperature above 0 each request carries its own seed (its number in the run), so a prompt asked again gets
another answer rather than one suffix decoding can replay from the last.

Alternate on and off runs against the same `specdec up`, on a quiet machine: it prints the load average.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import time
from pathlib import Path

import httpx

PROMPTS = Path(__file__).with_name("chat-prompts.jsonl")


def ask(url: str, prompt: str, max_tokens: int, speculative: bool, temperature: float, seed: int) -> int:
    body = {
        "model": "smollm2-135m-instruct",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": temperature,
        "speculative": {"enabled": speculative},
        **({"seed": seed} if temperature > 0 else {}),
    }
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    answer.raise_for_status()
    return answer.json()["usage"]["completion_tokens"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--speculative", choices=["on", "off"], default="on")
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    prompts = [json.loads(line)["prompt"] for line in PROMPTS.read_text().splitlines() if line.strip()]
    speculative = args.speculative == "on"
    started, tokens, sent = time.monotonic(), 0, 0
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        pending: set[concurrent.futures.Future] = set()
        while pending or time.monotonic() - started < args.seconds:
            while len(pending) < args.concurrency and time.monotonic() - started < args.seconds:
                pending.add(pool.submit(ask, args.url, prompts[sent % len(prompts)], args.max_tokens, speculative, args.temperature, sent))
                sent += 1
            done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
            tokens += sum(future.result() for future in done)
    seconds = time.monotonic() - started
    print(
        f"concurrency {args.concurrency}, T = {args.temperature:g}, speculation {args.speculative}: {tokens / seconds:.1f} tok/s "
        f"({sent} requests, {seconds:.0f} s, load average {os.getloadavg()[0]:.2f})"
    )


if __name__ == "__main__":
    main()
