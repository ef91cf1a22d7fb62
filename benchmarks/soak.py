"""Load and soak on loopback: N concurrent streaming clients with mixed lengths for a fixed time.

    python benchmarks/soak.py                                  # short: 6 clients, 20 s, tiny pair
    python benchmarks/soak.py --clients 16 --duration 1800     # long: 30 minutes
    python benchmarks/soak.py --target T --draft D --json soak.json
    python benchmarks/soak.py --hostile                        # with hostile clients mixed in (hostile_clients.py)

Starts draft, verify and gateway as `specdec up` does (same launcher, all bound to 127.0.0.1),
warms up, records each service's RSS and live-session gauge, runs the clients, waits for the
services to go idle and records them again. Reports completed / failed / 429, TTFT and ITL
percentiles, and RSS before / peak / after per service. Exit status 1 when a request failed
(anything but a 429), a stream ended without [DONE], a session is still held afterwards, or a
service's RSS did not come back to within --rss-slack-mib of its baseline. With --hostile, two
clients loop maximum-size prompts, one is a slow reader and twelve Verify streams sit idle
(verify's stream_idle_timeout_s is 3 s): every answer they get must be explicit, and the ordinary
clients must still lose nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import sys
import time

import httpx
from hostile_clients import hostile_failures, idle_verify_streams, oversized_body, oversized_prompts, slow_readers
from loopback import Services, loopback_stack, percentiles, report  # the very start sequence of `specdec up`

LENGTHS = (8, 32, 128)  # max_tokens mix: short chat turns to longer answers
PROMPTS = ("Hi!", "Tell me a long story about a lighthouse keeper.", "List three uses of copper and explain each one briefly.")
IDLE_TIMEOUT_S = 3.0  # verify's stream_idle_timeout_s under --hostile: idle streams are cycled within a short run


async def _one_stream(client: httpx.AsyncClient, body: dict, tally: dict) -> None:
    started, last, gaps, first = time.perf_counter(), None, [], None
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code == 429:
                tally["rejected_429"] += 1
                await asyncio.sleep(0.25)  # a polite client backs off before retrying
                return
            if response.status_code != 200:
                tally["failed"] += 1
                tally["errors"].append(f"HTTP {response.status_code}")
                return
            done = finished = False
            async for line in response.aiter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    payload = json.loads(line[6:])
                    if "error" in payload:
                        tally["errors"].append(payload["error"]["message"][:200])
                    for choice in payload.get("choices", []):
                        finished |= bool(choice.get("finish_reason"))
                        if choice.get("delta", {}).get("content"):
                            now = time.perf_counter()
                            first = first if first is not None else now - started
                            if last is not None:
                                gaps.append(now - last)
                            last = now
            ok = done and finished
            tally["completed" if ok else "failed"] += 1
            if not ok:
                tally["errors"].append("stream ended without [DONE] and a finish_reason")
    except httpx.HTTPError as error:
        tally["failed"] += 1
        tally["errors"].append(f"{type(error).__name__}: {error}")
        return
    if first is not None:
        tally["ttft"].append(first)
    tally["itl"].extend(gaps)


async def _client(url: str, deadline: float, rng: random.Random, tally: dict) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        while time.monotonic() < deadline:
            body = {
                "model": "target",
                "messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
                "stream": True,
                "max_tokens": rng.choice(LENGTHS),
                "temperature": rng.choice([0, 0.8]),
                "seed": rng.randrange(2**31),
            }
            await _one_stream(client, body, tally)


async def _load(services: Services, args: argparse.Namespace) -> tuple[dict, dict[str, float]]:
    tally = {"completed": 0, "failed": 0, "rejected_429": 0, "ttft": [], "itl": [], "errors": [], "hostile": collections.Counter()}
    peak = services.rss()
    deadline = time.monotonic() + args.duration
    clients = [asyncio.create_task(_client(services.url, deadline, random.Random(args.seed + i), tally)) for i in range(args.clients)]
    if args.hostile:
        clients += _hostile_clients(services, deadline, tally["hostile"])
    while not all(task.done() for task in clients):
        await asyncio.sleep(1.0)
        peak = {name: max(value, peak[name]) for name, value in services.rss().items()}
    await asyncio.gather(*clients)
    return tally, peak


def _hostile_clients(services: Services, deadline: float, tally: collections.Counter) -> list[asyncio.Task]:
    """Two clients looping maximum-size prompts, a slow reader, and idle Verify streams (hostile_clients.py)."""
    body = oversized_body()
    port = int(services.url.rsplit(":", 1)[1])
    return [asyncio.create_task(oversized_prompts(services.url, deadline, tally, body)) for _ in range(2)] + [
        asyncio.create_task(slow_readers(port, deadline, tally, choices=2)),
        asyncio.create_task(idle_verify_streams(services.verify_address, deadline, tally)),
    ]


def _warm_up(url: str) -> None:
    for max_tokens in LENGTHS:
        body = {"model": "target", "messages": [{"role": "user", "content": PROMPTS[1]}], "max_tokens": max_tokens}
        httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).raise_for_status()


def run(args: argparse.Namespace) -> dict:
    serving = {"max_concurrent_requests": args.max_running, "max_queue": args.max_queue, "queue_timeout_s": 5}
    verify = {"stream_idle_timeout_s": IDLE_TIMEOUT_S} if args.hostile else {}
    with loopback_stack(args.target, args.draft, serving=serving, verify_service=verify) as services:
        _warm_up(services.url)
        before = services.rss()
        tally, peak = asyncio.run(_load(services, args))
        sessions_after = services.wait_idle()
        time.sleep(1.0)  # let freed caches settle before the last reading
        after = services.rss()
    return _report(args, tally, before, peak, after, sessions_after)


def _report(args, tally: dict, before: dict, peak: dict, after: dict, sessions_after: dict) -> dict:
    growth = {name: round(after[name] - before[name], 1) for name in before}
    problems = [f"{tally['failed']} requests failed"] if tally["failed"] else []
    problems += [f"{name} still holds {count:g} sessions" for name, count in sessions_after.items() if count]
    problems += [f"{name} RSS grew {mib} MiB" for name, mib in growth.items() if mib > args.rss_slack_mib]
    problems += [f"hostile client got {failure}" for failure in hostile_failures(tally["hostile"])]
    return {
        "clients": args.clients,
        "duration_s": args.duration,
        "completed": tally["completed"],
        "failed": tally["failed"],
        "rejected_429": tally["rejected_429"],
        "errors": sorted(set(tally["errors"]))[:20],
        "ttft": percentiles(tally["ttft"]),
        "itl": percentiles(tally["itl"]),
        "rss_mib": {"before": before, "peak": peak, "after": after, "growth": growth},
        "hostile": {outcome: round(count, 2) for outcome, count in sorted(tally["hostile"].items())},
        "sessions_after": sessions_after,
        "problems": problems,
        "ok": not problems and tally["completed"] > 0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    parser.add_argument("--target", help="target model (default: a tiny random pair, built for the run)")
    parser.add_argument("--draft", help="draft model (default: the tiny pair's)")
    parser.add_argument("--max-running", type=int, default=4, help="the gateway's max_concurrent_requests")
    parser.add_argument("--max-queue", type=int, default=2, help="the gateway's max_queue (beyond it: 429)")
    parser.add_argument("--rss-slack-mib", type=float, default=64.0, help="allowed RSS growth per service")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--hostile", action="store_true", help="mix in hostile clients: maximum-size prompts, a slow reader, idle Verify streams"
    )
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args(argv)
    return report(run(args), args.json)


if __name__ == "__main__":
    sys.exit(main())
