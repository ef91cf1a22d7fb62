"""Finished sessions' KV cells, copied to host memory, for a later session whose prompt begins the same way.

A conversation's next turn repeats the whole previous one, and agent requests repeat their tools and instructions:
llama.cpp's own server keeps a slot's cells for that (`cache_prompt`). A session that ends leaves a copy of its
sequence (`llama_state_seq_get_data`, about a millisecond per thousand tokens), and a new session whose prompt
starts alike gets the copy back into its own cells (`llama_state_seq_set_data`) and decodes only the rest. Copies,
not cells shared in place: a target's sessions have cells of their own (GgufOptions.per_session_kv), and a copy
held in host memory takes none of the KV cache's cells from running sessions.

NOTE (lossless, `exact`: a target's passes planned for batch invariance): a position's cells depend on the class of
pass that computed them: llama.cpp runs a pass of 64 tokens or more through other kernels (gguf_passes.py). A kept
cell is taken only where its class is the one a fresh decode of the new prompt gives that position
(`reusable_prefix`), and the first pass after the taken cells is cut so that it runs in that class too. Then every
logit equals the fresh decode's bit for bit, and a greedy or seeded text does not depend on what was served before
(measured on SmolLM2 bf16: 0.0 difference; a kept answer taken where a fresh decode would run a long pass moved a
logit by 0.21; tests/specdec/engines/test_gguf_prompt_cache.py). A draft takes all of the shared start.

NOTE: every method runs under the model's lock (GgufModel._lock), as every decode does.
"""

from __future__ import annotations

import ctypes
import functools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count

import numpy as np

from specdec.engines.gguf_passes import MANY_TOKENS, long_positions

MIN_SHARED_TOKENS = 4  # a shorter match saves less than its bookkeeping
DEFAULT_PROMPT_CACHE_TOKENS = 16384  # of a draft: 23 KiB a token of host memory for the default 135M model


# a session's prompt is looked up against every kept sequence: its fresh classes are worked out once
_fresh_long_positions = functools.lru_cache(maxsize=8)(long_positions)


def reusable_prefix(kept_long: bytes, matched: int, first_scored: int, max_tokens: int, many_tokens: int = MANY_TOKENS) -> int:
    """How many of a kept sequence's first `matched` cells (the tokens it shares with a new prompt whose first scored
    token is at `first_scored`) the new session may take, so that it scores as if it decoded its prompt from the start.

    `kept_long` is, per kept position, 1 where a pass of `many_tokens` or more computed it. A position is taken only
    where that class is the one a fresh decode gives it, and never so far into a piece that the rest of the piece, the
    new session's first pass, would run in the other class."""
    fresh = _fresh_long_positions(first_scored, max_tokens, many_tokens)
    reused = min(matched, first_scored, len(kept_long))
    if kept_long[:reused] != fresh[:reused]:  # compared whole first (in C): a position at a time only where they differ
        reused = next(position for position in range(reused) if kept_long[position] != fresh[position])
    if reused % max_tokens and reused < first_scored and fresh[reused]:
        piece_end = min(reused - reused % max_tokens + max_tokens, first_scored)
        reused = min(reused, piece_end - many_tokens)  # the rest of a long piece stays long (at least its start)
    return reused


@dataclass
class _Kept:
    token_ids: np.ndarray  # int32, the kept sequence
    long: bytes  # per position: 1 where a pass of many tokens computed its cells
    state: ctypes.Array  # llama.cpp's copy of the sequence's cells


class GgufPromptCache:
    """Up to `max_tokens` tokens of finished sequences (the least recently used go first)."""

    def __init__(self, lib, context, memory, max_tokens: int, pass_tokens: int, exact: bool) -> None:
        self.lib = lib
        self.context = context
        self.memory = memory
        self.max_tokens = max_tokens
        self.pass_tokens = pass_tokens  # where gguf_passes cuts a prompt (GgufModel's tokens per llama_decode)
        self.exact = exact  # cells only where bit-identical (a target's); else all the shared start (a draft's)
        self.kept: OrderedDict[int, _Kept] = OrderedDict()
        self._keys = count()
        self.reused_tokens = 0  # prefill tokens the cache has saved so far

    @property
    def held_tokens(self) -> int:
        return sum(len(kept.token_ids) for kept in self.kept.values())

    def keep(self, seat, token_ids: Sequence[int]) -> None:
        """Copy the cells of the finished `seat` (holding `token_ids`, or their start) unless a kept one holds them."""
        length = min(len(token_ids), seat.length, self.max_tokens)
        if length < MIN_SHARED_TOKENS:
            return
        ids = np.asarray(token_ids[:length], dtype=np.int32)
        for key, kept in list(self.kept.items()):
            shared = _shared_prefix(kept.token_ids, ids)
            if shared == length:
                return  # a kept sequence begins with all of this one
            if shared == len(kept.token_ids):
                del self.kept[key]  # this one begins with all of that one (its conversation's earlier turn)
        self.lib.llama_memory_seq_rm(self.memory, seat.seq_id, length, -1)
        size = self.lib.llama_state_seq_get_size(self.context, seat.seq_id)
        state = (ctypes.c_uint8 * size)()
        if self.lib.llama_state_seq_get_data(self.context, state, size, seat.seq_id) != size:
            return
        self.kept[next(self._keys)] = _Kept(ids, bytes(seat.long[:length]), state)
        while self.held_tokens > self.max_tokens:
            self.kept.popitem(last=False)

    def attach(self, seat, token_ids: Sequence[int], limit: int) -> int:
        """Give the empty `seat` the cells of the kept sequence it may take most of (at most `limit`: the tokens whose
        logits are wanted are decoded); returns how many it holds."""
        ids = np.asarray(token_ids, dtype=np.int32)
        best_key, best = None, 0
        for key, kept in self.kept.items():
            matched = _shared_prefix(kept.token_ids, ids)
            if matched <= best:
                continue
            reused = reusable_prefix(kept.long, matched, limit, self.pass_tokens) if self.exact else min(matched, limit)
            if reused > best:
                best_key, best = key, reused
        if best < MIN_SHARED_TOKENS:
            return 0
        kept = self.kept[best_key]
        self.kept.move_to_end(best_key)
        if self.lib.llama_state_seq_set_data(self.context, kept.state, len(kept.state), seat.seq_id) == 0:
            self.lib.llama_memory_seq_rm(self.memory, seat.seq_id, 0, -1)
            return 0
        self.lib.llama_memory_seq_rm(self.memory, seat.seq_id, best, -1)
        if self.exact:
            seat.long[:best] = kept.long[:best]
        seat.length = best
        self.reused_tokens += best
        return best

    def clear(self) -> None:
        self.kept.clear()


def _shared_prefix(first: np.ndarray, second: np.ndarray) -> int:
    length = min(len(first), len(second))
    differ = np.flatnonzero(first[:length] != second[:length])
    return int(differ[0]) if len(differ) else length
