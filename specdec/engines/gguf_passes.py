"""Which tokens of a llama.cpp decode go into which `llama_decode` call (a pass).

NOTE (batch invariance): llama.cpp on the CPU runs a pass of 64 tokens or more through other kernels than a
shorter one, whatever sequences the tokens belong to. Measured on SmolLM2 bf16 at 150 tokens of context: a
session's 2-token step gave bit-identical logits beside another session's 61-token prompt, and logits up to
0.28 apart beside a 62-token one (tests/specdec/engines/test_llama_cpp.py). So for a target, what kernels a
token runs through must follow from its own request, never from what else is in the pass:
- each row is cut where its positions cross a multiple of `max_tokens` (a prompt's chunks are then the same
  whatever ran beside it), and before its first scored token (a prompt's last token and any block after it);
- a piece of `many_tokens` or more (a prompt's chunk) is a pass of its own;
- shorter pieces (steps, verify blocks, short prompts and prompt tails) share passes of fewer than
  `many_tokens` tokens, whose rows are bit-identical whatever else they hold.
A draft needs none of this (its tokens only propose): its rows are packed into passes of `max_tokens`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

MANY_TOKENS = 64  # a pass this long runs llama.cpp's many-token kernels (measured; the module's NOTE)


class Entry(NamedTuple):
    """One token of a decode: its row's index, sequence, position, id, and whether its logits are read."""

    row: int
    seq_id: int
    position: int
    token_id: int
    wants_logits: bool


def plan_passes(
    rows: Sequence[Sequence[Entry]], max_tokens: int, *, invariant: bool, equal_rows: bool = False, many_tokens: int = MANY_TOKENS
) -> list[list[Entry]]:
    """The passes that decode `rows` (each row's entries in position order), each at most `max_tokens` long.

    With `invariant`, a token's pass length class (under or over `many_tokens`) depends on its row alone;
    each row's entries keep their order across passes. With `equal_rows`, a short pass holds pieces of one length
    from consecutive sequence ids, in order: llama.cpp splits any other decode of sessions in streams of their own
    (GgufOptions.per_session_kv) into passes of equal shares per run of ids, which can leave a lone token in a
    pass of its own (the one-token kernels)."""
    if not invariant:
        flat = [entry for row in rows for entry in row]
        return [flat[first : first + max_tokens] for first in range(0, len(flat), max_tokens)]
    passes: list[list[Entry]] = []
    filling: dict[int, list[Entry]] = {}  # the short passes being filled, by piece length (one key without equal_rows)
    if equal_rows:
        rows = sorted(rows, key=lambda row: row[0].seq_id)
    for row in rows:
        for piece in _pieces(row, max_tokens):
            # NOTE: a pass holding the row's earlier piece is decoded first (and a row has one piece in a pass)
            for key in [key for key, entries in filling.items() if any(entry.row == piece[0].row for entry in entries)]:
                passes.append(filling.pop(key))
            if len(piece) >= many_tokens:
                passes.append(piece)
                continue
            key = len(piece) if equal_rows else 0
            if len(filling.get(key, ())) + len(piece) >= many_tokens or (equal_rows and not _next_in_run(filling.get(key), piece)):
                passes.append(filling.pop(key))
            filling.setdefault(key, []).extend(piece)
    passes.extend(filling.values())
    return passes


def _next_in_run(entries: list[Entry] | None, piece: list[Entry]) -> bool:
    """Whether `piece` may join the pass `entries` as the next stream: llama.cpp decodes streams in one pass only
    where their sequence ids are consecutive and in order (llama_batch_allocr::split_equal)."""
    return not entries or entries[-1].seq_id + 1 == piece[0].seq_id


def _pieces(row: Sequence[Entry], max_tokens: int) -> list[list[Entry]]:
    """`row` cut before every position that is a multiple of `max_tokens`, and before its first scored token.

    NOTE: a session's first pass may hold its prompt alone or the prompt and a draft block, as the draft's timing
    has it; cut there, a prompt's last token and the block after it run in a short pass either way."""
    pieces: list[list[Entry]] = []
    for index, entry in enumerate(row):
        first_scored = entry.wants_logits and index > 0 and not row[index - 1].wants_logits
        if not pieces or entry.position % max_tokens == 0 or first_scored:
            pieces.append([])
        pieces[-1].append(entry)
    return pieces
