"""Per-round transport overhead of the draft <-> verify gRPC stream on loopback.

    python benchmarks/transport_overhead.py [--requests 20] [--max-tokens 64] [--k 5] [--out FILE]

Starts `specdec serve draft` and `specdec serve verify` as separate processes on the tiny pair,
runs greedy Generate calls, and reports the round stats the verify service streams back:
transport = propose round trip - draft compute (network, serialisation, thread hops).
Goal: median <= 1 ms per round on loopback with K = 5.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

from service_processes import free_port, spawn_service, wait_serving

from specdec.cli.client import VerifyClient
from specdec.cli.tiny_pair import make_tiny_pair


def _summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 3),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        "mean": round(statistics.fmean(ordered), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--out")
    args = parser.parse_args()
    pair = make_tiny_pair(tempfile.mkdtemp())
    draft_port, verify_port = free_port(), free_port()
    processes = [
        spawn_service("draft", "--draft", str(pair.draft), "--port", str(draft_port), "--metrics-port", "0"),
        spawn_service(
            "verify",
            "--target",
            str(pair.target),
            "--port",
            str(verify_port),
            "--metrics-port",
            "0",
            "--draft-endpoint",
            f"127.0.0.1:{draft_port}",
        ),
    ]
    try:
        wait_serving(f"127.0.0.1:{draft_port}")
        wait_serving(f"127.0.0.1:{verify_port}")
        rounds = []
        with VerifyClient(f"127.0.0.1:{verify_port}") as client:
            client.generate("warm up", max_tokens=8, temperature=0)
            for index in range(args.requests):
                completion = client.generate(
                    f"Request {index}: the quick brown fox",
                    max_tokens=args.max_tokens,
                    temperature=0,
                    ignore_eos=True,
                    num_draft_tokens=args.k,
                )
                rounds.extend(r for r in completion.rounds if r.num_candidates > 0)
        report = {
            "rounds": len(rounds),
            "k": args.k,
            "transport_ms": _summary([r.transport_ms for r in rounds]),
            "draft_ms": _summary([r.draft_ms for r in rounds]),
            "target_ms": _summary([r.target_ms for r in rounds]),
            "acceptance_rate": round(sum(r.num_accepted for r in rounds) / sum(r.num_candidates for r in rounds), 3),
        }
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump(report, file, indent=1)


if __name__ == "__main__":
    main()
