"""Availability under hostile load: /ready and small-request latency while clients send maximum-size prompts.

    python benchmarks/hostile_load.py                              # tiny pair, 2 hostile clients, 20 s per phase
    python benchmarks/hostile_load.py --target T --draft D --json hostile.json
    python benchmarks/hostile_load.py --hostile-nice 19            # hostile clients at the lowest CPU priority
    python benchmarks/hostile_load.py --hostile agent              # agent cases: pathological schemas, big tool lists, big gRPC grammars

Starts the stack as `specdec up` does (loopback.py). Two phases of --duration seconds each, `--rounds` times
alternately (the latencies of each kind of phase pooled, so drift on a shared host falls on both): a baseline,
then the same with --hostile-clients clients looping chat prompts just under the gateway's 4 MiB body
limit (max_tokens 4), or with --hostile agent the agent cases of hostile_agents.py (each hostile client
loops the HTTP ones, and one more sends big grammars straight to verify and the draft over gRPC). In both
phases one client sends small requests back to back (chat, 4 tokens, greedy) and another polls /ready every
0.25 s, as a Kubernetes readiness probe would. Reports /ready answers, small-request latency percentiles per
phase, and what the hostile requests got. Exit status 1 when /ready was ever not 200, a small request failed,
or a hostile request got anything but an explicit refusal.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing
import os
import sys
import time

import httpx
from hostile_agents import GRPC_CASES, agent_bodies, agent_failures, agent_requests, grpc_grammars
from hostile_clients import hostile_failures, oversized_body, oversized_prompts
from loopback import loopback_stack, percentiles, report

SMALL = {"model": "target", "messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 4, "temperature": 0}


async def _small_requests(url: str, deadline: float, latencies: list[float], failures: list[str]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            reply = await client.post("/v1/chat/completions", json=SMALL)
            latencies.append(time.perf_counter() - started)
            if reply.status_code != 200:
                failures.append(f"small request: HTTP {reply.status_code}")


async def _probe_ready(url: str, deadline: float, answers: collections.Counter) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=5) as client:
        while time.monotonic() < deadline:
            answers[str((await client.get("/ready")).status_code)] += 1
            await asyncio.sleep(0.25)


def _flood(
    url: str,
    duration: float,
    hostile_clients: int,
    body: bytes | None,
    results: multiprocessing.Queue,
    nice: int,
    grpc_addresses: tuple[str, str],
    agent_cases: frozenset[str],
) -> None:
    """The hostile clients, in a process of their own as they would be on other hosts: in the measuring
    process their uploads would delay the small requests' own client, not only the server. `nice`
    lowers their CPU priority, for hosts where they cannot be elsewhere: on 2 shared cores, building and
    pushing 4 MB bodies otherwise takes CPU time from the services and the small requests' client."""
    os.nice(nice)

    async def flood() -> collections.Counter:
        tally, deadline = collections.Counter(), time.monotonic() + duration
        if body is not None:
            await asyncio.gather(*(oversized_prompts(url, deadline, tally, body) for _ in range(hostile_clients)))
        else:  # the agent cases (body None)
            await asyncio.gather(
                *(agent_requests(url, deadline, tally, agent_cases) for _ in range(hostile_clients)),
                asyncio.to_thread(grpc_grammars, *grpc_addresses, deadline, tally, agent_cases),
            )
        return tally

    results.put(dict(asyncio.run(flood())))


async def _phase(
    services, duration: float, hostile_clients: int, body: bytes | None, nice: int = 0, agent_cases: frozenset[str] = frozenset()
) -> dict:
    url, grpc_addresses = services.url, (services.verify_address, services.draft_address)
    latencies, failures, ready = [], [], collections.Counter()
    cpu_before = services.cpu_seconds()
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    flooder = (
        context.Process(target=_flood, args=(url, duration, hostile_clients, body, results, nice, grpc_addresses, agent_cases))
        if hostile_clients
        else None
    )
    if flooder is not None:
        flooder.start()
    deadline = time.monotonic() + duration
    await asyncio.gather(_small_requests(url, deadline, latencies, failures), _probe_ready(url, deadline, ready))
    hostile = collections.Counter(results.get(timeout=duration + 300) if flooder is not None else {})
    if flooder is not None:
        flooder.join(timeout=30)
    answered = sum(count for outcome, count in hostile.items() if not outcome.endswith("_seconds"))
    seconds = sum(count for outcome, count in hostile.items() if outcome.endswith("_seconds"))
    cpu = {name: round(seconds - cpu_before[name], 2) for name, seconds in services.cpu_seconds().items()}
    return {
        "latencies_s": latencies,  # pooled across rounds by `_pool`, then dropped
        "small_requests": percentiles(latencies),
        "ready": dict(ready),
        "service_cpu_s": cpu,
        "hostile": dict(hostile),
        "hostile_mean_s": round(seconds / answered, 3) if answered else None,
        "problems": failures[:10]
        + [f"/ready answered {status} x{count}" for status, count in ready.items() if status != "200"]
        + [f"hostile request got {failure}" for failure in (hostile_failures(hostile) if body is not None else agent_failures(hostile))],
    }


def _pool(phases: list[dict]) -> dict:
    """One kind of phase over the rounds: latencies pooled, counts summed, each round's p99 kept."""
    latencies = [value for phase in phases for value in phase["latencies_s"]]
    counters = {key: collections.Counter() for key in ("ready", "service_cpu_s", "hostile")}
    for phase in phases:
        for key, counter in counters.items():
            counter.update(phase[key])
    answered = sum(count for outcome, count in counters["hostile"].items() if not outcome.endswith("_seconds"))
    seconds = sum(count for outcome, count in counters["hostile"].items() if outcome.endswith("_seconds"))
    return {
        "small_requests": percentiles(latencies),
        "p99_ms_per_round": [phase["small_requests"].get("p99_ms") for phase in phases],
        "ready": dict(counters["ready"]),
        "service_cpu_s": {name: round(value, 2) for name, value in counters["service_cpu_s"].items()},
        "hostile": dict(counters["hostile"]),
        "hostile_mean_s": round(seconds / answered, 3) if answered else None,
        "problems": [problem for phase in phases for problem in phase["problems"]],
    }


def run(args: argparse.Namespace) -> dict:
    body = oversized_body(args.prompt_bytes) if args.hostile == "oversized" else None
    cases = frozenset(args.agent_cases.split(","))
    baselines, hostiles = [], []
    with loopback_stack(args.target, args.draft) as services:
        httpx.post(f"{services.url}/v1/chat/completions", json=SMALL, timeout=120).raise_for_status()  # warm up
        for _ in range(args.rounds):
            baselines.append(asyncio.run(_phase(services, args.duration, 0, body)))
            hostiles.append(asyncio.run(_phase(services, args.duration, args.hostile_clients, body, args.hostile_nice, cases)))
        sessions_after = services.wait_idle()
    baseline, hostile = _pool(baselines), _pool(hostiles)
    problems = (
        baseline["problems"]
        + hostile["problems"]
        + [f"{name} still holds {count:g} sessions" for name, count in sessions_after.items() if count]
    )
    return {
        "hostile": args.hostile,
        "agent_cases": args.agent_cases if body is None else None,
        "prompt_bytes": len(body) if body else None,
        "hostile_clients": args.hostile_clients,
        "hostile_nice": args.hostile_nice,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "p99_ratio": _ratio(hostile, baseline),
        "baseline": baseline,
        "under_hostile_load": hostile,
        "sessions_after": sessions_after,
        "problems": problems,
        "ok": not problems,
    }


def _ratio(hostile: dict, baseline: dict) -> float | None:
    under, alone = hostile["small_requests"].get("p99_ms"), baseline["small_requests"].get("p99_ms")
    return round(under / alone, 2) if under and alone else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per phase")
    parser.add_argument("--rounds", type=int, default=1, help="baseline and hostile phases, alternately, this many times each")
    parser.add_argument("--hostile-clients", type=int, default=2)
    parser.add_argument(
        "--hostile",
        choices=["oversized", "agent"],
        default="oversized",
        help="what the hostile clients send: maximum-size prompts, or the agent cases (hostile_agents.py)",
    )
    parser.add_argument("--prompt-bytes", type=int, default=4 * 1024 * 1024 - 4096, help="size of each hostile request body")
    parser.add_argument("--target", help="target model (default: a tiny random pair, built for the run)")
    parser.add_argument("--draft", help="draft model (default: the tiny pair's)")
    parser.add_argument(
        "--agent-cases", default=",".join([*agent_bodies(), *GRPC_CASES]), help="with --hostile agent: which cases (default: all)"
    )
    parser.add_argument(
        "--hostile-nice", type=int, default=0, help="niceness of the hostile clients' process (19: as if they ran on other hosts)"
    )
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args(argv)
    return report(run(args), args.json)


if __name__ == "__main__":
    sys.exit(main())
