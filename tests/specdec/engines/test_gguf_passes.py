"""The pass planner: a token's pass length class follows from its own row, never from its neighbours."""

from __future__ import annotations

from specdec.engines.gguf_passes import MANY_TOKENS, PADDING, Entry, plan_passes


def _row(index: int, start: int, length: int, scored: int = 1) -> list[Entry]:
    """`length` tokens from `start`, the last `scored` of them with logits read."""
    return [Entry(index, index, start + offset, 7, offset >= length - scored) for offset in range(length)]


def _long(passes) -> set[tuple[int, int]]:
    """(row, position) of every token decoded in a pass of MANY_TOKENS or more."""
    return {(entry.row, entry.position) for entries in passes if len(entries) >= MANY_TOKENS for entry in entries}


def _of_row(entries, row: int) -> list[Entry]:
    return [entry for entry in entries if entry.row == row]


def _in_order(passes, rows) -> bool:
    decoded = [entry for entries in passes for entry in entries]
    return all([entry for entry in decoded if entry.row == index] == row for index, row in enumerate(rows))


def test_a_step_stays_in_a_short_pass_beside_a_long_prompt():
    step, prompt = _row(0, 55, 2), _row(1, 0, 70)
    passes = plan_passes([step, prompt], 512, invariant=True)
    assert _long(passes) == {(1, position) for position in range(69)}  # the scored last token: a short pass
    assert all(len(entries) < MANY_TOKENS for entries in passes if entries[0].row == 0)
    assert _in_order(passes, [step, prompt])


def test_a_prompts_chunks_are_the_same_alone_and_beside_others():
    prompt = _row(0, 0, 1100)  # chunks 0-511, 512-1023, and a 76-token tail
    alone = plan_passes([prompt], 512, invariant=True)
    beside = plan_passes([_row(1, 40, 5), _row(2, 0, 30), prompt, _row(3, 300, 9)], 512, invariant=True)
    assert [len(entries) for entries in alone] == [512, 512, 75, 1]
    assert {e.position for e in alone[0]} == set(range(512))
    assert _long(alone) == {key for key in _long(beside) if key[0] == 0}


def test_short_pieces_share_passes_under_the_threshold_in_order():
    rows = [_row(index, 100, 5) for index in range(20)]  # 100 tokens of verify blocks
    passes = plan_passes(rows, 512, invariant=True)
    assert all(len(entries) < MANY_TOKENS for entries in passes)
    assert sum(len(entries) for entries in passes) == 100
    assert _in_order(passes, rows)


def test_a_row_starting_before_a_chunk_boundary_decodes_its_short_head_first():
    rows = [_row(0, 0, 3), _row(1, 500, 100)]  # row 1: 12 tokens up to 511, then 88 from 512 on
    passes = plan_passes(rows, 512, invariant=True)
    assert _in_order(passes, rows)
    assert _long(passes) == {(1, position) for position in range(512, 599)}


def test_negative_control_a_draft_packs_everything_into_full_passes():
    passes = plan_passes([_row(0, 55, 2), _row(1, 0, 70)], 512, invariant=False)
    assert len(passes) == 1 and (0, 55) in _long(passes)


def _per_sequence(entries) -> dict[int, int]:
    counts: dict[int, int] = {}
    for entry in entries:
        counts[entry.seq_id] = counts.get(entry.seq_id, 0) + 1
    return counts


def test_with_equal_rows_a_short_pass_holds_consecutive_sequences_in_order_padded_to_one_length():
    rows = [_row(3, 40, 6, scored=6), _row(1, 20, 5, scored=5), _row(0, 10, 1), _row(2, 30, 1), _row(4, 0, 70), _row(5, 9, 1)]
    passes = plan_passes(rows, 512, invariant=True, equal_rows=True)
    short = [entries for entries in passes if len(entries) < MANY_TOKENS]
    assert [_per_sequence(entries) for entries in short] == [dict.fromkeys(range(6), 6)]
    assert [entry.seq_id for entry in short[0]] == sorted(entry.seq_id for entry in short[0])
    padding = [entry for entry in short[0] if entry.row == PADDING]
    assert len(padding) == 5 + 1 + 5 + 0 + 5 + 5 and not any(entry.wants_logits for entry in padding)
    real = [entry for entries in passes for entry in entries if entry.row != PADDING]
    assert _in_order([real], sorted(rows, key=lambda row: row[0].row))
    # sequences 0 and 2 (1 between them ended) cannot share a pass
    assert len(plan_passes([_row(0, 10, 1), _row(2, 30, 1)], 512, invariant=True, equal_rows=True)) == 2
    # negative control: without equal_rows the short pieces share one pass, lengths as they came
    assert {len(entries) for entries in plan_passes(rows, 512, invariant=True) if len(entries) < MANY_TOKENS} == {15}


def test_a_prompt_runs_in_the_same_passes_with_or_without_a_block_after_it():
    # 60 prompt tokens: a short pass; with a draft block of 5 after them the row is 65 tokens long
    for prompt in (_row(0, 0, 60), _row(0, 0, 200)):
        with_block = [*prompt[:-1], *_row(0, 0, len(prompt) + 5, scored=6)[len(prompt) - 1 :]]
        long_alone = _long(plan_passes([prompt], 512, invariant=True))
        assert long_alone == {key for key in _long(plan_passes([with_block], 512, invariant=True)) if key[1] < len(prompt)}
    # negative control: a row not cut before its scored tokens runs the 60 prompt tokens in a pass of 65
    assert (0, 0) in _long(plan_passes([_row(0, 0, 65, scored=65)], 512, invariant=True))


def test_a_rows_pieces_keep_their_order_with_equal_rows():
    rows = [_row(0, 0, 30, scored=5), _row(1, 0, 25, scored=1), _row(2, 0, 40, scored=25)]
    passes = plan_passes(rows, 512, invariant=True, equal_rows=True)
    assert _in_order([[entry for entries in passes for entry in entries if entry.row != PADDING]], rows)
    assert all(len(set(_per_sequence(entries).values())) == 1 for entries in passes)
