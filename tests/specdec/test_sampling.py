"""Sampling transforms define the target distribution p."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from specdec.sampling import SamplingParams, SparseDistribution, concat_sparse, densify, processed_probs, sparse_rows, sparse_top_k

LOGITS = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]], dtype=torch.float64)


def test_plain_temperature_one_is_softmax():
    assert torch.allclose(processed_probs(LOGITS, SamplingParams()), torch.softmax(LOGITS, -1))


def test_temperature_scales_logits():
    assert torch.allclose(processed_probs(LOGITS, SamplingParams(temperature=0.5)), torch.softmax(LOGITS / 0.5, -1))


def test_greedy_is_one_hot_argmax():
    assert processed_probs(LOGITS, SamplingParams(temperature=0)).tolist() == [[1.0, 0.0, 0.0, 0.0, 0.0]]


def test_top_k_keeps_k_largest_renormalised():
    probs = processed_probs(LOGITS, SamplingParams(top_k=2))
    expected = torch.softmax(torch.tensor([2.0, 1.0], dtype=torch.float64), -1)
    assert torch.allclose(probs[0, :2], expected) and probs[0, 2:].sum() == 0


def test_top_p_keeps_smallest_set_reaching_mass():
    full = torch.softmax(LOGITS, -1)[0]  # ~[0.57, 0.21, 0.13, 0.08, 0.03]
    probs = processed_probs(LOGITS, SamplingParams(top_p=0.7))[0]
    assert (probs > 0).tolist() == [True, True, False, False, False]
    assert torch.allclose(probs[:2], full[:2] / full[:2].sum())
    assert (processed_probs(LOGITS, SamplingParams(top_p=0.01))[0] > 0).sum() == 1  # top token always kept


def test_min_p_drops_tokens_below_fraction_of_top():
    probs = processed_probs(LOGITS, SamplingParams(min_p=0.3))[0]
    full = torch.softmax(LOGITS, -1)[0]
    assert ((probs > 0) == (full >= 0.3 * full.max())).all()
    assert torch.isclose(probs.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_transforms_apply_per_row():
    logits = torch.randn(4, 3, 50, generator=torch.Generator().manual_seed(0))
    probs = processed_probs(logits, SamplingParams(top_k=5, top_p=0.8))
    assert probs.shape == logits.shape
    assert torch.allclose(probs.sum(-1), torch.ones(4, 3))
    assert ((probs > 0).sum(-1) <= 5).all()


@pytest.mark.parametrize("field,value", [("temperature", -0.1), ("top_p", 0.0), ("top_p", 1.01), ("top_k", -1), ("min_p", 2.0)])
def test_out_of_range_parameters_name_the_field(field, value):
    with pytest.raises(ValidationError, match=field):
        SamplingParams(**{field: value})


def test_sparse_top_k_renormalises_and_densify_restores_support():
    probs = torch.softmax(LOGITS[0], -1)
    sparse = sparse_top_k(probs, draft_top_k=3)
    assert sparse.token_ids.tolist() == [0, 1, 2]
    assert torch.isclose(sparse.probs.sum(), torch.tensor(1.0, dtype=torch.float64))
    dense = densify(sparse, vocab_size=5)
    assert torch.allclose(dense[:3], probs[:3] / probs[:3].sum()) and dense[3:].sum() == 0


@pytest.mark.parametrize("temperature", [5e-324, 1e-300, 1e-40])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_tiny_temperature_is_the_argmax_not_nan(temperature, dtype):
    # found by fuzzing the gateway: logits / 5e-324 overflowed to inf (or 0 / 0 in float32), softmax gave NaN
    logits = torch.tensor([[1.0, 3.0, -2.0, 2.5]], dtype=dtype)
    probs = processed_probs(logits, SamplingParams(temperature=temperature))
    assert torch.equal(probs, torch.tensor([[0.0, 1.0, 0.0, 0.0]], dtype=dtype))


@pytest.mark.parametrize("top_p", [1e-46, 5e-324, 1e-30])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_top_p_below_the_smallest_float_keeps_the_most_probable_token(top_p, dtype, temperature):
    # found by the red team: 1e-46 is 0 in float32, `mass_before >= 0` dropped every token and softmax gave NaN
    logits = torch.tensor([[1.0, 3.0, -2.0, 2.5], [0.0, -1.0, 4.0, 4.0 - 1e-3]], dtype=dtype)
    probs = processed_probs(logits, SamplingParams(top_p=top_p, temperature=temperature))
    assert torch.equal(probs, torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]], dtype=dtype))


def test_top_k_beyond_int32_is_refused_naming_the_field():
    SamplingParams(top_k=2**31 - 1)  # the largest the gRPC field carries
    with pytest.raises(ValidationError, match="top_k"):
        SamplingParams(top_k=2**31)


def test_concat_sparse_pads_narrower_rows_with_zero_probability_and_keeps_every_q():
    looked_up = SparseDistribution(torch.tensor([[4], [2]]), torch.tensor([[1.0], [1.0]], dtype=torch.float64))  # [2, 1]
    drafted = sparse_top_k(torch.softmax(LOGITS, -1), draft_top_k=3)  # [1, 3]
    joined = concat_sparse([looked_up, drafted, looked_up])
    assert joined.token_ids.shape == joined.probs.shape == (5, 3)
    expected = torch.cat([densify(looked_up, 5), densify(drafted, 5), densify(looked_up, 5)])
    assert torch.equal(densify(joined, 5), expected)
    assert joined.token_ids[0].tolist() == [4, 4, 4] and joined.probs[0].tolist() == [1.0, 0.0, 0.0]  # ids of the row itself
    assert torch.equal(concat_sparse([drafted]).token_ids, drafted.token_ids)


def test_sparse_rows_leave_out_padding_so_no_id_appears_twice():
    joined = concat_sparse(
        [
            SparseDistribution(torch.tensor([[7]]), torch.tensor([[1.0]], dtype=torch.float64)),
            SparseDistribution(torch.tensor([[1, 3]]), torch.tensor([[0.25, 0.75]], dtype=torch.float64)),
        ]
    )
    assert sparse_rows(joined) == [([7], [1.0]), ([1, 3], [0.25, 0.75])]
