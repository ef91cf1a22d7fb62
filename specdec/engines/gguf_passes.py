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
# NOTE: patches/llama-cpp-sgemm-many-tokens.patch (make install) turns sgemm on at the same 64 tokens.
PADDING = -1  # the row index of a token that only lengthens a pass; its cells are removed after the pass


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
    each row's entries keep their order across passes. With `equal_rows`, a short pass holds pieces of consecutive
    sequence ids, in order, each padded to the longest (PADDING entries after its last token): llama.cpp splits any
    other decode of sessions in streams of their own (GgufOptions.per_session_kv) into passes of equal shares per
    run of ids, which can leave a lone token in a pass of its own (the one-token kernels)."""
    if not invariant:
        flat = [entry for row in rows for entry in row]
        return [flat[first : first + max_tokens] for first in range(0, len(flat), max_tokens)]
    passes: list[list[Entry]] = []
    filling: list[list[Entry]] = []  # the pieces of the short pass being filled

    def flush() -> None:
        if filling:
            passes.append(_padded(filling) if equal_rows else [entry for piece in filling for entry in piece])
            filling.clear()

    for row in sorted(rows, key=lambda row: row[0].seq_id) if equal_rows else rows:
        for piece in _pieces(row, max_tokens):
            if any(earlier[0].row == piece[0].row for earlier in filling):
                flush()  # NOTE: the row's earlier piece is decoded first
            if len(piece) >= many_tokens:
                passes.append(piece)
            else:
                if not _fits(filling, piece, equal_rows, many_tokens):
                    flush()
                filling.append(piece)
    flush()
    return passes


def _fits(filling: list[list[Entry]], piece: list[Entry], equal_rows: bool, many_tokens: int) -> bool:
    """Whether `piece` may join the short pass of `filling` and keep it short (and, with equal rows, one run of ids)."""
    if not filling:
        return True
    if not equal_rows:
        return sum(map(len, filling)) + len(piece) < many_tokens
    consecutive = filling[-1][0].seq_id + 1 == piece[0].seq_id  # llama_batch_allocr::split_equal's runs
    return consecutive and (len(filling) + 1) * max(len(piece), *map(len, filling)) < many_tokens


def _padded(pieces: list[list[Entry]]) -> list[Entry]:
    """The pieces as one pass, each lengthened to the longest by padding tokens after its last (no logits read)."""
    longest = max(map(len, pieces))
    return [
        entry
        for piece in pieces
        for entry in (
            *piece,
            *(Entry(PADDING, piece[-1].seq_id, piece[-1].position + 1 + k, 0, False) for k in range(longest - len(piece))),
        )
    ]


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


def long_positions(first_scored: int, max_tokens: int, many_tokens: int = MANY_TOKENS) -> bytes:
    """Per position of a prompt decoded from its start, up to its first scored token: 1 where the position runs in
    a pass of `many_tokens` or more (its piece, as `_pieces` cuts it, is that long), else 0."""
    flags = bytearray(first_scored)
    for start in range(0, first_scored, max_tokens):
        end = min(start + max_tokens, first_scored)
        if end - start >= many_tokens:
            flags[start:end] = b"\x01" * (end - start)
    return bytes(flags)
