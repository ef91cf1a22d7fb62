"""Tree vs chain verification at the same K, in one process (no gRPC): mean accepted length and tokens/s.

    python benchmarks/tree_vs_chain.py [--target T --draft D] [--prompts 8] [--max-tokens 64] [--k 4]
                                       [--branching 2] [--nodes 16] [--temperature 0] [--json]

Default pair (SmolLM2-135M-Instruct + the shipped draft) unless --target/--draft are given;
Spec-Bench first turns, every 37th question, batch 1. Temperature 0 is greedy; above 0 both modes
use coupled acceptance with a fixed seed per prompt, so chain and tree emit the same tokens and
only the rounds differ. Mean accepted length = accepted draft tokens per round (each round also
emits one target token); the target-only run is the tokens/s baseline.
"""

from __future__ import annotations

import argparse
import json
import time

from pair_args import pair_parser

from specdec.cli.bench import DEFAULT_PROMPTS
from specdec.default_models import pair_or_default
from specdec.drafters import ModelDrafter
from specdec.engines.hf import load_model
from specdec.generation import SpeculativeGenerator
from specdec.prompts import encode_chat
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams


def _parse() -> argparse.Namespace:
    parser = pair_parser(__doc__)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4, help="K: the chain's length and the tree's depth")
    parser.add_argument("--branching", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


def main() -> None:
    args = _parse()
    target, draft = (load_model(path) for path in pair_or_default(args.target, args.draft))
    questions = [json.loads(line) for line in DEFAULT_PROMPTS.read_text().splitlines()][::37][: args.prompts]
    modes = {"target_only": {"speculative": False}, "chain": {}, "tree": {"tree_branching": args.branching, "tree_nodes": args.nodes}}
    totals = {mode: {"tokens": 0, "seconds": 0.0, "rounds": 0, "accepted": 0, "drafted": 0} for mode in modes}
    outputs: dict[str, list[list[int]]] = {mode: [] for mode in modes}
    sampling = SamplingParams(temperature=args.temperature)
    for index, question in enumerate(questions):
        prompt_ids = encode_chat(target.tokenizer, [{"role": "user", "content": question["turns"][0]}])
        for mode, fields in modes.items():
            request = GenerationRequest(
                prompt_ids=prompt_ids,
                max_tokens=args.max_tokens,
                sampling=sampling,
                seed=index,
                acceptance="coupled",
                num_draft_tokens=args.k,
                **fields,
            )
            started = time.perf_counter()
            result = SpeculativeGenerator(target, ModelDrafter(draft.model)).generate(request)
            total = totals[mode]
            total["seconds"] += time.perf_counter() - started
            total["tokens"] += len(result.token_ids)
            total["rounds"] += result.stats.rounds
            total["accepted"] += result.stats.accepted_tokens
            total["drafted"] += result.stats.draft_tokens
            outputs[mode].append(result.token_ids)
    report = {
        mode: {
            "tokens_per_s": round(t["tokens"] / t["seconds"], 2),
            "mean_accepted_length": round(t["accepted"] / t["rounds"], 3) if t["rounds"] else 0.0,
            "draft_tokens_per_round": round(t["drafted"] / t["rounds"], 2) if t["rounds"] else 0.0,
        }
        for mode, t in totals.items()
    }
    report["tree_over_chain_accepted"] = round(
        report["tree"]["mean_accepted_length"] / max(report["chain"]["mean_accepted_length"], 1e-9), 3
    )
    report["tree_over_chain_speed"] = round(report["tree"]["tokens_per_s"] / report["chain"]["tokens_per_s"], 3)
    report["outputs_identical"] = outputs["chain"] == outputs["tree"] == outputs["target_only"]
    if args.json:
        print(json.dumps(report))
        return
    for mode in modes:
        print(
            f"{mode:12s} {report[mode]['tokens_per_s']:8.1f} tok/s  mean accepted {report[mode]['mean_accepted_length']:.3f}"
            f"  drafted/round {report[mode]['draft_tokens_per_round']:.1f}"
        )
    print(
        f"K={args.k} b={args.branching} nodes={args.nodes}: tree/chain accepted length {report['tree_over_chain_accepted']:.2f}x, "
        f"speed {report['tree_over_chain_speed']:.2f}x, outputs identical: {report['outputs_identical']}"
    )


if __name__ == "__main__":
    main()
