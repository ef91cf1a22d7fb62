"""A model bound to one sequence's KV cache, with exact rollback to any prefix."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel


class CachedSequence:
    """The KV cache of a prefix of one token sequence.

    `advance(sequence)` feeds whatever part of `sequence` is not cached yet, first cropping the
    cache back to the longest prefix it shares with `sequence`. That single operation is both
    the rollback after a rejection (drop the rejected candidates) and the extension by the
    accepted / recovered / bonus tokens, for the target and for every model drafter.
    """

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.cached_ids: list[int] = []

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def truncate(self, length: int) -> None:
        """Keep the first `length` cached positions; the rest are freed."""
        surplus = len(self.cached_ids) - length
        if surplus > 0:
            # NOTE: transformers >= 5 crops by a negative count of tokens to remove.
            self.cache.crop(-surplus)
            del self.cached_ids[length:]

    @torch.inference_mode()
    def advance(self, sequence: Sequence[int], num_logits: int = 1) -> torch.Tensor:  # [num_logits, vocab]
        """Cache all of `sequence` and return the logits after its last `num_logits` tokens.

        Row i of the result is the model's next-token logits after sequence[len - num_logits + i].
        """
        if not 1 <= num_logits <= len(sequence):
            raise ValueError(f"num_logits must be in [1, {len(sequence)}], got {num_logits}")
        shared = _shared_prefix_length(self.cached_ids, sequence)
        # NOTE: the last `num_logits` tokens must be fed again even when cached: logits are not kept.
        keep = min(shared, len(sequence) - num_logits)
        self.truncate(keep)
        new_ids = list(sequence[keep:])
        input_ids = torch.tensor([new_ids], dtype=torch.long, device=self.device)
        output = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=num_logits)
        self.cached_ids.extend(new_ids)
        return output.logits[0, -num_logits:]

    def release(self) -> None:
        """Free the cache now rather than when the session is garbage collected."""
        self.cache = DynamicCache(config=self.model.config)
        self.cached_ids = []


def _shared_prefix_length(first: Sequence[int], second: Sequence[int]) -> int:
    limit = min(len(first), len(second))
    # NOTE: on the hot path (every draft token, every round) the cache almost always holds a
    # prefix of the sequence: one list comparison, in C, answers that without a Python loop.
    if list(first[:limit]) == list(second[:limit]):
        return limit
    for index in range(limit):
        if first[index] != second[index]:
            return index
    return limit
