"""The transformers target eager against compiled on this machine: step cost for 1, 2, 3, 5 and 8 new tokens, and
what batch invariance each keeps.

    python benchmarks/compiled_steps.py [--dtypes float32,bfloat16] [--threads 1] [--repeats 20] [--out FILE]

On the default target's weights (SmolLM2-135M-Instruct, transformers), after about 100 tokens of context, one
sequence. For each precision:
- eager, with the dynamic KV cache the hf engine uses (specdec/engines/hf.py);
- eager, with transformers' StaticCache (fixed-address KV tensors, the precondition of compiling and of CUDA graphs);
- compiled: `torch.compile(model, dynamic=True)` over the StaticCache, one compile for every pass length (the
  first call's time, the compile, is reported apart).
Batch invariance per mode: the largest difference in a logit between the last context position scored alone (a
1-token pass) and the same position scored as the first of a 5-token pass (what a verify pass computes where a plain
step would), and whether the argmax of any position moved. Run it alone on a quiet machine; it records the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, DynamicCache, StaticCache

from specdec.default_models import ensure_default_target, models_dir
from specdec.engines.hf import load_tokenizer
from specdec.prompts import encode_chat

CONTEXT = "Explain, in a few paragraphs, how a bicycle's gears make it easier to ride up a hill."
NEW_TOKENS = (1, 2, 3, 5, 8)
MAX_CACHE = 256


class Cached:
    """One sequence's KV cache of either kind, rolled back to a length between passes."""

    def __init__(self, model, static: bool) -> None:
        self.static = static
        self.cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE) if static else DynamicCache(config=model.config)
        self.length = 0

    def forward(self, forward, ids: list[int], num_logits: int) -> torch.Tensor:
        """Logits of the last `num_logits` of `ids`, appended after what the cache holds: [num_logits, vocab]."""
        positions = torch.arange(self.length, self.length + len(ids)).unsqueeze(0)
        out = forward(input_ids=torch.tensor([ids]), position_ids=positions, cache=self.cache, use_cache=True, logits_to_keep=num_logits)
        self.length += len(ids)
        return out.logits[0].float()

    def truncate(self, length: int) -> None:
        if self.static:
            # NOTE: StaticCache writes at its layers' running length and masks by position, so rolling back is
            # resetting that length; the stale cells past it are overwritten before they are read.
            for layer in self.cache.layers:
                if layer.is_initialized:
                    layer.cumulative_length.fill_(length)
        else:
            self.cache.crop(length - self.length) if length < self.length else None
        self.length = length


def step_ms(model, forward, static: bool, prefix: list[int], new_tokens: int, repeats: int) -> tuple[float, float]:
    """(first call ms, median ms of the rest) of a pass over `new_tokens` after `prefix`."""
    cached = Cached(model, static)
    with torch.inference_mode():
        cached.forward(forward, prefix, 1)
        times = []
        for repeat in range(repeats + 1):
            extra = [(17 * repeat + i) % 1000 + 10 for i in range(new_tokens)]
            started = time.perf_counter()
            cached.forward(forward, extra, new_tokens)
            times.append((time.perf_counter() - started) * 1000)
            cached.truncate(len(prefix))
    return times[0], statistics.median(times[1:])


def invariance(model, forward, static: bool, prefix: list[int]) -> dict:
    """A position scored in a 1-token pass against the same position first in a 5-token pass."""
    block = [(31 * i) % 1000 + 10 for i in range(4)]
    cached = Cached(model, static)
    with torch.inference_mode():
        cached.forward(forward, prefix[:-1], 1)
        alone = cached.forward(forward, prefix[-1:], 1)[0]
        cached.truncate(len(prefix) - 1)
        together = cached.forward(forward, prefix[-1:] + block, 5)[0]
    return {"max_logit_difference": float((alone - together).abs().max()), "argmax_moved": bool(alone.argmax() != together.argmax())}


def measure(model, dtype: str, repeats: int, prefix: list[int]) -> list[dict]:
    compiled = torch.compile(model, dynamic=True)
    rows = []
    modes = (("eager dynamic cache", model, False), ("eager static cache", model, True), ("compiled static cache", compiled, True))
    for mode, forward, static in modes:
        row = {"dtype": dtype, "mode": mode, "steps_ms": {}, "first_call_ms": {}}
        for n in NEW_TOKENS:
            first, median = step_ms(model, forward, static, prefix, n, repeats)
            row["steps_ms"][n], row["first_call_ms"][n] = round(median, 2), round(first)
        row["invariance"] = invariance(model, forward, static, prefix)
        row["load_average"] = os.getloadavg()[0]
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hf_dir = ensure_default_target(models_dir())
    prefix = encode_chat(load_tokenizer(str(hf_dir)), [{"role": "user", "content": CONTEXT}])
    rows = []
    for dtype in args.dtypes.split(","):
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=getattr(torch, dtype)).eval()
        rows += measure(model, dtype, args.repeats, prefix)
    print("| dtype | mode | " + " | ".join(f"{n} tok (ms)" for n in NEW_TOKENS) + " | 1-token vs 5-token pass | load |")
    print("|---|---|" + "---|" * (len(NEW_TOKENS) + 2))
    for row in rows:
        moved = ", argmax moved" if row["invariance"]["argmax_moved"] else ""
        steps = " | ".join(f"{row['steps_ms'][n]:.1f}" for n in NEW_TOKENS)
        difference = f"{row['invariance']['max_logit_difference']:.2g}{moved}"
        print(f"| {row['dtype']} | {row['mode']} | {steps} | {difference} | {row['load_average']:.2f} |")
    if args.out:
        args.out.write_text(json.dumps({"argv": vars(args) | {"out": str(args.out)}, "threads": args.threads, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
