"""CachedSequence: incremental logits equal a fresh full pass, and rollback is exact."""

from __future__ import annotations

import torch

from specdec.kv_cache import CachedSequence

SEQUENCE = [7, 42, 99, 3, 250, 17, 8, 64, 300, 11]


def _fresh_logits(model, sequence, num_logits):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([sequence])).logits[0, -num_logits:]


def test_incremental_advance_matches_one_full_pass(tiny_target):
    lm = CachedSequence(tiny_target.model)
    lm.advance(SEQUENCE[:4])
    logits = lm.advance(SEQUENCE, num_logits=6)  # feeds only the 6 uncached tokens
    assert torch.allclose(logits, _fresh_logits(tiny_target.model, SEQUENCE, 6), atol=1e-5)
    assert lm.cached_ids == SEQUENCE and lm.cache.get_seq_length() == len(SEQUENCE)


def test_rollback_to_a_diverging_sequence_is_exact(tiny_target):
    lm = CachedSequence(tiny_target.model)
    lm.advance(SEQUENCE)
    diverged = SEQUENCE[:5] + [1, 2, 3]
    logits = lm.advance(diverged, num_logits=4)
    assert torch.allclose(logits, _fresh_logits(tiny_target.model, diverged, 4), atol=1e-5)
    assert lm.cached_ids == diverged and lm.cache.get_seq_length() == len(diverged)


def test_cached_tokens_whose_logits_are_asked_for_are_recomputed(tiny_target):
    lm = CachedSequence(tiny_target.model)
    lm.advance(SEQUENCE)
    logits = lm.advance(SEQUENCE, num_logits=3)
    assert torch.allclose(logits, _fresh_logits(tiny_target.model, SEQUENCE, 3), atol=1e-5)
    assert lm.cache.get_seq_length() == len(SEQUENCE)


def test_truncate_and_release_free_positions(tiny_target):
    lm = CachedSequence(tiny_target.model)
    lm.advance(SEQUENCE)
    lm.truncate(4)
    assert lm.cached_ids == SEQUENCE[:4] and lm.cache.get_seq_length() == 4
    lm.release()
    assert lm.cached_ids == [] and lm.cache.get_seq_length() == 0
