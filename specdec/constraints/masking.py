"""Allowed-token masks applied to logits: pure functions over tensors, testable without a grammar.

A grammar engine reports the allowed tokens as a bitmask (32 tokens per int32 word, bit i of word
w = token 32 * w + i); `unpack_bitmask` turns it into a bool mask, `mask_logits` sends every
disallowed token's logit to -inf, before temperature, top-k/top-p and the acceptance rule.
"""

from __future__ import annotations

import torch


def unpack_bitmask(
    bitmask: torch.Tensor,  # [..., ceil(vocab / 32)] int32
    vocab_size: int,
) -> torch.Tensor:  # [..., vocab_size] bool
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    # NOTE: >> on int32 is arithmetic (a negative word shifts in ones); & 1 keeps only the bit wanted.
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1  # [..., words, 32]
    return bits.flatten(-2)[..., :vocab_size].bool()


def mask_logits(
    logits: torch.Tensor,  # [n, vocab]
    allowed: torch.Tensor,  # [n, vocab] bool, on logits' device
) -> torch.Tensor:  # [n, vocab], disallowed tokens at -inf
    """The logits with every token the grammar refuses at -inf.

    NOTE: a row allowing nothing (or only tokens already at -inf) would make softmax NaN; that is a
    bug upstream (the engine always allows at least an end-of-sequence token), so it raises here
    instead of sampling from NaN.
    """
    masked = logits.masked_fill(~allowed, float("-inf"))
    dead = ~torch.isfinite(masked).any(dim=-1) | torch.isnan(masked).any(dim=-1)  # [n]
    if bool(dead.any()):
        rows = dead.nonzero().flatten().tolist()
        raise ValueError(f"the grammar mask leaves no finite logit at rows {rows}")
    return masked
