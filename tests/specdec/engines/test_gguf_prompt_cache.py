"""The llama_cpp target's prompt cache with KV cells per session: a later prompt that begins like a finished session
takes that session's kept cells where they are bit-identical to a fresh decode, and decodes only the rest."""

from __future__ import annotations

import pytest
import torch

from specdec.batching import BatchingOptions
from specdec.engines import gguf_prompt_cache
from specdec.engines.gguf_model import GgufOptions, GgufRow, load_gguf
from specdec.engines.gguf_passes import long_positions
from specdec.engines.gguf_prompt_cache import reusable_prefix
from specdec.engines.llama_cpp import GgufRunner
from specdec.errors import SpecdecError

PROMPT = [(7 * i) % 500 + 5 for i in range(100)]  # its first 99 tokens run in one long pass
ANSWER = [(11 * i) % 400 + 20 for i in range(20)]  # generated in short passes
DRAFT_PROMPT = list(range(5, 45))  # 40 tokens
TURN = [101, 102, 103, 104]
NEXT_TURN = PROMPT + ANSWER + [(13 * i) % 300 + 30 for i in range(30)]  # 150 tokens


def test_long_positions_follow_the_pieces_a_prompt_is_cut_into():
    assert long_positions(99, 512) == b"\x01" * 99
    assert long_positions(40, 512) == bytes(40)  # one short piece
    # cut at 512: a full long piece, then a short one of 20
    assert long_positions(532, 512) == b"\x01" * 512 + bytes(20)


def test_kept_cells_are_taken_only_where_their_class_is_a_fresh_decodes():
    kept = long_positions(99, 512) + bytes(21)  # a 100-token prompt, then 20 answer tokens in short passes
    # the new prompt's first 149 positions run long in a fresh decode: the answer's short cells are not taken, and
    # the rest of the piece (from the cut to 149) must stay 64 tokens or more
    assert reusable_prefix(kept, matched=120, first_scored=149, max_tokens=512) == 149 - 64
    assert reusable_prefix(kept, matched=120, first_scored=300, max_tokens=512) == 99
    # a prompt that repeats the first one (its last token scored): every kept cell up to it
    assert reusable_prefix(kept, matched=100, first_scored=99, max_tokens=512) == 99
    # short in both: a kept short prompt serves a new one whose start is short too
    assert reusable_prefix(bytes(50), matched=50, first_scored=60, max_tokens=512) == 50
    # a cut at a multiple of max_tokens starts a piece of its own
    assert reusable_prefix(b"\x01" * 512 + bytes(30), matched=542, first_scored=700, max_tokens=512) == 512


@pytest.fixture
def cached_gguf(tiny_ggufs):
    options = GgufOptions(threads=1, context_tokens=1024, max_sequences=4, min_pass_tokens=2, per_session_kv=True, prompt_cache_tokens=300)
    gguf = load_gguf(tiny_ggufs.target, options)
    yield gguf
    gguf.close()


def _answered(gguf, prompt: list[int], answer: list[int]) -> None:
    """A finished session: `prompt` decoded from the start, then `answer` in verify blocks of 5."""
    seat = gguf.take_seat(190, 1)
    start = gguf.attach_prefix(seat, prompt, len(prompt) - 1)
    gguf.decode([GgufRow(seat, prompt[start:], start, 1)])
    for first in range(0, len(answer), 5):
        gguf.decode([GgufRow(seat, answer[first : first + 5], len(prompt) + first, 5)])
    gguf.release(seat, prompt + answer)


def _last_logits(gguf, prompt: list[int]) -> tuple[torch.Tensor, int]:
    seat = gguf.take_seat(190, 1)
    try:
        start = gguf.attach_prefix(seat, prompt, len(prompt) - 1)
        return gguf.decode([GgufRow(seat, prompt[start:], start, 1)])[0][-1], start
    finally:
        gguf.release(seat)


def test_a_next_turn_reuses_the_kept_turn_and_scores_as_a_fresh_decode(cached_gguf):
    fresh, reused = _last_logits(cached_gguf, NEXT_TURN)
    assert reused == 0
    cached_gguf.prefixes.clear()
    _answered(cached_gguf, PROMPT, ANSWER)
    logits, reused = _last_logits(cached_gguf, NEXT_TURN)
    assert reused == len(NEXT_TURN) - 1 - 64  # the kept prompt, less what keeps the rest of its piece long
    assert torch.equal(logits, fresh)


def test_negative_control_kept_answer_cells_taken_where_a_fresh_decode_runs_long_score_otherwise(cached_gguf, monkeypatch):
    fresh, _ = _last_logits(cached_gguf, NEXT_TURN)
    cached_gguf.prefixes.clear()
    _answered(cached_gguf, PROMPT, ANSWER)
    monkeypatch.setattr(gguf_prompt_cache, "reusable_prefix", lambda kept, matched, first_scored, max_tokens: min(matched, first_scored))
    logits, reused = _last_logits(cached_gguf, NEXT_TURN)
    assert reused == len(PROMPT + ANSWER)
    assert not torch.equal(logits, fresh)


def test_a_later_turn_replaces_its_earlier_one_and_the_least_recently_used_go_first(cached_gguf):
    cache = cached_gguf.prefixes
    _answered(cached_gguf, PROMPT, ANSWER)
    _answered(cached_gguf, NEXT_TURN, ANSWER)  # begins with all of the first: it replaces it
    assert len(cache.kept) == 1 and cache.held_tokens == len(NEXT_TURN + ANSWER)
    other = [(17 * i) % 450 + 9 for i in range(120)]
    _answered(cached_gguf, other, ANSWER)  # 300 tokens at most: the older conversation goes
    assert len(cache.kept) == 1 and cache.held_tokens == len(other + ANSWER)
    assert _last_logits(cached_gguf, NEXT_TURN)[1] == 0


def test_a_sessions_prompt_reports_how_many_of_its_tokens_the_cache_held(cached_gguf):
    reported = []
    runner = GgufRunner(cached_gguf, BatchingOptions(max_batch_size=2, on_prompt=lambda tokens, cached: reported.append((tokens, cached))))
    _answered(cached_gguf, PROMPT, ANSWER)
    sequence = runner.open_sequence(len(NEXT_TURN) + 8)
    try:
        sequence.advance(NEXT_TURN)
    finally:
        sequence.release()
    assert reported == [(len(NEXT_TURN), len(NEXT_TURN) - 1 - 64)]


# In the shared pool (drafts): copies of the last sequences, whatever cells they land in.


@pytest.fixture(params=[1, 2], ids=["draft passes", "target passes (min 2 tokens)"])
def shared_pool_model(request, tiny_ggufs):
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


def test_a_prompt_that_starts_like_the_last_sequence_reuses_its_cells_with_identical_logits(shared_pool_model, tiny_ggufs):
    runner = GgufRunner(shared_pool_model)
    first = _session_logits(runner, DRAFT_PROMPT + TURN)  # nothing kept yet: decoded whole
    assert shared_pool_model.prefixes.reused_tokens == 0
    again = _session_logits(runner, DRAFT_PROMPT + TURN)
    # all of the first prefill but its last token (whose logits are read) came from the store
    assert shared_pool_model.prefixes.reused_tokens == len(DRAFT_PROMPT + TURN) - 3 - 1
    assert torch.equal(first, again)
    plain = load_gguf(tiny_ggufs.target, GgufOptions(**{**shared_pool_model.options.__dict__, "prompt_cache_tokens": 0}))
    try:
        assert plain.prefixes is None
        assert torch.equal(_session_logits(GgufRunner(plain), DRAFT_PROMPT + TURN), first)
    finally:
        plain.close()


def test_only_the_shared_start_is_reused(shared_pool_model):
    runner = GgufRunner(shared_pool_model)
    _session_logits(runner, DRAFT_PROMPT + TURN)
    diverging = DRAFT_PROMPT[:10] + [200 + i for i in range(30)]
    _session_logits(runner, diverging)
    assert shared_pool_model.prefixes.reused_tokens == 10
    _session_logits(runner, [300, 301, 302, 303, 304, 305, 306])  # no common start: nothing reused
    assert shared_pool_model.prefixes.reused_tokens == 10
