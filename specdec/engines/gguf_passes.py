"""Which tokens of a llama.cpp decode go into which `llama_decode` call (a pass).

NOTE (batch invariance): llama.cpp on the CPU runs a pass of 64 tokens or more through other kernels than a
shorter one, whatever sequences the tokens belong to. Measured on SmolLM2 bf16 at 150 tokens of context: a
session's 2-token step gave bit-identical logits beside another session's 61-token prompt, and logits up to
0.28 apart beside a 62-token one (tests/specdec/engines/test_llama_cpp.py). So for a target, what kernels a
token runs through must follow from its own request, never from what else is in the pass:
- each row is cut where its positions cross a multiple of `max_tokens` (a prompt's chunks are then the same
  whatever ran beside it);
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


def plan_passes(rows: Sequence[Sequence[Entry]], max_tokens: int, *, invariant: bool, many_tokens: int = MANY_TOKENS) -> list[list[Entry]]:
    """The passes that decode `rows` (each row's entries in position order), each at most `max_tokens` long.

    With `invariant`, a token's pass length class (under or over `many_tokens`) depends on its row alone;
    each row's entries keep their order across passes."""
    if not invariant:
        flat = [entry for row in rows for entry in row]
        return [flat[first : first + max_tokens] for first in range(0, len(flat), max_tokens)]
    passes: list[list[Entry]] = []
    shared: list[Entry] = []  # the short pass being filled
    for row in rows:
        for piece in _pieces(row, max_tokens):
            if len(piece) >= many_tokens:
                if shared and shared[-1].row == piece[0].row:  # NOTE: the row's earlier piece is decoded first
                    passes.append(shared)
                    shared = []
                passes.append(piece)
                continue
            if len(shared) + len(piece) >= many_tokens:
                passes.append(shared)
                shared = []
            shared.extend(piece)
    if shared:
        passes.append(shared)
    return passes


def _pieces(row: Sequence[Entry], max_tokens: int) -> list[list[Entry]]:
    """`row` cut before every position that is a multiple of `max_tokens`."""
    pieces: list[list[Entry]] = []
    for entry in row:
        if not pieces or entry.position % max_tokens == 0:
            pieces.append([])
        pieces[-1].append(entry)
    return pieces
