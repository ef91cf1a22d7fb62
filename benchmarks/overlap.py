"""Overlapped drafting: the draft time left on the critical path, with overlap off and on.

    python benchmarks/overlap.py [--pair tiny|default] [--target T --draft D] [--requests 8]
                                 [--max-tokens 64] [--k 4] [--temperature 0] [--out FILE]

For each setting it starts `specdec serve draft` (with --no-overlap, then --overlap) and
`specdec serve verify` as separate processes, one CPU thread each (the draft "on its own
device"), runs the same Generate calls and reports per round, from the round stats the verify
service streams back:
  wait_ms   the verify side's wait for a block (the propose round trip: draft_ms + transport_ms)
  draft_ms  the draft compute on that wait (with overlap: from the feedback's arrival to the block)
plus tokens/s, the acceptance rate, and the draft service's own counters of pre-drafted blocks used
and discarded and the compute they took off the critical path. The issue's goal: with overlap the
draft time on the critical path falls by >= 50%.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
import urllib.request

from service_processes import free_port, spawn_service, wait_serving

from specdec.cli.client import VerifyClient

PROMPTS = [
    "Explain how a bicycle's gears make it easier to ride up a hill.",
    "Write a short story about a lighthouse keeper.",
    "List five uses of a paperclip and explain each.",
    "Describe the water cycle to a ten-year-old.",
]


def _draft_counters(metrics_port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    counters = {"used": 0.0, "discarded": 0.0, "saved_s": 0.0}
    for outcome in ("used", "discarded"):
        match = re.search(rf'^specdec_draft_predrafted_blocks_total{{outcome="{outcome}"}} (\S+)$', text, re.MULTILINE)
        counters[outcome] = float(match.group(1)) if match else 0.0
    match = re.search(r"^specdec_draft_predraft_saved_seconds_total (\S+)$", text, re.MULTILINE)
    counters["saved_s"] = float(match.group(1)) if match else 0.0
    return counters


def _mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 3) if values else 0.0


def measure(args: argparse.Namespace, target: str, draft: str, overlap: bool) -> dict:
    draft_port, verify_port, metrics_port = free_port(), free_port(), free_port()
    draft_args = [
        "--draft",
        draft,
        "--port",
        str(draft_port),
        "--metrics-port",
        str(metrics_port),
        "--overlap" if overlap else "--no-overlap",
    ]
    processes = [spawn_service("draft", *draft_args, *(["--draft-device", args.draft_device] if args.draft_device else []))]
    try:
        wait_serving(f"127.0.0.1:{draft_port}", processes[0])
        processes.append(
            spawn_service(
                "verify",
                "--target",
                target,
                "--port",
                str(verify_port),
                "--metrics-port",
                "0",
                "--draft-endpoint",
                f"127.0.0.1:{draft_port}",
                *(["--device", args.device] if args.device else []),
            )
        )
        wait_serving(f"127.0.0.1:{verify_port}", processes[1])
        settings = {
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "ignore_eos": True,
            "num_draft_tokens": args.k,
            "seed": 1,
        }
        rounds, tokens = [], 0
        with VerifyClient(f"127.0.0.1:{verify_port}") as client:
            client.generate("warm up", **{**settings, "max_tokens": 8})
            before = _draft_counters(metrics_port)
            started = time.perf_counter()
            for index in range(args.requests):
                completion = client.generate(PROMPTS[index % len(PROMPTS)], **settings)
                tokens += len(completion.token_ids)
                rounds.extend(r for r in completion.rounds if r.num_candidates > 0)
            elapsed = time.perf_counter() - started
        after = _draft_counters(metrics_port)
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=30)
    return {
        "overlap": overlap,
        "rounds": len(rounds),
        "tokens_per_s": round(tokens / elapsed, 2),
        "wait_ms": _mean([r.draft_ms + r.transport_ms for r in rounds]),
        "draft_ms": _mean([r.draft_ms for r in rounds]),
        "transport_ms": _mean([r.transport_ms for r in rounds]),
        "target_ms": _mean([r.target_ms for r in rounds]),
        "acceptance_rate": round(sum(r.num_accepted for r in rounds) / max(1, sum(r.num_candidates for r in rounds)), 3),
        "predrafted_used": after["used"] - before["used"],
        "predrafted_discarded": after["discarded"] - before["discarded"],
        "saved_ms_per_round": round((after["saved_s"] - before["saved_s"]) * 1000 / max(1, len(rounds)), 3),
    }


def _pair(args: argparse.Namespace) -> tuple[str, str]:
    if args.target and args.draft:
        return args.target, args.draft
    if args.pair == "default":
        from specdec.default_models import pair_or_default

        return pair_or_default(args.target, args.draft)
    from specdec.cli.tiny_pair import make_tiny_pair

    pair = make_tiny_pair(tempfile.mkdtemp())
    return str(pair.target), str(pair.draft)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", choices=["tiny", "default"], default="tiny", help="tiny random pair, or the default SmolLM2 pair")
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--device", help="verify's device (default auto)")
    parser.add_argument("--draft-device", help="the draft's device (default auto)")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    target, draft = _pair(args)
    off, on = measure(args, target, draft, overlap=False), measure(args, target, draft, overlap=True)
    report = {
        "target": target,
        "draft": draft,
        "k": args.k,
        "temperature": args.temperature,
        "off": off,
        "on": on,
        "critical_draft_ms_reduction": round(1 - on["draft_ms"] / off["draft_ms"], 3) if off["draft_ms"] else None,
        "wait_ms_reduction": round(1 - on["wait_ms"] / off["wait_ms"], 3) if off["wait_ms"] else None,
        "speedup_tokens_per_s": round(on["tokens_per_s"] / off["tokens_per_s"], 3) if off["tokens_per_s"] else None,
    }
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump(report, file, indent=1)
    return report


if __name__ == "__main__":
    main()
