"""Draft and target step costs, and the speedup they allow at a measured accepted length.

    python benchmarks/step_costs.py [--target T --draft D] [--bench-results bench-results/X/results.json]

Times, in-process with specdec's own KV-cache code, one draft token and one target forward over
n = 1..K+1 new tokens (what a verify round scores), after a realistic context. With a bench
results file it then compares the measured speedup with the ceiling those costs allow:

    ceiling = L * t_target(1) / (K * t_draft + t_target(K + 1))

where L is the measured mean accepted length (tokens per round, bonus included). Whatever the
measured speedup misses of the ceiling is overhead outside the model forwards (sampling,
acceptance, gRPC, HTTP), which the 85% goal in docs/benchmarks.md bounds.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch
from pair_args import pair_parser

from specdec.default_models import pair_or_default
from specdec.engines.hf import load_model
from specdec.kv_cache import CachedSequence
from specdec.prompts import encode_chat

CONTEXT = "Explain, in a few paragraphs, how a bicycle's gears make it easier to ride up a hill."


def median_ms(model, prefix: list[int], new_tokens: int, repeats: int) -> float:
    """Median time of one forward over `new_tokens` tokens after `prefix` (cached), rolled back each time."""
    lm = CachedSequence(model)
    lm.advance(prefix)
    times = []
    for repeat in range(repeats + 2):
        extra = [(17 * repeat + i) % 1000 + 10 for i in range(new_tokens)]
        started = time.perf_counter()
        lm.advance(prefix + extra, num_logits=new_tokens)
        if repeat >= 2:  # the first two warm the allocator
            times.append((time.perf_counter() - started) * 1000)
        lm.truncate(len(prefix))
    return statistics.median(times)


def main() -> None:
    parser = pair_parser(__doc__)
    parser.add_argument("--max-k", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--bench-results", help="a `specdec bench` results.json: compare its concurrency-1 speedup with the ceiling")
    parser.add_argument("--k", type=int, default=None, help="K the bench ran with (default: the bench's setting, else 4)")
    args = parser.parse_args()
    args.target, args.draft = pair_or_default(args.target, args.draft)
    torch.set_grad_enabled(False)
    target, draft = load_model(args.target), load_model(args.draft)
    # A chat prompt plus 64 tokens of answer: the context a mid-answer round sees.
    prefix = encode_chat(target.tokenizer, [{"role": "user", "content": CONTEXT}]) + [1000 + i for i in range(64)]
    target_ms = {n: median_ms(target.model, prefix, n, args.repeats) for n in range(1, args.max_k + 2)}
    draft_ms = median_ms(draft.model, prefix, 1, args.repeats * 3)
    report = {"target_ms": target_ms, "draft_ms_per_token": draft_ms, "torch_threads": torch.get_num_threads()}
    print(f"draft: {draft_ms:.2f} ms per token ({draft_ms / target_ms[1]:.3f} of a target step)")
    for n, ms in target_ms.items():
        print(f"target over {n} new token(s): {ms:.2f} ms ({ms / target_ms[1]:.2f}x one token)")
    if args.bench_results:
        report["comparison"] = compare_with_bench(json.loads(Path(args.bench_results).read_text()), target_ms, draft_ms, args.k)
    print(json.dumps(report, indent=2))


def compare_with_bench(results: dict, target_ms: dict[int, float], draft_ms: float, k: int | None) -> dict:
    level = next(level for level in results["levels"] if level["concurrency"] == 1)
    k = k or results["settings"].get("num_draft_tokens") or 4
    accepted_length = level["mean_accepted_length"]
    ceiling = accepted_length * target_ms[1] / (k * draft_ms + target_ms[k + 1])
    measured = level["speedup"]
    print(
        f"K={k}, mean accepted length {accepted_length:.2f}: ceiling {ceiling:.2f}x = {accepted_length:.2f} * {target_ms[1]:.1f} ms "
        f"/ ({k} * {draft_ms:.2f} ms + {target_ms[k + 1]:.1f} ms); measured {measured:.2f}x = {measured / ceiling:.0%} of the ceiling"
    )
    return {
        "k": k,
        "mean_accepted_length": accepted_length,
        "ceiling": ceiling,
        "measured": measured,
        "share_of_ceiling": measured / ceiling,
    }


if __name__ == "__main__":
    main()
