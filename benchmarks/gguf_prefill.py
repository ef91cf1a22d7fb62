"""What a GGUF draft's prompt costs: llama.cpp prefill speed and the step after it, per file.

    python benchmarks/gguf_prefill.py FILE.gguf [FILE.gguf ...] [--prompt-tokens 1500] [--threads 1]

A draft must take in the whole prompt before it can draft (drafters/gguf.py). On a long prompt
(Spec-Bench summarization and RAG: 1-2k tokens) that prefill, not the per-token step, decides
whether the draft catches up within the answer. Each file prefills `--prompt-tokens` random token
ids in one sequence, then takes `--steps` single-token steps there and as many at a 32-token
context; the target's own prefill of the same ids (torch, every core) is the yardstick.
Run it on a quiet machine: it measures CPU time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import torch

from specdec.default_models import ensure_default_target, models_dir
from specdec.engines.gguf_model import GgufOptions, GgufRow, load_gguf
from specdec.engines.hf import load_model

_SHORT_CONTEXT = 32


def timed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def gguf_costs(path: Path, token_ids: list[int], threads: int, steps: int) -> dict[str, float]:
    model = load_gguf(path, GgufOptions(threads=threads, context_tokens=len(token_ids) + 2 * steps + 64, max_sequences=1))
    seat = model.take_seat(len(token_ids) + steps, timeout_s=1.0)
    prefill_s = timed(lambda: model.decode([GgufRow(seat, token_ids, 0, 1)]))

    def step_ms(start: int) -> float:
        return 1000 * statistics.median(timed(lambda: model.decode([GgufRow(seat, [token_ids[0]], start, 1)])) for _ in range(steps))

    deep = step_ms(len(token_ids))
    model.decode([GgufRow(seat, token_ids[:_SHORT_CONTEXT], 0, 1)])  # back to a short context (the rest is removed)
    return {"prefill_s": prefill_s, "deep_step_ms": deep, "short_step_ms": step_ms(_SHORT_CONTEXT)}


def target_prefill_s(token_ids: list[int]) -> float:
    target = load_model(str(ensure_default_target(models_dir())))
    with torch.inference_mode():
        return timed(lambda: target.model(torch.tensor([token_ids])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", nargs="+", type=Path)
    parser.add_argument("--prompt-tokens", type=int, default=1500)
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads (the default pair's draft uses 1)")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    token_ids = [random.Random(0).randrange(1000, 40000) for _ in range(args.prompt_tokens)]
    print(
        f"| draft ({args.threads} thread(s)) | prefill of {args.prompt_tokens} tokens | tokens/s "
        f"| step at {args.prompt_tokens} | step at {_SHORT_CONTEXT} |"
    )
    print("|---|---|---|---|---|")
    for path in args.gguf:
        costs = gguf_costs(path, token_ids, args.threads, args.steps)
        print(
            f"| {path.name} | {costs['prefill_s']:.2f} s | {args.prompt_tokens / costs['prefill_s']:.0f} | "
            f"{costs['deep_step_ms']:.1f} ms | {costs['short_step_ms']:.1f} ms |",
            flush=True,
        )
    seconds = target_prefill_s(token_ids)
    print(f"| the target (torch, {torch.get_num_threads()} threads) | {seconds:.2f} s | {args.prompt_tokens / seconds:.0f} | | |")


if __name__ == "__main__":
    main()
