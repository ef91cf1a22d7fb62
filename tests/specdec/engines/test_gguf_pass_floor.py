"""The load-time probe of whether a llama.cpp build scores a lone token as it does inside longer passes."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.engines.gguf_pass_floor import PROBE_LENGTHS, one_token_passes_match


class _Kernels:
    """A fake llama_decode: each position's logits a function of its sequence's tokens so far, nudged by `rounding`
    in the passes whose shape it names ("one token", "several sequences")."""

    def __init__(self, rounding: str | None = None) -> None:
        self.rounding = rounding
        self.cells: dict[int, list[int]] = {0: [], 1: []}
        self.cleared: list[tuple[int, int]] = []

    def decode(self, tokens):
        out = []
        shape = "one token" if len(tokens) == 1 else "several sequences" if len({t[0] for t in tokens}) > 1 else "one sequence"
        for seq_id, position, token_id, wants in tokens:
            cells = self.cells[seq_id]
            assert position == len(cells), "positions follow the sequence's cells"
            cells.append(token_id)
            if wants:
                logits = np.array([sum(cells) % 97, len(cells)], dtype=np.float32)
                out.append(logits + (1e-3 if shape == self.rounding else 0.0))
        return out

    def clear(self, seq_id: int, position: int) -> None:
        self.cleared.append((seq_id, position))
        del self.cells[seq_id][position:]


@pytest.mark.parametrize("rounding", ["one token", "several sequences"])
def test_a_lone_token_rounded_differently_alone_or_beside_another_sequence_is_found(rounding):
    kernels = _Kernels(rounding)
    assert not one_token_passes_match(kernels.decode, kernels.clear, 1000, session_cells=4096, two_sequences=True)
    assert kernels.cells == {0: [], 1: []}  # the probe leaves no cells behind, found or not


def test_negative_control_kernels_that_agree_in_every_shape_need_no_padding():
    kernels = _Kernels()
    assert one_token_passes_match(kernels.decode, kernels.clear, 1000, session_cells=4096, two_sequences=True)
    assert kernels.cells == {0: [], 1: []}


def test_sessions_too_short_for_the_long_probe_try_the_short_one_only():
    kernels = _Kernels()
    assert one_token_passes_match(kernels.decode, kernels.clear, 1000, session_cells=PROBE_LENGTHS[0] + 8, two_sequences=False)
    assert max(position for _, position in kernels.cleared) <= PROBE_LENGTHS[0]
