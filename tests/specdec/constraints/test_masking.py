"""Allowed-token masks over logits: pure tensor functions."""

from __future__ import annotations

import pytest
import torch

from specdec.constraints.masking import mask_logits, unpack_bitmask


def _pack(allowed: torch.Tensor) -> torch.Tensor:  # [n, vocab] bool -> [n, words] int32, as the engine writes it
    words = (allowed.shape[-1] + 31) // 32
    padded = torch.zeros(allowed.shape[0], words * 32, dtype=torch.int64)
    padded[:, : allowed.shape[-1]] = allowed.long()
    values = (padded.view(allowed.shape[0], words, 32) << torch.arange(32)).sum(-1)
    return torch.where(values >= 2**31, values - 2**32, values).to(torch.int32)


@pytest.mark.parametrize("vocab_size", [1, 31, 32, 33, 100])
def test_unpack_bitmask_inverts_packing_including_the_sign_bit(vocab_size):
    generator = torch.Generator().manual_seed(vocab_size)
    allowed = torch.rand(3, vocab_size, generator=generator) < 0.5
    allowed[:, -1] = True  # bit 31 of a full word is the int32 sign bit
    assert torch.equal(unpack_bitmask(_pack(allowed), vocab_size), allowed)


def test_unpack_all_set_words_allow_everything():
    assert unpack_bitmask(torch.full((2, 4), -1, dtype=torch.int32), 100).all()


def test_mask_logits_sends_refused_tokens_to_minus_infinity_and_keeps_the_rest():
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]])
    allowed = torch.tensor([[True, False, True], [False, True, False]])
    masked = mask_logits(logits, allowed)
    assert torch.equal(masked, torch.tensor([[1.0, float("-inf"), 3.0], [float("-inf"), -1.0, float("-inf")]]))
    assert torch.equal(logits[0], torch.tensor([1.0, 2.0, 3.0]))  # the input is not modified


def test_mask_logits_refuses_a_row_with_nothing_left_instead_of_producing_nan():
    logits = torch.tensor([[1.0, float("-inf"), 3.0], [1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match=r"rows \[0\]"):
        mask_logits(logits, torch.tensor([[False, True, False], [True, True, True]]))


def test_masked_softmax_is_the_renormalised_target_restricted_to_allowed_tokens():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    allowed = torch.tensor([[True, False, True, False]])
    probs = torch.softmax(mask_logits(logits, allowed), dim=-1)
    expected = torch.softmax(logits, dim=-1) * allowed
    assert torch.allclose(probs, expected / expected.sum())
