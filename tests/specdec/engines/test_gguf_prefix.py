"""Prompt caching in a llama.cpp model: a finished sequence's start serves the next session that begins alike,
with bit-identical logits (so outputs are the same with the cache on or off)."""

from __future__ import annotations

import pytest
import torch

from specdec.engines.gguf_model import GgufOptions, load_gguf
from specdec.engines.llama_cpp import GgufRunner
from specdec.errors import SpecdecError

PROMPT = list(range(5, 45))  # 40 tokens
TURN = [101, 102, 103, 104]


@pytest.fixture(params=[1, 2], ids=["draft passes", "target passes (min 2 tokens)"])
def cached_model(request, tiny_ggufs):
    options = GgufOptions(
        threads=1,
        context_tokens=1024,
        max_sequences=4,
        device="cpu",
        min_pass_tokens=request.param,
        prompt_cache_tokens=64,
        failure=SpecdecError,
    )
    model = load_gguf(tiny_ggufs.target, options)
    yield model
    model.close()


def _session_logits(runner: GgufRunner, sequence: list[int]) -> torch.Tensor:  # [3, vocab]
    session = runner.open_sequence(len(sequence) + 8)
    try:
        session.advance(sequence[:-3])
        return session.advance(sequence, num_logits=3)
    finally:
        session.release()


def test_a_prompt_that_starts_like_the_last_sequence_reuses_its_cells_with_identical_logits(cached_model, tiny_ggufs):
    runner = GgufRunner(cached_model)
    first = _session_logits(runner, PROMPT + TURN)  # nothing kept yet: decoded whole
    assert cached_model.prefixes.reused_tokens == 0
    again = _session_logits(runner, PROMPT + TURN)
    # all of the first prefill but its last token (whose logits are read) came from the store
    assert cached_model.prefixes.reused_tokens == len(PROMPT + TURN) - 3 - 1
    assert torch.equal(first, again)
    plain = load_gguf(tiny_ggufs.target, GgufOptions(**{**cached_model.options.__dict__, "prompt_cache_tokens": 0}))
    try:
        assert plain.prefixes is None
        assert torch.equal(_session_logits(GgufRunner(plain), PROMPT + TURN), first)
    finally:
        plain.close()


def test_only_the_shared_start_is_reused(cached_model):
    runner = GgufRunner(cached_model)
    _session_logits(runner, PROMPT + TURN)
    diverging = PROMPT[:10] + [200 + i for i in range(30)]
    _session_logits(runner, diverging)
    assert cached_model.prefixes.reused_tokens == 10
    _session_logits(runner, [300, 301, 302, 303, 304, 305, 306])  # no common start: nothing reused
    assert cached_model.prefixes.reused_tokens == 10


def test_the_kept_cells_are_held_apart_from_the_sessions_budget(tiny_ggufs):
    def capacity(prompt_cache_tokens: int) -> int:
        options = GgufOptions(threads=1, context_tokens=1024, max_sequences=4, device="cpu", prompt_cache_tokens=prompt_cache_tokens)
        model = load_gguf(tiny_ggufs.target, options)
        try:
            return model.budget.capacity_tokens
        finally:
            model.close()

    assert capacity(0) - capacity(64) == 64
