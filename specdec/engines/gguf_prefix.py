"""The last finished sequence's KV cells, kept for the next session that begins the same way (prompt caching).

Chat requests share their start (the template's system prompt), and a conversation's next turn repeats
the whole previous turn. A session that ends leaves up to `max_tokens` of its sequence in a llama.cpp
sequence of the store's own; a new session whose prompt starts with those tokens gets their cells by
`llama_memory_seq_cp` (in a unified KV cache the cells are shared, not copied) and decodes only the rest.
llama.cpp's own server does the same per slot (`cache_prompt`).

NOTE (lossless): on the tiny float32 model a position's KV cells are bit-identical however the prefix was split
into decodes and whether they were computed here or shared (tests/specdec/engines/test_gguf_prefix.py); on
SmolLM2 bf16 a shared prefix is not, and a seeded request's text changed with what ran before it. So only
drafts use this store (a draft's candidates never change an output); a target, whose sessions have cells of their
own, keeps copies instead, taken only where bit-identical (gguf_prompt_cache.py).

NOTE: every method runs under the model's lock (GgufModel._lock), as every decode does.
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_SHARED_TOKENS = 4  # a shorter match saves less than its bookkeeping
DEFAULT_PROMPT_CACHE_TOKENS = 1024  # a few turns of a chat; 23 KiB a token for the default 135M model


class GgufPrefixStore:
    def __init__(self, lib, memory, seq_id: int, max_tokens: int) -> None:
        self.lib = lib
        self.memory = memory
        self.seq_id = seq_id  # the store's own sequence: its cells stay while sessions come and go
        self.max_tokens = max_tokens
        self.token_ids: list[int] = []
        self.reused_tokens = 0  # prefill tokens the store has saved so far

    def keep(self, seat, token_ids: Sequence[int]) -> None:
        """Hold the first `max_tokens` cells of the finished `seat` (holding `token_ids`) in place of the last ones kept."""
        kept = list(token_ids[: min(self.max_tokens, seat.length)])
        if len(kept) < MIN_SHARED_TOKENS:
            return
        self.lib.llama_memory_seq_rm(self.memory, self.seq_id, 0, -1)
        self.lib.llama_memory_seq_cp(self.memory, seat.seq_id, self.seq_id, 0, len(kept))
        self.token_ids = kept

    def attach(self, seat, token_ids: Sequence[int], limit: int) -> int:
        """Give the empty `seat` the cells of the longest kept prefix of `token_ids`, at most `limit`
        of them (the tokens whose logits are wanted must still be decoded); returns how many it got."""
        shared = 0
        for kept, token_id in zip(self.token_ids[:limit], token_ids, strict=False):
            if kept != token_id:
                break
            shared += 1
        if shared < MIN_SHARED_TOKENS:
            return 0
        self.lib.llama_memory_seq_cp(self.memory, self.seq_id, seat.seq_id, 0, shared)
        self.reused_tokens += shared
        return shared

    def clear(self) -> None:
        self.lib.llama_memory_seq_rm(self.memory, self.seq_id, 0, -1)
        self.token_ids = []
