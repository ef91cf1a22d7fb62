"""Sampling transforms: logits -> the processed distribution that decoding samples from.

Target-only decoding, the drafters and the verifier all call `processed_probs`, so the target
distribution p that speculative decoding must reproduce is defined in exactly one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from pydantic import BaseModel, ConfigDict

from specdec.fields import MinP, Temperature, TopK, TopP


class SamplingParams(BaseModel):
    """Per-request sampling parameters; temperature 0 means greedy."""

    model_config = ConfigDict(frozen=True)

    temperature: Temperature = 1.0
    top_p: TopP = 1.0
    top_k: TopK = 0
    min_p: MinP = 0.0

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


def processed_probs(
    logits: torch.Tensor,  # [..., vocab]
    params: SamplingParams,
) -> torch.Tensor:  # [..., vocab], rows sum to 1
    """Apply temperature, top-k, top-p and min-p, then softmax.

    Greedy (temperature 0) returns the one-hot distribution of the argmax, so that every
    acceptance rule sees a well-defined target distribution.
    """
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    if params.is_greedy:
        one_hot = torch.zeros_like(logits)
        return one_hot.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    # Shifted so the largest logit is 0, and the temperature kept representable in the logits' dtype:
    # a tiny temperature (say 1e-300) then sends the others to -inf, instead of inf - inf or 0 / 0 = NaN.
    temperature = max(params.temperature, torch.finfo(logits.dtype).tiny)
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if params.top_k > 0:
        logits = _mask_outside_top_k(logits, params.top_k)
    if params.top_p < 1.0:
        logits = _mask_outside_top_p(logits, params.top_p)
    probs = torch.softmax(logits, dim=-1)
    if params.min_p > 0.0:
        probs = _mask_below_min_p(probs, params.min_p)
    return probs


def _mask_outside_top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    if top_k >= logits.shape[-1]:
        return logits
    kth_largest = torch.topk(logits, top_k, dim=-1).values[..., -1:]
    # NOTE: ties with the k-th value are kept, so the kept set never depends on sort stability.
    return logits.masked_fill(logits < kth_largest, float("-inf"))


def _mask_outside_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_logits, sorted_ids = torch.sort(logits, dim=-1, descending=True)
    sorted_probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    # NOTE: a token is kept while the mass strictly before it is < top_p, so the kept set is the
    # smallest with mass >= top_p. The most probable token is kept explicitly: a top_p below the
    # dtype's smallest number (1e-46 in float32) compares as 0 and would otherwise drop every token.
    drop_sorted = mass_before >= top_p
    drop_sorted[..., 0] = False
    drop = torch.zeros_like(drop_sorted).scatter_(-1, sorted_ids, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def _mask_below_min_p(probs: torch.Tensor, min_p: float) -> torch.Tensor:
    threshold = min_p * probs.amax(dim=-1, keepdim=True)
    kept = probs.masked_fill(probs < threshold, 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)


class SparseDistribution(NamedTuple):
    """A distribution over a few token ids; every id outside `token_ids` has probability 0.

    NOTE: rows of one tensor may have come from drafters of different widths (a looked-up block's
    point mass is 1 wide, a model's q `draft_top_k` wide): `concat_sparse` pads the narrower ones
    with entries of probability 0, which `densify` adds as nothing.
    """

    token_ids: torch.Tensor  # [..., n] int64
    probs: torch.Tensor  # [..., n], rows sum to 1


def sparse_top_k(
    probs: torch.Tensor,  # [..., vocab]
    draft_top_k: int,
) -> SparseDistribution:  # [..., min(draft_top_k, vocab)]
    """The drafter's sampling distribution truncated to its top `draft_top_k` and renormalised.

    The drafter samples its candidate from exactly this sparse distribution and sends it to
    the verifier, which keeps rejection sampling exact for any vocabulary size.
    """
    top = torch.topk(probs, min(draft_top_k, probs.shape[-1]), dim=-1)
    return SparseDistribution(top.indices, top.values / top.values.sum(dim=-1, keepdim=True))


def densify(sparse: SparseDistribution, vocab_size: int) -> torch.Tensor:  # [..., vocab]
    """Scatter a sparse distribution into a dense one (missing ids have probability 0)."""
    probs = sparse.probs
    dense = torch.zeros(*probs.shape[:-1], vocab_size, dtype=probs.dtype, device=probs.device)
    return dense.scatter_add_(-1, sparse.token_ids.long(), probs)


def concat_sparse(parts: Sequence[SparseDistribution]) -> SparseDistribution:  # [sum of k, widest n]
    """The rows of `parts` ([k_i, n_i] each) one after another, padded to the widest.

    A padding entry repeats its row's first id with probability 0, so it is a valid id and every row
    densifies to exactly the distribution it had: the rejection math sees the same q.
    """
    width = max(part.token_ids.shape[-1] for part in parts)
    padded = [_padded(part, width) for part in parts]
    return SparseDistribution(torch.cat([part.token_ids for part in padded]), torch.cat([part.probs for part in padded]))


def _padded(sparse: SparseDistribution, width: int) -> SparseDistribution:  # [k, width]
    missing = width - sparse.token_ids.shape[-1]
    if missing == 0:
        return sparse
    rows = sparse.token_ids.shape[0]
    return SparseDistribution(
        torch.cat([sparse.token_ids, sparse.token_ids[:, :1].expand(rows, missing)], dim=-1),
        torch.cat([sparse.probs, sparse.probs.new_zeros(rows, missing)], dim=-1),
    )


def sparse_rows(sparse: SparseDistribution) -> list[tuple[list[int], list[float]]]:
    """Each row as (ids, probs) without its entries of probability 0 (padding among them): no id twice."""
    rows = []
    for token_ids, probs in zip(sparse.token_ids.tolist(), sparse.probs.tolist()):
        kept = [(token_id, prob) for token_id, prob in zip(token_ids, probs) if prob > 0.0]
        rows.append(([token_id for token_id, _ in kept], [prob for _, prob in kept]))
    return rows
