"""Which pass lengths a llama.cpp build scores alike, and what each length costs: why a target pads one-token passes.

    python benchmarks/kernel_classes.py models/smollm2-135m-instruct-bf16.gguf [--context 100] [--flash-attn auto|on|off]
        [--threads 1] [--lengths 1,2,3,5,8,16,32,63,64]

llama-cpp-python alone (no specdec code, so any Python with llama-cpp-python runs it, e.g. one built with
CMAKE_ARGS="-DGGML_LLAMAFILE=OFF", or `make install`'s patched build). After `--context` tokens of random ids in
sequence 0 it decodes n new tokens in one
pass and compares the first new position's logits with a one-token pass of the same token: the largest absolute
difference per n, and beside a second sequence's step in the same pass. Then the median ms of each pass length.
It prints the build's features first: llamafile's sgemm (`LLAMAFILE = 1`) runs passes of 2 tokens or more and
one-token passes run llama.cpp's dot products, which is where the two differ. Pin it to one core (`taskset -c 1`)
as `specdec up` pins the target, and run it alone on a quiet machine: it prints the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}  # llama_flash_attn_type


class Context:
    """One llama.cpp context over a GGUF, two sequences with cells of their own (as a target's sessions are)."""

    def __init__(self, path: str, threads: int, flash_attn: int) -> None:
        import llama_cpp

        self.lib = lib = llama_cpp
        lib.llama_backend_init()
        self.model = lib.llama_model_load_from_file(path.encode(), lib.llama_model_default_params())
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 4096, 512, 512, 2
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified, params.flash_attn_type, params.no_perf = False, flash_attn, True
        self.context = lib.llama_init_from_model(self.model, params)
        self.memory = lib.llama_get_memory(self.context)
        self.vocab_size = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))
        self.batch = lib.llama_batch_init(512, 0, 1)

    def decode(self, entries: list[tuple[int, int, int, bool]]) -> list[np.ndarray]:  # (seq, position, token, logits?)
        batch = self.batch
        batch.n_tokens = len(entries)
        for i, (seq_id, position, token_id, wants) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token_id, position, 1, wants
            batch.seq_id[i][0] = seq_id
        if self.lib.llama_decode(self.context, batch) != 0:
            raise RuntimeError(f"llama_decode failed on {len(entries)} tokens")
        return [
            np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.context, i), shape=(self.vocab_size,)).copy()
            for i, entry in enumerate(entries)
            if entry[3]
        ]

    def truncate(self, seq_id: int, position: int) -> None:
        self.lib.llama_memory_seq_rm(self.memory, seq_id, position, -1)


def differences(llm: Context, start: int, new_ids: list[int], lengths: list[int]) -> dict[str, float]:
    """Per pass length: max |logit| difference at the first new position against a one-token pass."""
    llm.truncate(0, start)
    alone = llm.decode([(0, start, new_ids[0], True)])[0]
    result = {}
    for n in lengths:
        llm.truncate(0, start)
        result[str(n)] = float(np.abs(llm.decode([(0, start + i, new_ids[i], True) for i in range(n)])[0] - alone).max())
    for n in (1, 3):  # beside sequence 1's pass of the same length
        llm.truncate(0, start)
        llm.truncate(1, start)
        entries = [(0, start + i, new_ids[i], True) for i in range(n)] + [(1, start + i, new_ids[n + i], True) for i in range(n)]
        result[f"{n} + {n} beside"] = float(np.abs(llm.decode(entries)[0] - alone).max())
    return result


def pass_ms(llm: Context, start: int, new_ids: list[int], n: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        llm.truncate(0, start)
        began = time.perf_counter()
        llm.decode([(0, start + i, new_ids[i], i == n - 1) for i in range(n)])
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gguf")
    parser.add_argument("--context", type=int, default=100)
    parser.add_argument("--flash-attn", choices=sorted(FLASH_ATTN), default="auto")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lengths", default="1,2,3,5,8,16,32,63,64")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    llm = Context(args.gguf, args.threads, FLASH_ATTN[args.flash_attn])
    print(llm.lib.llama_print_system_info().decode().strip())
    print(f"load average {os.getloadavg()[0]:.2f} before; {args.context} tokens of context, flash attention {args.flash_attn}")
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(300, 5000, args.context)]
    for seq_id in (0, 1):
        for first in range(0, len(prompt), 512):
            llm.decode([(seq_id, first + i, t, False) for i, t in enumerate(prompt[first : first + 512])])
    new_ids = [int(t) for t in rng.integers(300, 5000, max(lengths) * 2)]
    print("max |logit difference| against a one-token pass:", differences(llm, args.context, new_ids, lengths))
    print("| tokens in the pass | " + " | ".join(map(str, lengths)) + " |")
    print("|---|" + "---|" * len(lengths))
    print("| ms | " + " | ".join(f"{pass_ms(llm, args.context, new_ids, n, args.repeats):.1f}" for n in lengths) + " |")
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
