"""The packed pass: the same logits as Hugging Face's own forward, whatever else is in the pass."""

from __future__ import annotations

import pytest
import torch

from specdec.batching import BatchedRunner, KVBudget, default_runner
from specdec.batching.kv_store import SessionKV
from specdec.batching.packed_forward import PackedRow, model_parts, packed_forward
from specdec.distill.student import build_student
from specdec.kv_cache import CachedSequence


@pytest.fixture(scope="module")
def tiny_target64(tiny_pair_paths):
    from specdec.engines.hf import load_model

    return load_model(tiny_pair_paths.target, device="cpu", dtype="float64")


def _sequence(length: int, offset: int = 0) -> list[int]:
    return [5 + (7 * index + offset) % 200 for index in range(length)]


def test_matches_hugging_face_through_prefill_rollback_and_extension(tiny_target):
    runner = default_runner(tiny_target.model)
    assert isinstance(runner, BatchedRunner)
    reference, packed = CachedSequence(tiny_target.model), runner.open_sequence(64)
    for sequence, num_logits in ((_sequence(20), 3), (_sequence(17) + [9, 8, 7], 4), (_sequence(17) + [9, 8, 7, 6], 1)):
        expected, actual = reference.advance(sequence, num_logits), packed.advance(sequence, num_logits)
        assert actual.shape == expected.shape
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    assert packed.cached_ids == reference.cached_ids


def test_reduced_vocabulary_draft_matches_its_own_forward(tiny_target):
    student = build_student(tiny_target.model, num_layers=1, vocabulary=torch.arange(3, 120)).eval()
    parts = model_parts(student)
    assert parts is not None
    packed = default_runner(student).open_sequence(32)
    reference = CachedSequence(student)
    expected, actual = reference.advance(_sequence(12), 2), packed.advance(_sequence(12), 2)
    assert torch.equal(torch.isinf(actual), torch.isinf(expected))  # -inf outside its vocabulary, in both
    torch.testing.assert_close(actual[torch.isfinite(actual)], expected[torch.isfinite(expected)], rtol=1e-5, atol=1e-5)


def test_a_row_gets_the_same_logits_alone_and_in_a_pass_with_others(tiny_target64):
    """Rows of different lengths, rollback points and new-token counts in one pass."""
    parts = model_parts(tiny_target64.model)
    budget = KVBudget(None, parts.kv_shape.bytes_per_token)
    plans = [(_sequence(30, 1), 25, 5), (_sequence(9, 2), 0, 9), (_sequence(50, 3), 48, 2), (_sequence(4, 4), 3, 1)]
    alone = []
    for sequence, cached, _ in plans:
        kv = SessionKV(parts.kv_shape, budget, 64)
        if cached:
            packed_forward(parts, [PackedRow(kv, sequence[:cached], 0, 1)])
        alone.append(packed_forward(parts, [PackedRow(kv, sequence[cached:], cached, len(sequence) - cached)])[0])
    caches = []
    for sequence, cached, _ in plans:
        kv = SessionKV(parts.kv_shape, budget, 64)
        if cached:
            packed_forward(parts, [PackedRow(kv, sequence[:cached], 0, 1)])
        caches.append(kv)
    together = packed_forward(
        parts, [PackedRow(kv, sequence[cached:], cached, len(sequence) - cached) for kv, (sequence, cached, _) in zip(caches, plans)]
    )
    for single, batched in zip(alone, together):
        # NOTE: float64 on the CPU: a matmul over more rows may still differ in the last bits.
        torch.testing.assert_close(batched, single, rtol=1e-12, atol=1e-12)
        assert torch.equal(batched.argmax(-1), single.argmax(-1))
    assert [kv.length for kv in caches] == [len(sequence) for sequence, _, _ in plans]


def test_unsupported_architectures_fall_back_to_a_hugging_face_cache(tiny_target):
    tiny_target.model.config.model_type, saved = "gpt2", tiny_target.model.config.model_type
    try:
        assert model_parts(tiny_target.model) is None
        assert isinstance(default_runner(tiny_target.model).open_sequence(8), CachedSequence)
    finally:
        tiny_target.model.config.model_type = saved
