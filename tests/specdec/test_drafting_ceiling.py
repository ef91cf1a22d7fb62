"""The most drafting can gain at one session, from step costs timed at load, and the timings themselves."""

from __future__ import annotations

import pytest
from generation_support import ReportingDrafter

from specdec.drafters import ModelDrafter
from specdec.drafters.base import DraftBlock
from specdec.drafting_ceiling import CONTEXT_TOKENS, TIMED_STEPS, StepCosts, time_draft_token, time_target_passes
from specdec.enums import TokenSource


def test_the_bound_is_the_slower_of_the_draft_and_the_verify_pass():
    # The default pair on a slow 2-core CPU: a draft token costs what a target token does.
    assert StepCosts(12.2, 29.2, 4, draft_ms=12.6).gain_bound() == pytest.approx(12.2 / 12.6)
    # A GPU-like pair: the draft 10x cheaper, the 5-token pass 1.2x a one-token one: the pass bounds it.
    assert StepCosts(20.0, 24.0, 4, draft_ms=2.0).gain_bound() == pytest.approx(5 * 20 / 24)
    # No draft step known (a model-free drafter, or none measured): the verify pass alone.
    assert StepCosts(10.0, 40.0, 4).gain_bound() == pytest.approx(1.25)
    assert "at most 0.97x" in StepCosts(12.2, 29.2, 4, draft_ms=12.6).describe()


class _Recording:
    """A target sequence that records each advance: (sequence length, logits asked for)."""

    def __init__(self, lm) -> None:
        self.lm, self.calls, self.released = lm, [], False

    def advance(self, sequence, num_logits=1):
        self.calls.append((len(sequence), num_logits))
        return self.lm.advance(sequence, num_logits)

    def release(self):
        self.released = True
        self.lm.release()


def test_target_passes_are_timed_on_a_served_sequence_and_released(tiny_target):
    opened = []

    def open_sequence(reserve):
        opened.append(_Recording(tiny_target.open_sequence(reserve)))
        return opened[-1]

    one_ms, block_ms = time_target_passes(open_sequence, tiny_target.vocab_size, num_draft_tokens=4)
    assert one_ms > 0 and block_ms > 0
    (lm,) = opened
    # The context once, then each timed pass rolls the last one back: one token and K + 1 in turns, after the context.
    assert lm.calls == [(CONTEXT_TOKENS, 1), *[(CONTEXT_TOKENS + 1, 1), (CONTEXT_TOKENS + 5, 5)] * (TIMED_STEPS + 1)]
    assert lm.released


def test_a_draft_token_is_timed_through_a_session_of_the_drafter(tiny_draft):
    assert time_draft_token(ModelDrafter(tiny_draft.model), tiny_draft.vocab_size) > 0
    # The first propose (the prompt's prefill) is not a step, nor is the untimed first step; then the least, not a
    # median or mean (one slow sample is interference).
    reported = [500.0, 1.0, 9.0, 30.0, 5.0, 4.0, 6.0, 3.5, 8.0, 7.0, 6.0, 99.0]
    assert time_draft_token(ReportingDrafter(ModelDrafter(tiny_draft.model), reported), tiny_draft.vocab_size) == 3.5


def test_steps_a_lookup_proposed_do_not_count(tiny_draft):
    """Negative control for the filter: the same drafter, every block a prompt lookup's, has no draft step to time."""
    lookups = ReportingDrafter(ModelDrafter(tiny_draft.model), [1.0] * 12, TokenSource.LOOKUP)
    assert time_draft_token(lookups, tiny_draft.vocab_size) is None


class _NothingToPropose:
    """A session that never has a candidate (an n-gram drafter without a match)."""

    def open(self, request):
        return self

    def propose(self, num_tokens):
        return DraftBlock.empty()

    def feedback(self, num_accepted, appended_ids):
        pass

    def close(self):
        pass


def test_an_empty_block_is_no_step():
    assert time_draft_token(_NothingToPropose(), 100) is None
