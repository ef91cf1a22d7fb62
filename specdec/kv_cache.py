"""A model bound to one sequence's KV cache, with exact rollback to any prefix."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel

from specdec.errors import SpecdecError

TREE_NEEDS_PACKED = (
    "speculative.verification=tree needs specdec's packed forward pass, which supports the Llama "
    "family (llama, mistral and qwen2 without sliding windows); use verification: sequential for this model"
)


class PrefixCache:
    """The KV cache of a prefix of one token sequence.

    `advance(sequence)` feeds whatever part of `sequence` is not cached yet, first cutting the
    cache back to the longest prefix it shares with `sequence`. That single operation is both
    the rollback after a rejection (drop the rejected candidates) and the extension by the
    accepted / recovered / bonus tokens, for the target and for every model drafter.
    Subclasses store the cache: `CachedSequence` in a Hugging Face cache, `BatchedSequence`
    (specdec.batching) in preallocated tensors whose passes are shared with other sessions.
    """

    def __init__(self) -> None:
        self.cached_ids: list[int] = []
        # A token tree (specdec.tree) cached after the sequence: its nodes are the last
        # len(tree_parents) entries of cached_ids, in node order. None: no tree is cached.
        self.tree_parents: list[int] | None = None

    @torch.inference_mode()
    def advance(self, sequence: Sequence[int], num_logits: int = 1) -> torch.Tensor:  # [num_logits, vocab]
        """Cache all of `sequence` and return the logits after its last `num_logits` tokens.

        Row i of the result is the model's next-token logits after sequence[len - num_logits + i].
        """
        if not 1 <= num_logits <= len(sequence):
            raise ValueError(f"num_logits must be in [1, {len(sequence)}], got {num_logits}")
        self._drop_tree()  # NOTE: a tree's nodes are no sequence: sibling slots would pass for a prefix
        shared = _shared_prefix_length(self.cached_ids, sequence)
        # NOTE: the last `num_logits` tokens must be fed again even when cached: logits are not kept.
        keep = min(shared, len(sequence) - num_logits)
        self.truncate(keep)
        new_ids = list(sequence[keep:])
        logits = self._feed(new_ids, keep, num_logits)
        self.cached_ids.extend(new_ids)
        return logits

    @torch.inference_mode()
    def advance_tree(self, prefix: Sequence[int], node_ids: Sequence[int], parents: Sequence[int]) -> torch.Tensor:  # [1 + n, vocab]
        """Cache `prefix`, then the tree of `node_ids` after it, in one pass (the target's verification).

        Row 0 of the result is the logits after prefix[-1]; row i + 1 the logits after node i given
        the prefix and node i's ancestors.
        """
        self._drop_tree()
        keep = min(_shared_prefix_length(self.cached_ids, prefix), len(prefix) - 1)
        self.truncate(keep)
        chain_ids = list(prefix[keep:])
        logits = self._feed_tree(chain_ids + list(node_ids), keep, 1 + len(node_ids), list(parents))
        self.cached_ids.extend(chain_ids + list(node_ids))
        self.tree_parents = list(parents)
        return logits

    @torch.inference_mode()
    def grow_tree(self, node_ids: Sequence[int], parents: Sequence[int]) -> torch.Tensor:  # [n, vocab]
        """Feed more nodes of the cached tree (a new tree right after the cached sequence if none is cached).

        `parents` index all the tree's nodes, the cached ones first; returns the logits after each new node.
        """
        all_parents = [*(self.tree_parents or []), *parents]
        logits = self._feed_tree(list(node_ids), len(self.cached_ids), len(node_ids), all_parents)
        self.cached_ids.extend(node_ids)
        self.tree_parents = all_parents
        return logits

    @torch.inference_mode()
    def keep_path(self, path: Sequence[int]) -> None:
        """Keep the cached tree nodes of `path` (a root path) as a plain sequence; drop the rest of the tree.

        Path nodes the cache does not hold (a draft never feeds its deepest nodes) are left to the next advance.
        """
        if self.tree_parents is None:
            return
        tree_start = len(self.cached_ids) - len(self.tree_parents)
        cached_path = []
        for node in path:
            if node >= len(self.tree_parents):
                break
            cached_path.append(node)
        path_ids = [self.cached_ids[tree_start + node] for node in cached_path]
        self._compact([tree_start + node for node in cached_path], tree_start)
        del self.cached_ids[tree_start:]
        self.cached_ids.extend(path_ids)
        self.tree_parents = None

    def _drop_tree(self) -> None:
        if self.tree_parents is not None:
            tree_start = len(self.cached_ids) - len(self.tree_parents)
            self.tree_parents = None
            self.truncate(tree_start)

    def truncate(self, length: int) -> None:
        """Keep the first `length` cached positions; the rest are dropped."""
        surplus = len(self.cached_ids) - length
        if surplus > 0:
            self._drop(surplus)
            del self.cached_ids[length:]

    def _feed(self, new_ids: list[int], start: int, num_logits: int) -> torch.Tensor:  # [num_logits, vocab]
        raise NotImplementedError

    def _drop(self, num_tokens: int) -> None:
        raise NotImplementedError

    def _feed_tree(self, new_ids: list[int], start: int, num_logits: int, tree_parents: list[int]) -> torch.Tensor:  # [num_logits, vocab]
        """Like _feed; the last len(tree_parents) cache slots after the pass hold a tree (PackedRow.tree_parents)."""
        raise SpecdecError(TREE_NEEDS_PACKED)

    def _compact(self, slots: list[int], start: int) -> None:
        raise SpecdecError(TREE_NEEDS_PACKED)

    def release(self) -> None:
        """Free the cache now rather than when the session is garbage collected."""
        raise NotImplementedError


class CachedSequence(PrefixCache):
    """A prefix cache in a Hugging Face `DynamicCache`: any architecture, one session per pass."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model
        self.cache = DynamicCache(config=model.config)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _drop(self, num_tokens: int) -> None:
        # NOTE: transformers >= 5 crops by a negative count of tokens to remove.
        self.cache.crop(-num_tokens)

    def _feed(self, new_ids: list[int], start: int, num_logits: int) -> torch.Tensor:
        input_ids = torch.tensor([new_ids], dtype=torch.long, device=self.device)
        output = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=num_logits)
        return output.logits[0, -num_logits:]

    def release(self) -> None:
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
