"""Proto messages -> the core's types (SamplingParams, Penalties, candidate blocks with their q), with
validation that names the offending field; blocks -> proto. Torch: the model services only."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from pydantic import ValidationError

from specdec.drafters.base import DraftBlock
from specdec.enums import TokenSource
from specdec.errors import InvalidRequestError, check_token_ids, field_path
from specdec.fields import PENALTIES, SAMPLING
from specdec.penalties import Penalties
from specdec.sampling import SamplingParams, SparseDistribution, concat_sparse, sparse_rows
from specdec.serving.rpc.convert import present_values, source_to_proto
from specdec.tree import check_parents
from specdec.v1 import common_pb2

# What a drafter may say about its candidates (never TARGET: the target's tokens are the verifier's to name).
_CANDIDATE_SOURCE_FROM_PROTO = {
    common_pb2.TOKEN_SOURCE_UNSPECIFIED: TokenSource.DRAFT,
    **{source_to_proto(source): source for source in TokenSource if source is not TokenSource.TARGET},
}
Q_SUM_TOLERANCE = 1e-3


def sampling_from_proto(message: common_pb2.SamplingParams, field: str = "sampling") -> SamplingParams:
    try:
        return SamplingParams(**present_values(message, SAMPLING))
    except ValidationError as error:
        item = error.errors()[0]
        raise InvalidRequestError(field_path(item["loc"], field), item["msg"]) from error


def penalties_from_proto(message: common_pb2.Penalties, field: str = "penalties") -> Penalties:
    try:
        return Penalties(**present_values(message, PENALTIES), logit_bias=dict(message.logit_bias))
    except ValidationError as error:
        item = error.errors()[0]
        raise InvalidRequestError(f"{field}.{item['loc'][0]}", item["msg"]) from error


def block_to_proto(block: DraftBlock) -> common_pb2.CandidateBlock:
    message = common_pb2.CandidateBlock(
        token_ids=block.candidate_ids.tolist(),
        parent_indices=block.tree_parents or [],
        sources=[source_to_proto(source) for source in block.sources],
    )
    if block.draft_probs is not None:
        for token_ids, probs in sparse_rows(block.draft_probs):
            message.draft_probs.add(token_ids=token_ids, probs=probs)
    return message


def block_from_proto(message: common_pb2.CandidateBlock, vocab_size: int, needs_draft_probs: bool, field: str = "block") -> DraftBlock:
    """A candidate block, checked: ids in the vocabulary, where q is needed a valid q per candidate,
    and a known source per candidate when sources are given."""
    block = _candidates_from_proto(message, vocab_size, needs_draft_probs, field)
    if not message.sources:
        return block
    if len(message.sources) != len(block):
        raise InvalidRequestError(f"{field}.sources", f"{len(message.sources)} sources for {len(block)} candidates")
    unknown = next((value for value in message.sources if value not in _CANDIDATE_SOURCE_FROM_PROTO), None)
    if unknown is not None:
        raise InvalidRequestError(f"{field}.sources", f"{unknown} is not a drafter's source (DRAFT, LOOKUP or PREDICTION)")
    return replace(block, sources=tuple(_CANDIDATE_SOURCE_FROM_PROTO[value] for value in message.sources))


def _candidates_from_proto(message: common_pb2.CandidateBlock, vocab_size: int, needs_draft_probs: bool, field: str) -> DraftBlock:
    candidates = list(message.token_ids)
    check_token_ids(candidates, vocab_size, f"{field}.token_ids")
    if not candidates and not message.draft_probs and not message.parent_indices:
        return DraftBlock.empty()  # a target-only round (e.g. when the budget is 0)
    if message.parent_indices:
        return _tree_block(message, candidates, needs_draft_probs, field)
    if not needs_draft_probs:
        return DraftBlock(torch.tensor(candidates, dtype=torch.long))
    if len(message.draft_probs) != len(candidates):
        raise InvalidRequestError(f"{field}.draft_probs", f"{len(message.draft_probs)} distributions for {len(candidates)} candidates")
    rows = [
        _checked_distribution(dist, candidate, vocab_size, f"{field}.draft_probs[{index}]")
        for index, (dist, candidate) in enumerate(zip(message.draft_probs, candidates))
    ]
    return DraftBlock(torch.tensor(candidates, dtype=torch.long), _stack_ragged(rows))


def _tree_block(message: common_pb2.CandidateBlock, candidates: list[int], needs_draft_probs: bool, field: str) -> DraftBlock:
    parents = list(message.parent_indices)
    if needs_draft_probs:
        raise InvalidRequestError(f"{field}.parent_indices", "token trees are verified in greedy and coupled modes only, not rejection")
    if len(parents) != len(candidates):
        raise InvalidRequestError(f"{field}.parent_indices", f"{len(parents)} parents for {len(candidates)} candidates")
    check_parents(parents, f"{field}.parent_indices")
    return DraftBlock(torch.tensor(candidates, dtype=torch.long), tree_parents=parents)


def _checked_distribution(
    dist: common_pb2.SparseDistribution, candidate: int, vocab_size: int, field: str
) -> tuple[list[int], list[float]]:
    token_ids, probs = list(dist.token_ids), list(dist.probs)
    if not token_ids or len(token_ids) != len(probs):
        raise InvalidRequestError(
            field, f"needs as many probs as token_ids and at least one (got {len(token_ids)} ids, {len(probs)} probs)"
        )
    check_token_ids(token_ids, vocab_size, f"{field}.token_ids")
    if len(set(token_ids)) != len(token_ids):
        raise InvalidRequestError(f"{field}.token_ids", "duplicate token ids")
    if any(not math.isfinite(p) or p < 0 for p in probs):
        raise InvalidRequestError(f"{field}.probs", "probabilities must be finite and >= 0")
    if abs(sum(probs) - 1.0) > Q_SUM_TOLERANCE:
        raise InvalidRequestError(f"{field}.probs", f"probabilities sum to {sum(probs):.6f}, not 1 (tolerance {Q_SUM_TOLERANCE})")
    candidate_prob = probs[token_ids.index(candidate)] if candidate in token_ids else 0.0
    if candidate_prob <= 0:
        raise InvalidRequestError(field, f"the candidate {candidate} has q = 0: it cannot have been sampled from this q")
    return token_ids, probs


def _stack_ragged(rows: list[tuple[list[int], list[float]]]) -> SparseDistribution:
    return concat_sparse(
        [SparseDistribution(torch.tensor([ids], dtype=torch.long), torch.tensor([probs], dtype=torch.float64)) for ids, probs in rows]
    )
