"""Fixed K against adaptive K, in one process (no gRPC, no HTTP), on one (target, draft) pair.

    python benchmarks/adaptive_k.py [--target T --draft D] [--prompts 8] [--max-tokens 64] [--ks 1,2,4] [--max-k 8] [--json]

Spec-Bench first turns, every 37th question (a spread over the categories), greedy, batch 1. For
each prompt every mode runs once, in turn (target-only, each fixed K, adaptive with K up to
--max-k), so a slow spell on the machine hits all modes alike. Reports tokens/s, the speedup over
target-only, acceptance and, for adaptive, how often it chose each K. Without --target/--draft it
runs the default pair (the lead's measurement that decides speculative.adaptive_k's default).
"""

from __future__ import annotations

import json
import time
from collections import Counter

import torch
from pair_args import pair_parser

from specdec.cli.bench import DEFAULT_PROMPTS
from specdec.default_models import pair_or_default
from specdec.drafters import ModelDrafter
from specdec.engines.hf import load_model
from specdec.generation import SpeculativeGenerator
from specdec.prompts import encode_chat
from specdec.request import GenerationRequest, GenerationStats
from specdec.sampling import SamplingParams


def mode_requests(prompt_ids: list[int], max_tokens: int, ks: list[int], max_k: int) -> dict[str, GenerationRequest]:
    base = GenerationRequest(prompt_ids=prompt_ids, max_tokens=max_tokens, sampling=SamplingParams(temperature=0), seed=0)
    modes = {"target-only": base.model_copy(update={"speculative": False})}
    modes.update({f"K={k}": base.model_copy(update={"num_draft_tokens": k}) for k in ks})
    modes["adaptive"] = base.model_copy(update={"num_draft_tokens": max_k, "adaptive_k": True})
    return modes


def run_once(generator: SpeculativeGenerator, request: GenerationRequest) -> tuple[int, float, GenerationStats, list[int]]:
    stats, chosen, tokens = GenerationStats(), [], 0
    started = time.perf_counter()
    for chunk in generator.stream(request, stats):
        tokens += len(chunk.token_ids)
        if chunk.round.chosen_k is not None:
            chosen.append(chunk.round.chosen_k)
    return tokens, time.perf_counter() - started, stats, chosen


def main() -> None:
    parser = pair_parser(__doc__)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--ks", default="1,2,4", help="fixed K values to compare, comma-separated")
    parser.add_argument("--max-k", type=int, default=None, help="adaptive K's upper bound (default: the largest of --ks)")
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON object")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    max_k = args.max_k or max(ks)
    torch.set_grad_enabled(False)
    target, draft = (load_model(path) for path in pair_or_default(args.target, args.draft))
    questions = [json.loads(line) for line in DEFAULT_PROMPTS.read_text().splitlines()][::37][: args.prompts]
    generators = {False: SpeculativeGenerator(target), True: SpeculativeGenerator(target, ModelDrafter(draft.model))}
    warmup = encode_chat(target.tokenizer, [{"role": "user", "content": "Hello"}])
    for request in mode_requests(warmup, 8, ks, max_k).values():  # first passes allocate; not timed
        run_once(generators[request.speculative], request)
    totals: dict[str, dict] = {}
    chosen_k: Counter[int] = Counter()
    for question in questions:
        prompt_ids = encode_chat(target.tokenizer, [{"role": "user", "content": question["turns"][0]}])
        for mode, request in mode_requests(prompt_ids, args.max_tokens, ks, max_k).items():
            tokens, seconds, stats, chosen = run_once(generators[request.speculative], request)
            total = totals.setdefault(mode, {"tokens": 0, "seconds": 0.0, "drafted": 0, "accepted": 0})
            total["tokens"] += tokens
            total["seconds"] += seconds
            total["drafted"] += stats.draft_tokens
            total["accepted"] += stats.accepted_tokens
            if mode == "adaptive":
                chosen_k.update(chosen)
    report = summarise(totals, chosen_k)
    report["settings"] = {
        "target": str(target.source),
        "draft": str(draft.source),
        "prompts": len(questions),
        "max_tokens": args.max_tokens,
        "ks": ks,
        "max_k": max_k,
        "torch_threads": torch.get_num_threads(),
    }
    print_report(report)
    if args.json:
        print(json.dumps(report))


def summarise(totals: dict[str, dict], chosen_k: Counter[int]) -> dict:
    baseline = totals["target-only"]["tokens"] / totals["target-only"]["seconds"]
    modes = {}
    for mode, total in totals.items():
        rate = total["tokens"] / total["seconds"]
        modes[mode] = {
            "tokens_per_s": round(rate, 2),
            "speedup": round(rate / baseline, 3),
            "acceptance": round(total["accepted"] / total["drafted"], 3) if total["drafted"] else None,
        }
    rounds = sum(chosen_k.values())
    share = {k: round(count / rounds, 3) for k, count in sorted(chosen_k.items())} if rounds else {}
    return {"modes": modes, "adaptive_chosen_k_share": share}


def print_report(report: dict) -> None:
    for mode, result in report["modes"].items():
        acceptance = "" if result["acceptance"] is None else f", acceptance {result['acceptance']:.3f}"
        print(f"{mode:>12}: {result['tokens_per_s']:7.1f} tok/s, speedup {result['speedup']:.2f}{acceptance}")
    print("adaptive chose K (share of rounds): " + ", ".join(f"{k}: {share:.0%}" for k, share in report["adaptive_chosen_k_share"].items()))


if __name__ == "__main__":
    main()
