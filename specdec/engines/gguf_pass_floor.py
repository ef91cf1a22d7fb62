"""Whether a llama.cpp build scores a one-token pass as it scores longer ones: a target pads lone tokens only where not.

NOTE: batch invariance (llama_cpp.py's NOTE) needs a position's logits to be the same whether its pass holds one token
or several. llama.cpp built with llamafile's sgemm (`LLAMAFILE = 1` in its system info, the default) runs passes of two
tokens or more through sgemm and one-token passes through its dot products, which round differently, so a target's
lone tokens are padded to two (1.7-2x a one-token step on bf16). Built as `make install` builds it (sgemm only for
passes of 64 tokens or more, patches/llama-cpp-sgemm-many-tokens.patch) or without sgemm (-DGGML_LLAMAFILE=OFF),
every pass under 64 tokens runs the dot products, and a one-token pass scores bit-identically
(benchmarks/kernel_classes.py). This is measured at load rather than read from the build's features: repacked
quantizations, GPU kernels and flash attention's one-token path (cells split past 512) differ by type and length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# (sequence id, position, token id, logits wanted) per token of one llama_decode
Decode = Callable[[Sequence[tuple[int, int, int, bool]]], list[np.ndarray]]
PROBE_LENGTHS = (24, 520)  # tokens of context before the compared position; past 512, flash attention splits the cells
_PASS_TOKENS = 3  # the longer pass the one-token pass is compared with (a verify block's shape)


def probe_ids(count: int, offset: int, vocab_size: int) -> list[int]:
    """Ordinary token ids (past the special ones at the start of a vocabulary), a fixed pattern with no n-gram repeated
    (also the load-time step timings', specdec/drafting_ceiling.py)."""
    low = min(300, vocab_size // 4)
    span = max(1, min(vocab_size, 4300) - low)
    return [low + (37 * index + offset) % span for index in range(count)]


def one_token_passes_match(
    decode: Decode, clear: Callable[[int, int], None], vocab_size: int, session_cells: int, two_sequences: bool
) -> bool:
    """Whether a position's logits in a one-token pass equal its logits in a `_PASS_TOKENS`-token pass, and beside another
    sequence's token, at each probe length that fits `session_cells`. Uses sequences 0 (and 1) and clears them after;
    `clear(seq_id, position)` removes a sequence's cells from `position` on."""
    try:
        for length in (n for n in PROBE_LENGTHS if n + _PASS_TOKENS + 1 <= session_cells):
            context, new = probe_ids(length, 0, vocab_size), probe_ids(_PASS_TOKENS, 11, vocab_size)
            for first in range(0, length, 256):
                decode([(0, first + i, token, False) for i, token in enumerate(context[first : first + 256])])
            alone = decode([(0, length, new[0], True)])[0]
            clear(0, length)
            longer = decode([(0, length + i, token, True) for i, token in enumerate(new)])[0]
            if not np.array_equal(alone, longer):
                return False
            if two_sequences:
                clear(0, length)
                decode([(1, 0, new[1], False), (1, 1, new[2], False)])
                beside = decode([(0, length, new[0], True), (1, 2, new[1], True)])[0]
                if not np.array_equal(alone, beside):
                    return False
            clear(0, 0)
            clear(1, 0)
        return True
    finally:
        clear(0, 0)
        clear(1, 0)
