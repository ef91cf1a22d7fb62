"""The llama.cpp target engine: batch-invariant passes, batched sessions, grammars, penalties, and its refusals."""

from __future__ import annotations

import threading

import pytest
import torch
from generation_support import PROMPT
from generation_support import run as _run
from gguf_support import load_llama_cpp_target

from specdec.assembly import build_generator
from specdec.batching import BatchingOptions
from specdec.constraints.grammars import json_schema_grammar
from specdec.constraints.matcher import GrammarConstraint
from specdec.drafters import ModelDrafter
from specdec.engines import resolve_engine
from specdec.engines.gguf_model import GgufOptions, GgufRow, load_gguf
from specdec.engines.gguf_passes import Entry
from specdec.errors import ModelLoadError, SpecdecError
from specdec.generation import SpeculativeGenerator
from specdec.penalties import Penalties
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams
from specdec.serving.config import ModelSection, SpecdecConfig, TargetEngine

GREEDY = SamplingParams(temperature=0)
PREFIX = list(range(5, 60))
NEXT = [77, 78, 79, 80, 81]


def _position_logits(gguf) -> dict[str, torch.Tensor]:
    """The logits after NEXT[0] (position 55) scored four ways, and after the prefix with one output or three."""
    seat, other = gguf.take_seat(128, 1), gguf.take_seat(128, 1)
    try:
        after_prefix = gguf.decode([GgufRow(seat, PREFIX, 0, 1)])[0][0]
        gguf.decode([GgufRow(other, PREFIX[:20], 0, 1)])
        return {
            "alone": gguf.decode([GgufRow(seat, NEXT[:1], 55, 1)])[0][0],
            "verify pass": gguf.decode([GgufRow(seat, NEXT, 55, 5)])[0][0],
            "beside another session": gguf.decode([GgufRow(seat, NEXT[:1], 55, 1), GgufRow(other, [9], 20, 1)])[0][0],
            "prefix, one output": after_prefix,
            "prefix, three outputs": gguf.decode([GgufRow(seat, PREFIX + NEXT[:2], 0, 3)])[0][0],
        }
    finally:
        gguf.release(seat)
        gguf.release(other)


def test_a_positions_logits_are_bit_identical_alone_in_a_verify_pass_and_beside_another_session(tiny_llama_cpp_target):
    logits = _position_logits(tiny_llama_cpp_target.gguf)
    assert torch.equal(logits["alone"], logits["verify pass"])
    assert torch.equal(logits["alone"], logits["beside another session"])
    assert torch.equal(logits["prefix, one output"], logits["prefix, three outputs"])


def test_a_target_pads_lone_tokens_exactly_where_unpadded_passes_score_differently(tiny_gguf_target, tiny_llama_cpp_target):
    # A draft's model (min_pass_tokens 1, never padded), scored the same ways: with llamafile's sgemm (a stock build) a
    # one-token pass rounds differently and the target pads; built without it the two agree and the target does not.
    logits = _position_logits(tiny_gguf_target)
    unpadded_alike = torch.equal(logits["alone"], logits["verify pass"])
    assert tiny_llama_cpp_target.gguf.min_pass_tokens == (1 if unpadded_alike else 2)


LONG_PROMPT = [5 + (7 * i) % 200 for i in range(70)]  # long enough for llama.cpp's many-token kernels


def _scored_together(gguf, neighbour_prompt: list[int] | None, *, one_pass: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A 2-token step's logits at position 55 and, in the same decode, the last logits of another session's prompt."""
    seat, other = gguf.take_seat(128, 1), gguf.take_seat(128, 1)
    try:
        gguf.decode([GgufRow(seat, PREFIX, 0, 1)])
        rows = [GgufRow(seat, NEXT[:2], 55, 2)]
        if neighbour_prompt is not None:
            rows.append(GgufRow(other, neighbour_prompt, 0, 1))
        if not one_pass:
            logits = gguf.decode(rows)
            return logits[0][0], (logits[1][-1] if neighbour_prompt is not None else None)
        # the negative control: every row's tokens in one llama_decode, as the decode did before passes were planned
        logits = [[] for _ in rows]
        entries = [
            Entry(index, row.seat.seq_id, row.start + offset, token_id, offset >= len(row.input_ids) - row.num_logits)
            for index, row in enumerate(rows)
            for offset, token_id in enumerate(row.input_ids)
        ]
        with gguf._lock:
            gguf._decode_chunk(entries, logits)
        return logits[0][0], logits[1][-1]
    finally:
        gguf.release(seat)
        gguf.release(other)


def _prompt_alone(gguf) -> torch.Tensor:
    seat = gguf.take_seat(128, 1)
    try:
        return gguf.decode([GgufRow(seat, LONG_PROMPT, 0, 1)])[0][-1]
    finally:
        gguf.release(seat)


def _tiny_gguf(path, per_session_kv: bool):
    return load_gguf(path, GgufOptions(threads=1, context_tokens=1024, max_sequences=4, min_pass_tokens=2, per_session_kv=per_session_kv))


def test_a_step_and_a_long_prompt_in_one_decode_score_as_each_does_alone(tiny_ggufs):
    gguf = _tiny_gguf(tiny_ggufs.target, per_session_kv=True)
    try:
        step_alone, prompt_alone = _scored_together(gguf, None)[0], _prompt_alone(gguf)
        step, prompt = _scored_together(gguf, LONG_PROMPT)
        assert torch.equal(step_alone, step)
        assert torch.equal(prompt_alone, prompt)
        assert torch.equal(step_alone, _scored_together(gguf, LONG_PROMPT[:20])[0])
        # negative control: the same rows in one llama_decode; llama.cpp splits it into equal shares per session, so
        # the prompt's first two tokens run in a short pass, not in its own long one
        step, prompt = _scored_together(gguf, LONG_PROMPT, one_pass=True)
        assert not torch.equal(prompt_alone, prompt)
    finally:
        gguf.close()


def _two_blocks(gguf, lengths: tuple[int, int], *, one_pass: bool = False) -> list[torch.Tensor]:
    """Two sessions' verify blocks of `lengths` tokens after the prefix, scored in one decode: each block's logits."""
    seats = [gguf.take_seat(128, 1) for _ in lengths]
    try:
        for seat in seats:
            gguf.decode([GgufRow(seat, PREFIX, 0, 1)])
        rows = [GgufRow(seat, (NEXT * 2)[:length], 55, length) for seat, length in zip(seats, lengths, strict=True)]
        if not one_pass:
            return gguf.decode(rows)
        logits = [[] for _ in rows]
        entries = [
            Entry(index, row.seat.seq_id, row.start + offset, token_id, True)
            for index, row in enumerate(rows)
            for offset, token_id in enumerate(row.input_ids)
        ]
        with gguf._lock:
            gguf._decode_chunk(entries, logits)
        return [torch.stack(row_logits) for row_logits in logits]
    finally:
        for seat in seats:
            gguf.release(seat)


def test_blocks_of_different_lengths_in_one_decode_score_as_each_does_alone(tiny_ggufs, tiny_llama_cpp_target):
    gguf = _tiny_gguf(tiny_ggufs.target, per_session_kv=True)
    try:
        five_alone, six_alone = _two_blocks(gguf, (5, 1))[0], _two_blocks(gguf, (6, 1))[0]
        five, six = _two_blocks(gguf, (5, 6))
        assert torch.equal(five_alone, five)
        assert torch.equal(six_alone, six)
        # negative control: in one llama_decode llama.cpp splits it into 5 + 5 tokens, then the sixth alone, which
        # scores differently on a build whose one-token passes round differently (where a target pads lone tokens)
        sixth_alone_differs = not torch.equal(six_alone, _two_blocks(gguf, (5, 6), one_pass=True)[1])
        assert sixth_alone_differs == (tiny_llama_cpp_target.gguf.min_pass_tokens == 2)
    finally:
        gguf.close()


@pytest.fixture
def per_session_gguf(tiny_ggufs):
    """The tiny target's GGUF with KV cells per session, closed after the test (its sessions with it)."""
    gguf = _tiny_gguf(tiny_ggufs.target, per_session_kv=True)
    yield gguf
    gguf.close()


def _equal_together_and_alone(gguf, rows: list[GgufRow]) -> list[torch.Tensor]:
    """Score `rows` in one decode, then each alone; asserts they agree bit for bit and returns the rows alone."""
    together = gguf.decode(rows)
    alone = [gguf.decode([row])[0] for row in rows]
    assert all(torch.equal(a, b) for a, b in zip(alone, together, strict=True))
    return alone


def test_rows_cut_into_pieces_of_several_lengths_decode_each_in_order(per_session_gguf):
    # a prompt (its last token scored: pieces of 29 and 1) beside a continuation of 5 unscored then 5 scored tokens
    seats = [per_session_gguf.take_seat(128, 1) for _ in range(2)]
    per_session_gguf.decode([GgufRow(seats[1], PREFIX, 0, 1)])
    _equal_together_and_alone(per_session_gguf, [GgufRow(seats[0], LONG_PROMPT[:30], 0, 1), GgufRow(seats[1], (NEXT * 2)[:10], 55, 5)])


def test_steps_of_sessions_with_ids_out_of_order_and_apart_score_as_each_does_alone(per_session_gguf):
    # llama.cpp decodes sessions in streams of their own as one pass only for consecutive ids in order: sessions
    # 2 and 0 (1 between them ended) must not be left in one-token passes
    gguf = per_session_gguf
    seats = [gguf.take_seat(128, 1) for _ in range(3)]
    for seat in seats:
        gguf.decode([GgufRow(seat, PREFIX, 0, 1)])
    alone = _equal_together_and_alone(gguf, [GgufRow(seats[2], NEXT[:1], 55, 1), GgufRow(seats[0], NEXT[1:2], 55, 1)])
    # negative control: the two rows in one llama_decode, which llama.cpp splits into two one-token passes
    logits = [[], []]
    with gguf._lock:
        for seat in seats:
            gguf._truncate(seat, 55)
        gguf._decode_chunk([Entry(0, 2, 55, NEXT[0], True), Entry(1, 0, 55, NEXT[1], True)], logits)
    assert not torch.equal(alone[0], logits[0][0])


def test_negative_control_in_the_shared_pool_a_prompt_after_another_sessions_cells_scores_otherwise(tiny_ggufs):
    # one pool of cells: the prompt's cells start after the other session's 57, and its long pass adds them up in
    # tiles of 64 cells from the pool's start
    gguf = _tiny_gguf(tiny_ggufs.target, per_session_kv=False)
    try:
        assert not torch.equal(_prompt_alone(gguf), _scored_together(gguf, LONG_PROMPT)[1])
    finally:
        gguf.close()


def test_concurrent_sessions_give_what_each_gives_alone(tiny_llama_cpp_target, tiny_draft):
    prompts = [PROMPT, "The lazy dog sleeps", "A quick brown fox", "Over the lazy dog and"]
    prompt_ids = [tiny_llama_cpp_target.tokenizer(prompt)["input_ids"] for prompt in prompts]
    alone = [_run(tiny_llama_cpp_target, None, ids, sampling=GREEDY, speculative=False).token_ids for ids in prompt_ids]
    batch_sizes = []
    runner = tiny_llama_cpp_target.batched_runner(
        BatchingOptions(max_batch_size=4, max_wait_s=0.05, on_batch=lambda rows: batch_sizes.append(len(rows)))
    )
    generator = SpeculativeGenerator(tiny_llama_cpp_target, ModelDrafter(tiny_draft.model), runner)
    results: dict[int, list[int]] = {}

    def generate(index: int) -> None:
        request = GenerationRequest(
            prompt_ids=prompt_ids[index], max_tokens=40, ignore_eos=True, sampling=GREEDY, speculative=index % 2 == 0
        )
        results[index] = generator.generate(request).token_ids

    threads = [threading.Thread(target=generate, args=(index,)) for index in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    runner.close()
    assert [results[index] for index in range(len(prompts))] == alone
    assert max(batch_sizes) > 1  # sessions really shared decodes


def test_a_grammar_constrains_the_llama_cpp_target(tiny_llama_cpp_target, tiny_draft):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    grammar = json_schema_grammar(schema, "schema")
    prompt_ids = tiny_llama_cpp_target.tokenizer(PROMPT)["input_ids"]
    request = GenerationRequest(prompt_ids=prompt_ids, max_tokens=30, grammar=grammar, sampling=GREEDY)
    reference = SpeculativeGenerator(tiny_llama_cpp_target).generate(request.model_copy(update={"speculative": False}))
    result = SpeculativeGenerator(tiny_llama_cpp_target, ModelDrafter(tiny_draft.model)).generate(request)
    assert result.token_ids == reference.token_ids
    constraint = GrammarConstraint.for_model(grammar, len(prompt_ids), tiny_llama_cpp_target, tiny_llama_cpp_target.vocab_size)
    assert constraint.valid_prefix_length(prompt_ids, result.token_ids) == len(result.token_ids)


def test_penalties_apply_on_the_llama_cpp_target(tiny_llama_cpp_target, tiny_draft):
    prompt_ids = tiny_llama_cpp_target.tokenizer(PROMPT)["input_ids"]
    plain = _run(tiny_llama_cpp_target, None, prompt_ids, sampling=GREEDY, speculative=False)
    banned = plain.token_ids[0]
    penalised = dict(sampling=GREEDY, penalties=Penalties(logit_bias={banned: -100.0}, repetition_penalty=1.3))
    reference = _run(tiny_llama_cpp_target, None, prompt_ids, speculative=False, **penalised)
    result = _run(tiny_llama_cpp_target, ModelDrafter(tiny_draft.model), prompt_ids, **penalised)
    assert result.token_ids == reference.token_ids and banned not in reference.token_ids


def test_auto_picks_llama_cpp_for_a_gguf_and_transformers_otherwise(tiny_ggufs, tiny_pair_paths):
    assert resolve_engine(ModelSection(), str(tiny_ggufs.target)) is TargetEngine.LLAMA_CPP
    assert resolve_engine(ModelSection(), str(tiny_pair_paths.target)) is TargetEngine.HF
    assert resolve_engine(ModelSection(target_engine="hf"), str(tiny_ggufs.target)) is TargetEngine.HF


def test_token_trees_are_refused_at_start(tiny_ggufs):
    config = SpecdecConfig(model={"target_path": str(tiny_ggufs.target), "draft_method": "ngram"}, speculative={"verification": "tree"})
    with pytest.raises(SpecdecError, match="model.target_path: a llama.cpp model verifies and drafts chains only"):
        build_generator(config)


def test_a_gguf_draft_with_tree_verification_is_refused_at_start(tiny_ggufs, tiny_pair_paths):
    config = SpecdecConfig(
        model={"target_path": str(tiny_pair_paths.target), "draft_path": str(tiny_ggufs.draft), "draft_method": "gguf"},
        speculative={"verification": "tree"},
    )
    with pytest.raises(SpecdecError, match="model.draft_path: a llama.cpp model verifies and drafts chains only"):
        build_generator(config)


def test_layer_skip_with_a_llama_cpp_target_is_refused(tiny_ggufs):
    config = SpecdecConfig(model={"target_path": str(tiny_ggufs.target), "draft_method": "layer_skip"})
    with pytest.raises(SpecdecError, match="layer_skip .* needs model.target_engine hf"):
        build_generator(config)


def test_a_file_the_llama_cpp_engine_cannot_run_is_one_line_naming_it_and_the_engine(tiny_pair_paths, tmp_path):
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_text("not a model")
    for path, reason in ((tiny_pair_paths.target, "runs .gguf files"), (not_gguf, "not a GGUF file")):
        config = SpecdecConfig(model={"target_path": str(path), "target_engine": "llama_cpp", "draft_method": "ngram"})
        with pytest.raises(ModelLoadError, match=reason) as caught:
            build_generator(config)
        message = str(caught.value)
        assert message.startswith("model.target_path: ") and message.endswith("(target engine llama_cpp)")
        assert str(path) in message and "\n" not in message


def test_a_gguf_target_whose_vocabulary_differs_from_the_gguf_drafts_is_refused(tiny_ggufs, foreign_tokenizer, tmp_path, tiny_pair_paths):
    from specdec.errors import IncompatibleVocabularyError
    from specdec.make_draft.hf_gguf import write_gguf

    foreign = write_gguf(tiny_pair_paths.draft, tmp_path / "foreign.gguf", foreign_tokenizer)
    config = SpecdecConfig(model={"target_path": str(tiny_ggufs.target), "draft_path": str(foreign), "draft_method": "gguf"})
    with pytest.raises(IncompatibleVocabularyError, match="does not share the vocabulary"):
        build_generator(config)


def test_a_request_longer_than_the_contexts_cells_is_refused_naming_max_tokens(tiny_ggufs):
    target = load_llama_cpp_target(tiny_ggufs.target)
    try:
        prompt_ids = target.tokenizer(PROMPT)["input_ids"]
        with pytest.raises(SpecdecError, match="max_tokens"):
            _run(target, None, prompt_ids, max_tokens=target.max_context)
    finally:
        target.close()
