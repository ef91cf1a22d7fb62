"""The pass planner: a token's pass length class follows from its own row, never from its neighbours."""

from __future__ import annotations

from specdec.engines.gguf_passes import MANY_TOKENS, Entry, plan_passes


def _row(index: int, start: int, length: int) -> list[Entry]:
    return [Entry(index, index, start + offset, 7, offset == length - 1) for offset in range(length)]


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
    assert _long(passes) == {(1, position) for position in range(70)}
    assert all(len(entries) < MANY_TOKENS for entries in passes if entries[0].row == 0)
    assert _in_order(passes, [step, prompt])


def test_a_prompts_chunks_are_the_same_alone_and_beside_others():
    prompt = _row(0, 0, 1100)  # chunks 0-511, 512-1023, and a 76-token tail
    alone = plan_passes([prompt], 512, invariant=True)
    beside = plan_passes([_row(1, 40, 5), _row(2, 0, 30), prompt, _row(3, 300, 9)], 512, invariant=True)
    assert [len(entries) for entries in alone] == [512, 512, 76]
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
    assert _long(passes) == {(1, position) for position in range(512, 600)}


def test_negative_control_a_draft_packs_everything_into_full_passes():
    passes = plan_passes([_row(0, 55, 2), _row(1, 0, 70)], 512, invariant=False)
    assert len(passes) == 1 and (0, 55) in _long(passes)


def test_with_equal_rows_a_short_pass_holds_pieces_of_one_length():
    rows = [_row(0, 10, 1), _row(1, 20, 5), _row(2, 30, 1), _row(3, 40, 6), _row(4, 0, 70)]
    passes = plan_passes(rows, 512, invariant=True, equal_rows=True)
    assert all(
        len({entry.row for entry in entries}) * len([e for e in entries if e.row == entries[0].row]) == len(entries) for entries in passes
    )
    assert sorted(sorted({entry.row for entry in entries}) for entries in passes) == [[0, 2], [1], [3], [4]]
    assert _in_order(passes, rows)
    # negative control: without equal_rows the short pieces share one pass, the lengths mixed
    assert [0, 1, 2, 3] in [sorted({entry.row for entry in entries}) for entries in plan_passes(rows, 512, invariant=True)]
