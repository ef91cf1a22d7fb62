"""Each target engine's step cost for 1, 2, 3, 5 and 8 new tokens, and its ratio to the weight-read floor.

    python benchmarks/engine_steps.py [--threads 1,2] [--repeats 25] [--out docs/bench/engines/steps.json]

Engines, on the default target's weights (SmolLM2-135M-Instruct), through the TargetModel interface
(specdec/engines) the services use, after about 100 tokens of context:

- hf fp32 and hf bf16: transformers, eager, specdec's packed pass;
- llama_cpp bf16: a bf16 GGUF of exactly those weights, as the llama_cpp engine runs it (every decode
  padded to two tokens where its build needs it, for batch invariance), and unpadded (one-token passes as they come);
- llama_cpp q4_1: the bundled Q4_1 file the weights came from (the default draft).

The floor of a step is the time to read the weights once: weight bytes / read bandwidth, with the
bandwidth measured here as numpy summing a 1 GiB array. llama.cpp's unpadded bf16 one-token step is
the measured stand-in for that floor. Run it alone on a quiet machine; it records the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from specdec.default_models import default_draft_gguf, ensure_default_target, models_dir
from specdec.engines.hf import load_model
from specdec.engines.llama_cpp import LlamaCppSettings, load_llama_cpp_target
from specdec.make_draft import make_draft
from specdec.prompts import encode_chat

CONTEXT = "Explain, in a few paragraphs, how a bicycle's gears make it easier to ride up a hill."
NEW_TOKENS = (1, 2, 3, 5, 8)


def read_bandwidth_gb_s(size_bytes: int = 1 << 30) -> float:
    """Best of five sums over a `size_bytes` float32 array: bytes read per second."""
    data = np.ones(size_bytes // 4, dtype=np.float32)
    best = min(_timed(data.sum) for _ in range(5))
    return size_bytes / best / 1e9


def _timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def step_ms(target, prefix: list[int], new_tokens: int, repeats: int) -> float:
    """Median time of one pass over `new_tokens` tokens after `prefix` (cached), rolled back each time."""
    lm = target.open_sequence(len(prefix) + 16)
    try:
        lm.advance(prefix)
        times = []
        for repeat in range(repeats + 3):
            extra = [(17 * repeat + i) % 1000 + 10 for i in range(new_tokens)]
            started = time.perf_counter()
            lm.advance(prefix + extra, num_logits=new_tokens)
            if repeat >= 3:  # the first passes warm caches and allocators
                times.append((time.perf_counter() - started) * 1000)
            lm.truncate(len(prefix))
        return statistics.median(times)
    finally:
        lm.release()


def _engines(threads: int):
    """(name, weight bytes, a loader) per engine at `threads` threads."""
    hf_dir = ensure_default_target(models_dir())
    bf16_gguf = models_dir() / f"{hf_dir.name}-bf16.gguf"
    if not bf16_gguf.is_file():
        make_draft(hf_dir, "bf16", bf16_gguf)
    q4_gguf = default_draft_gguf(models_dir())

    def gguf(path, padded: bool):
        def load():
            target = load_llama_cpp_target(path, LlamaCppSettings(threads=threads, context_tokens=2048, max_sequences=2, device="cpu"))
            if not padded:  # NOTE: a measurement only: the engine pads wherever its build needs it (gguf_pass_floor.py)
                target.gguf.min_pass_tokens = 1
            return target

        return load

    def hf(dtype: str):
        def load():
            torch.set_num_threads(threads)
            return load_model(hf_dir, device="cpu", dtype=dtype)

        return load

    n_params = sum(p.numel() for p in load_model(hf_dir, device="cpu").model.parameters())
    return [
        ("hf fp32", 4 * n_params, hf("float32")),
        ("hf bf16", 2 * n_params, hf("bfloat16")),
        ("llama_cpp bf16 (padded, served)", bf16_gguf.stat().st_size, gguf(bf16_gguf, True)),
        ("llama_cpp bf16 (unpadded)", bf16_gguf.stat().st_size, gguf(bf16_gguf, False)),
        ("llama_cpp q4_1 (unpadded)", q4_gguf.stat().st_size, gguf(q4_gguf, False)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    bandwidth = read_bandwidth_gb_s()
    rows, report = [], {"read_bandwidth_gb_s": bandwidth, "load_average_before": os.getloadavg(), "engines": []}
    for threads in [int(t) for t in args.threads.split(",")]:
        for name, weight_bytes, load in _engines(threads):
            target = load()
            prefix = encode_chat(target.tokenizer, [{"role": "user", "content": CONTEXT}]) + [1000 + i for i in range(64)]
            steps = {n: step_ms(target, prefix, n, args.repeats) for n in NEW_TOKENS}
            floor_ms = weight_bytes / (bandwidth * 1e9) * 1000
            report["engines"].append(
                {"engine": name, "threads": threads, "weight_bytes": weight_bytes, "floor_ms": floor_ms, "step_ms": steps}
            )
            rows.append(
                f"| {name} | {threads} | "
                + " | ".join(f"{steps[n]:.1f}" for n in NEW_TOKENS)
                + f" | {floor_ms:.1f} | {steps[1] / floor_ms:.2f}x |"
            )
            if hasattr(target, "close"):
                target.close()
    report["load_average_after"] = os.getloadavg()
    print(
        f"read bandwidth {bandwidth:.1f} GB/s; load average {report['load_average_before'][0]:.2f} before, "
        f"{report['load_average_after'][0]:.2f} after\n"
    )
    print("| engine | threads | " + " | ".join(f"{n} tok (ms)" for n in NEW_TOKENS) + " | floor (ms) | 1 tok / floor |")
    print("|---|---|" + "---|" * (len(NEW_TOKENS) + 2))
    print("\n".join(rows))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
