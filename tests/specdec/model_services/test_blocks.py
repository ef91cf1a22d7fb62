"""Proto -> the core's types: candidate blocks with their q and sources, sampling parameters."""

from __future__ import annotations

import math

import pytest
import torch

from specdec.drafters.base import DraftBlock
from specdec.enums import TokenSource
from specdec.errors import InvalidRequestError
from specdec.model_services.blocks import block_from_proto, block_to_proto, sampling_from_proto
from specdec.sampling import SamplingParams, SparseDistribution, concat_sparse, densify
from specdec.serving.rpc.convert import sampling_to_proto
from specdec.v1 import common_pb2

VOCAB = 16


def _block(candidates, rows) -> common_pb2.CandidateBlock:
    block = common_pb2.CandidateBlock(token_ids=candidates)
    for ids, probs in rows:
        block.draft_probs.add(token_ids=ids, probs=probs)
    return block


def _raises(message: common_pb2.CandidateBlock, field: str, vocab_size: int = VOCAB) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        block_from_proto(message, vocab_size, needs_draft_probs=True)
    assert caught.value.field == field
    assert str(caught.value).startswith(field)
    return caught.value


def test_valid_block_keeps_candidates_and_each_q():
    rows = [([3, 5], [0.25, 0.75]), ([7], [1.0]), ([1, 2, 9, 4], [0.1, 0.2, 0.3, 0.4])]
    block = block_from_proto(_block([5, 7, 9], rows), VOCAB, needs_draft_probs=True)
    assert block.candidate_ids.tolist() == [5, 7, 9]
    assert block.draft_probs.token_ids.shape == (3, 4)
    dense = densify(block.draft_probs, VOCAB)
    for row, (ids, probs) in zip(dense, rows):
        expected = torch.zeros(VOCAB, dtype=torch.float64)
        expected[ids] = torch.tensor(probs, dtype=torch.float64)
        assert torch.equal(row, expected)


def test_block_round_trips_through_block_to_proto():
    rows = [([3, 5], [0.25, 0.75]), ([7, 8], [0.5, 0.5])]
    block = block_from_proto(_block([5, 7], rows), VOCAB, needs_draft_probs=True)
    again = block_from_proto(block_to_proto(block), VOCAB, needs_draft_probs=True)
    assert again.candidate_ids.tolist() == [5, 7]
    assert torch.equal(densify(again.draft_probs, VOCAB), densify(block.draft_probs, VOCAB))


def test_a_block_joined_from_q_of_different_widths_passes_the_verifiers_checks():
    looked_up = SparseDistribution(torch.tensor([[5]]), torch.tensor([[1.0]], dtype=torch.float64))
    drafted = SparseDistribution(torch.tensor([[7, 2, 9]]), torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64))
    block = DraftBlock(torch.tensor([5, 7, 5]), concat_sparse([looked_up, drafted, looked_up]))
    message = block_to_proto(block)
    assert [list(dist.token_ids) for dist in message.draft_probs] == [[5], [7, 2, 9], [5]]  # no padding on the wire
    again = block_from_proto(message, VOCAB, needs_draft_probs=True)
    assert torch.equal(densify(again.draft_probs, VOCAB), densify(block.draft_probs, VOCAB))


def test_q_is_ignored_when_not_needed():
    malformed = _block([5, 6], [([5], [-3.0])])
    block = block_from_proto(malformed, VOCAB, needs_draft_probs=False)
    assert block.candidate_ids.tolist() == [5, 6] and block.draft_probs is None


@pytest.mark.parametrize("needs_draft_probs", [True, False])
def test_empty_block_is_valid(needs_draft_probs):
    # A round's budget can be 0 candidates (max_candidates = 0): the client then sends an empty block.
    block = block_from_proto(common_pb2.CandidateBlock(), VOCAB, needs_draft_probs)
    assert len(block) == 0
    assert block.draft_probs is None or block.draft_probs.probs.shape[0] == 0


def test_rejects_negative_probability():
    _raises(_block([5], [([5, 6], [1.5, -0.5])]), "block.draft_probs[0].probs")


def test_rejects_nan_probability():
    _raises(_block([5, 6], [([5], [1.0]), ([5, 6], [math.nan, 1.0])]), "block.draft_probs[1].probs")


def test_rejects_infinite_probability():
    _raises(_block([5], [([5, 6], [math.inf, 0.0])]), "block.draft_probs[0].probs")


def test_rejects_q_not_summing_to_one():
    error = _raises(_block([5], [([5, 6], [0.5, 0.4])]), "block.draft_probs[0].probs")
    assert "0.9" in str(error)


def test_accepts_sum_within_tolerance():
    block = block_from_proto(_block([5], [([5, 6], [0.5, 0.5004])]), VOCAB, needs_draft_probs=True)
    assert block.candidate_ids.tolist() == [5]


def test_rejects_zero_q_for_the_proposed_token():
    _raises(_block([5], [([5, 6], [0.0, 1.0])]), "block.draft_probs[0]")


def test_rejects_q_that_omits_the_proposed_token():
    _raises(_block([5], [([6, 7], [0.5, 0.5])]), "block.draft_probs[0]")


def test_rejects_duplicate_ids_in_q():
    _raises(_block([5], [([5, 5], [0.5, 0.5])]), "block.draft_probs[0].token_ids")


@pytest.mark.parametrize("bad_id", [VOCAB, -1])
def test_rejects_q_ids_outside_the_vocab(bad_id):
    _raises(_block([5], [([5, bad_id], [0.5, 0.5])]), "block.draft_probs[0].token_ids")


@pytest.mark.parametrize("needs_draft_probs", [True, False])
def test_rejects_candidate_outside_the_vocab(needs_draft_probs):
    with pytest.raises(InvalidRequestError) as caught:
        block_from_proto(_block([5, VOCAB], [([5], [1.0]), ([5], [1.0])]), VOCAB, needs_draft_probs)
    assert caught.value.field == "block.token_ids" and str(VOCAB) in str(caught.value)


@pytest.mark.parametrize("rows", [[], [([5], [1.0])], [([5], [1.0])] * 3])
def test_rejects_distribution_count_unlike_candidate_count(rows):
    _raises(_block([5, 5], rows), "block.draft_probs")


@pytest.mark.parametrize("ids,probs", [([5, 6], [1.0]), ([5], [0.5, 0.5]), ([], [])])
def test_rejects_ids_and_probs_of_different_lengths(ids, probs):
    _raises(_block([5], [(ids, probs)]), "block.draft_probs[0]")


def test_field_prefix_is_configurable():
    with pytest.raises(InvalidRequestError) as caught:
        block_from_proto(_block([5], [([5], [2.0])]), VOCAB, True, field="request.block")
    assert caught.value.field == "request.block.draft_probs[0].probs"


def test_sampling_round_trips():
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=40, min_p=0.05)
    assert sampling_from_proto(sampling_to_proto(params)) == params


def test_unset_sampling_fields_take_defaults():
    assert sampling_from_proto(common_pb2.SamplingParams()) == SamplingParams()
    assert sampling_from_proto(common_pb2.SamplingParams(top_k=5)) == SamplingParams(top_k=5)
    # An explicit 0 is not "unset": temperature 0 means greedy.
    assert sampling_from_proto(common_pb2.SamplingParams(temperature=0.0)).is_greedy


@pytest.mark.parametrize(
    "fields,name", [({"temperature": -1.0}, "temperature"), ({"top_p": 0.0}, "top_p"), ({"top_k": -1}, "top_k"), ({"min_p": 1.5}, "min_p")]
)
def test_invalid_sampling_names_the_field(fields, name):
    with pytest.raises(InvalidRequestError) as caught:
        sampling_from_proto(common_pb2.SamplingParams(**fields))
    assert caught.value.field == f"sampling.{name}"
    with pytest.raises(InvalidRequestError) as caught:
        sampling_from_proto(common_pb2.SamplingParams(**fields), "options.sampling")
    assert caught.value.field == f"options.sampling.{name}"


def test_candidate_sources_round_trip_and_default_to_the_draft_model():
    lookup, draft = TokenSource.LOOKUP, TokenSource.DRAFT
    block = DraftBlock(torch.tensor([5, 7, 9]), sources=(lookup, lookup, draft))
    again = block_from_proto(block_to_proto(block), VOCAB, needs_draft_probs=False)
    assert again.sources == (lookup, lookup, draft)
    unlabelled = block_from_proto(common_pb2.CandidateBlock(token_ids=[5, 7]), VOCAB, needs_draft_probs=False)
    assert unlabelled.sources == () and unlabelled.candidate_sources() == [draft, draft]
    unspecified = common_pb2.CandidateBlock(token_ids=[5], sources=[common_pb2.TOKEN_SOURCE_UNSPECIFIED])
    assert block_from_proto(unspecified, VOCAB, needs_draft_probs=False).sources == (draft,)


@pytest.mark.parametrize(
    "sources",
    [
        [common_pb2.TOKEN_SOURCE_LOOKUP],
        [common_pb2.TOKEN_SOURCE_DRAFT] * 3,
        [common_pb2.TOKEN_SOURCE_DRAFT, common_pb2.TOKEN_SOURCE_TARGET],
        [common_pb2.TOKEN_SOURCE_DRAFT, 99],
    ],
)
def test_sources_must_be_one_drafters_source_per_candidate(sources):
    message = common_pb2.CandidateBlock(token_ids=[5, 7], sources=sources)
    with pytest.raises(InvalidRequestError) as caught:
        block_from_proto(message, VOCAB, needs_draft_probs=False)
    assert caught.value.field == "block.sources"
