"""One llama.cpp pass over n new tokens, per GGUF file: what a draft step or a verify pass costs by quantization.

    python benchmarks/gguf_steps.py FILE [FILE ...] [--tokens 1,2,5,8] [--repeats 25] [--threads 1]

Each file is run by llama-cpp-python as plainly as llama.cpp runs it (no specdec code in the way): about 100
tokens of context, then one pass over n new tokens with logits at every position (what a verify pass reads),
median of `--repeats`, in ms. Pin it to one core (`taskset -c 1`) as `specdec up` pins the draft, and run it
alone on a quiet machine: it prints the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from llama_cpp import Llama

CONTEXT = b"Hello, this is a test of the emergency broadcast system. " * 6  # about 100 tokens


def step_ms(llm: Llama, context: list[int], num_tokens: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        llm.reset()
        llm.eval(context)
        started = time.perf_counter()
        llm.eval([13] * num_tokens)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--tokens", default="1,2,5,8")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    counts = [int(n) for n in args.tokens.split(",")]
    print(f"load average {os.getloadavg()[0]:.2f} before")
    print("| GGUF | " + " | ".join(f"{n} tok (ms)" for n in counts) + " |")
    print("|---|" + "---|" * len(counts))
    for path in args.files:
        llm = Llama(model_path=str(path), n_threads=args.threads, n_threads_batch=args.threads, n_ctx=1024, logits_all=True, verbose=False)
        context = llm.tokenize(CONTEXT)
        print(f"| {path.name} | " + " | ".join(f"{step_ms(llm, context, n, args.repeats):.1f}" for n in counts) + " |")
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
