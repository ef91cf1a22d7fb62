"""What a llama_cpp target's logits depend on besides the request: another request's tokens in the same pass, and
where the session's KV cells sit in the shared cache.

    python benchmarks/kv_invariance.py models/smollm2-135m-instruct-bf16.gguf [--threads 1]

Through the served engine (specdec.engines.gguf_model, padded to two tokens as a target is). Session B decodes a
100-token prompt, then 2-token steps; each figure is the largest logit difference of B's steps against B alone:
- beside another session's prompt of n tokens in the same decode, as passes were packed before gguf_passes.py
  (one llama_decode) and as they are planned now;
- after another session took e cells first, so that B's cells start at offset e of the cache;
in the shared KV pool and with cells per session (GgufOptions.per_session_kv). With --timing, also what each layout
costs: the median ms of a decode of 4 sessions' verify blocks (5 tokens each), their plain steps, and the two mixed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from specdec.engines.gguf_model import GgufModel, GgufOptions, GgufRow, load_gguf
from specdec.engines.gguf_passes import Entry


def _tokens(model: GgufModel) -> list[int]:
    """Ordinary ids (past the special tokens at the start of the vocabulary), a fixed pattern."""
    return [(17 * index) % (min(model.vocab_size, 5300) - 300) + 300 for index in range(1200)]


def _steps(model: GgufModel, neighbour: int = 0, offset: int = 0, *, one_pass: bool = False) -> list[torch.Tensor]:
    """B's logits over 10 steps after its prompt, with a neighbour's prompt in its first step or cells before it."""
    tokens = _tokens(model)
    first = model.take_seat(offset + 8, 5) if offset else None
    if first is not None:
        model.decode([GgufRow(first, tokens[600 : 600 + offset], 0, 1)])
    seat, other = model.take_seat(300, 5), model.take_seat(neighbour + 8, 5)
    try:
        model.decode([GgufRow(seat, tokens[:100], 0, 1)])
        rows = [GgufRow(seat, tokens[100:102], 100, 2)] + ([GgufRow(other, tokens[700 : 700 + neighbour], 0, 1)] if neighbour else [])
        outputs = [_one_pass(model, rows) if one_pass else model.decode(rows)[0]]
        outputs += [model.decode([GgufRow(seat, tokens[p : p + 2], p, 2)])[0] for p in range(102, 120, 2)]
        return outputs
    finally:
        for held in (seat, other, first):
            if held is not None:
                model.release(held)


def _one_pass(model: GgufModel, rows: list[GgufRow]) -> torch.Tensor:
    """Every row's tokens in one llama_decode (the packing before gguf_passes.py); the first row's logits."""
    logits: list[list[torch.Tensor]] = [[] for _ in rows]
    entries = [
        Entry(index, row.seat.seq_id, row.start + offset, token_id, offset >= len(row.input_ids) - row.num_logits)
        for index, row in enumerate(rows)
        for offset, token_id in enumerate(row.input_ids)
    ]
    with model._lock:  # a measurement of the engine's own pass
        model._decode_chunk(entries, logits)
    return torch.stack(logits[0])


def _largest_difference(alone: list[torch.Tensor], other: list[torch.Tensor]) -> float:
    return max(float((a - b).abs().max()) for a, b in zip(alone, other, strict=True))


def _report(model: GgufModel) -> None:
    alone = _steps(model)
    for neighbour in (30, 61, 62, 100):
        one = _largest_difference(alone, _steps(model, neighbour, one_pass=True))
        planned = _largest_difference(alone, _steps(model, neighbour))
        print(f"  beside a {neighbour}-token prompt: one pass {one:.3f}, planned passes {planned:.3f}")
    for offset in (16, 32, 64, 96, 128, 256):
        print(f"  B's cells after {offset} of another session's: {_largest_difference(alone, _steps(model, offset=offset)):.3f}")


def _median_ms(model: GgufModel, lengths: list[int], repeats: int = 25) -> float:
    """The median ms of one decode of 4 sessions' rows of `lengths` tokens after 100 tokens of context."""
    tokens = _tokens(model)
    seats = [model.take_seat(200, 5) for _ in lengths]
    try:
        for index, seat in enumerate(seats):
            model.decode([GgufRow(seat, tokens[index * 50 : index * 50 + 100], 0, 1)])
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            model.decode([GgufRow(seat, tokens[100 : 100 + length], 100, length) for seat, length in zip(seats, lengths, strict=True)])
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1e3
    finally:
        for seat in seats:
            model.release(seat)


def _timing(model: GgufModel) -> None:
    shapes = {"4 verify blocks of 5": [5] * 4, "4 plain steps": [1] * 4, "2 steps and 2 blocks of 5": [1, 5, 1, 5], "1 plain step": [1]}
    print("  " + ", ".join(f"{name}: {_median_ms(model, lengths):.1f} ms" for name, lengths in shapes.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gguf")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--timing", action="store_true", help="also time decodes of each layout (run it alone)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; largest logit difference of B's steps against B alone")
    for per_session in (False, True):
        options = GgufOptions(threads=args.threads, context_tokens=4096, max_sequences=4, min_pass_tokens=2, per_session_kv=per_session)
        model = load_gguf(args.gguf, options)
        print("KV cells per session:" if per_session else "KV cells in one shared pool:")
        _report(model)
        if args.timing:
            _timing(model)
        model.close()


if __name__ == "__main__":
    main()
