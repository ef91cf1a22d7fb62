"""Overlapped drafting in the core: blocks drafted ahead equal the blocks a later propose draws,
a held guess sends them, a wrong one is discarded and stops the pre-draft, close stops it too."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
import torch

from specdec.drafters import DraftRequest, ModelDrafter
from specdec.drafters.base import CommittedSequence, DraftBlock
from specdec.drafters.overlap import OverlappedDraftSession
from specdec.enums import AcceptanceMode
from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams, SparseDistribution, densify

MODES = [
    (AcceptanceMode.GREEDY, SamplingParams(temperature=0)),
    (AcceptanceMode.COUPLED, SamplingParams(temperature=0.9)),
    (AcceptanceMode.REJECTION, SamplingParams(temperature=0.9)),
]


class CountingSession:
    """A deterministic drafter session: the candidate after a sequence is (sum of it) mod 97.

    `on_propose` runs before each propose (to land feedback or a close mid-pre-draft).
    """

    def __init__(self, prompt: list[int]) -> None:
        self.committed = CommittedSequence(list(prompt))
        self.proposed: list[int] = []  # num_tokens of each propose
        self.on_propose = lambda: None
        self.closed_after: int | None = None  # how many proposes had run when close came

    def propose(self, num_tokens: int) -> DraftBlock:
        self.on_propose()
        self.proposed.append(num_tokens)
        sequence, candidates = list(self.committed.token_ids), []
        for _ in range(num_tokens):
            candidates.append(sum(sequence) % 97)
            sequence.append(candidates[-1])
        block = DraftBlock(torch.tensor(candidates, dtype=torch.long))
        self.committed.record_block(block)
        return block

    def feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> None:
        self.committed.apply_feedback(num_accepted, appended_ids, accepted_nodes)

    def close(self) -> None:
        self.closed_after = len(self.proposed)


def _next_own_token(sequence: list[int]) -> int:
    return sum(sequence) % 97


def test_a_held_guess_sends_the_block_drafted_ahead_and_commits_as_a_plain_session_would():
    inner = CountingSession([3, 4])
    session = OverlappedDraftSession(inner)
    block = session.propose(3).candidate_ids.tolist()
    session.draft_ahead()
    guess = _next_own_token([3, 4, *block])
    session.feedback(3, [guess])
    ahead = session.propose(2)
    plain = CountingSession([3, 4])
    plain.propose(3)
    plain.feedback(3, [guess])
    assert ahead.candidate_ids.tolist() == plain.propose(2).candidate_ids.tolist()
    assert session.report.outcome == "used" and session.report.predrafted == 2
    assert inner.committed == plain.committed  # the same sequence, the same last block
    assert inner.proposed == [3, 1, 1, 1, 1]  # the block, then the guess and K = 3 candidates past it, one at a time


def test_a_held_guess_drafts_on_when_the_next_k_is_larger_than_what_was_drafted_ahead():
    session = OverlappedDraftSession(CountingSession([1]))
    block = session.propose(2).candidate_ids.tolist()
    session.draft_ahead()
    session.feedback(2, [_next_own_token([1, *block])])
    plain = CountingSession([1])
    plain.propose(2)
    plain.feedback(2, [_next_own_token([1, *block])])
    assert session.propose(5).candidate_ids.tolist() == plain.propose(5).candidate_ids.tolist()
    assert session.report.predrafted == 2 and session.committed == plain.committed


@pytest.mark.parametrize("first_token_guessed", [True, False])
def test_an_empty_first_block_drafts_ahead_past_the_target_s_first_token(first_token_guessed):
    inner = CountingSession([3, 4])
    session = OverlappedDraftSession(inner, first_ahead_tokens=3)
    assert len(session.propose(0)) == 0  # the target decodes the first token from its own prefill
    session.draft_ahead()
    assert inner.proposed == [0, 1, 1, 1, 1]  # meanwhile: the guess of that token, then K = 3 past it
    first_token = _next_own_token([3, 4]) + (0 if first_token_guessed else 1)
    session.feedback(0, [first_token])
    plain = CountingSession([3, 4])
    plain.propose(0)
    plain.feedback(0, [first_token])
    assert session.propose(3).candidate_ids.tolist() == plain.propose(3).candidate_ids.tolist()
    assert session.report.outcome == ("used" if first_token_guessed else "discarded") and inner.committed == plain.committed
    session.propose(0)
    session.draft_ahead()  # later empty blocks (drafting paused) arm nothing
    assert session.report.outcome is None and inner.proposed[-1] == 0


@pytest.mark.parametrize("num_accepted,wrong_bonus", [(1, False), (3, True)], ids=["rejected-candidate", "other-bonus"])
def test_a_wrong_guess_is_discarded_and_the_block_drafted_anew(num_accepted, wrong_bonus):
    inner = CountingSession([5, 6, 7])
    session = OverlappedDraftSession(inner)
    block = session.propose(3).candidate_ids.tolist()
    session.draft_ahead()
    appended = [_next_own_token([5, 6, 7, *block]) + (1 if wrong_bonus else 0)]
    session.feedback(num_accepted, appended)
    plain = CountingSession([5, 6, 7])
    plain.propose(3)
    plain.feedback(num_accepted, appended)
    assert session.propose(3).candidate_ids.tolist() == plain.propose(3).candidate_ids.tolist()
    assert session.report.outcome == "discarded" and session.report.predrafted == 0
    assert inner.committed == plain.committed


class MixedWidthSession(CountingSession):
    """CountingSession with q as prompt lookup behind a model sends it: 1 wide (a point mass, as if
    looked up) for a block of even candidates only, else 3 wide (as if drafted by the model)."""

    def propose(self, num_tokens: int) -> DraftBlock:
        candidates = super().propose(num_tokens).candidate_ids
        width = 1 if all(c % 2 == 0 for c in candidates.tolist()) else 3
        rows = [_q_of(c, width) for c in candidates.tolist()]
        return DraftBlock(candidates, SparseDistribution(torch.cat([ids for ids, _ in rows]), torch.cat([probs for _, probs in rows])))


def _q_of(candidate: int, width: int = 3) -> SparseDistribution:  # [1, width]
    if candidate % 2 == 0:  # a point mass, padded by hand where the block is wider
        return SparseDistribution(torch.tensor([[candidate] * width]), torch.tensor([[1.0] + [0.0] * (width - 1)], dtype=torch.float64))
    ids, probs = [candidate, candidate + 1, candidate + 2], [0.5, 0.3, 0.2]
    return SparseDistribution(torch.tensor([ids]), torch.tensor([probs], dtype=torch.float64))


@pytest.mark.parametrize("next_k", [3, 6], ids=["drafted-ahead", "drafted-ahead-and-extended"])
def test_a_held_guess_joins_steps_whose_q_have_different_widths_into_the_same_q(next_k):
    # The draft service's default (overlap + prompt lookup + rejection at T > 0) crashed here:
    # torch.cat of a 1-wide looked-up q with a draft_top_k-wide model q.
    session = OverlappedDraftSession(MixedWidthSession([3, 4]))
    block = session.propose(3).candidate_ids.tolist()
    session.draft_ahead()
    session.feedback(3, [_next_own_token([3, 4, *block])])
    joined = session.propose(next_k)
    candidates = joined.candidate_ids.tolist()
    assert len(candidates) == next_k and session.report.outcome == "used"
    assert {c % 2 for c in candidates} == {0, 1}  # both widths are in the block
    expected = torch.cat([densify(_q_of(c), 100) for c in candidates])
    assert torch.equal(densify(joined.draft_probs, 100), expected)


def test_feedback_that_contradicts_the_guess_stops_the_pre_draft_between_tokens():
    inner = CountingSession([2])
    session = OverlappedDraftSession(inner)
    session.propose(8)
    # The feedback lands while the pre-draft drafts its third token (the guess, c1, then this one).
    inner.on_propose = lambda: len(inner.proposed) == 3 and session.feedback(0, [11])
    session.draft_ahead()
    assert inner.proposed == [8, 1, 1, 1]  # stopped after the token in flight, not K = 8 past the guess


@pytest.mark.parametrize("next_k", [0, 1, 2])
def test_a_smaller_next_k_stops_the_pre_draft_at_what_that_block_needs(next_k):
    inner = CountingSession([2])
    session = OverlappedDraftSession(inner)
    block = session.propose(8).candidate_ids.tolist()
    guess = _next_own_token([2, *block])

    def held_guess_and_next_k_land_after_the_guess() -> None:
        if len(inner.proposed) == 2:  # the guess drafted; c1 in flight
            session.feedback(8, [guess])
            session.expect(next_k)

    inner.on_propose = held_guess_and_next_k_land_after_the_guess
    session.draft_ahead()
    # the guess and next_k candidates past it (at least the token in flight), not K = 8 past the guess
    assert inner.proposed == [8, 1, *[1] * max(1, next_k)]
    plain = CountingSession([2])
    plain.propose(8)
    plain.feedback(8, [guess])
    assert session.propose(next_k).candidate_ids.tolist() == plain.propose(next_k).candidate_ids.tolist()
    assert session.committed == plain.committed


def test_feedback_is_validated_at_once_even_with_a_pre_draft_armed():
    session = OverlappedDraftSession(CountingSession([2]))
    session.propose(3)
    with pytest.raises(ValueError, match="num_accepted"):
        session.feedback(4, [1])


def test_close_mid_pre_draft_stops_it_and_then_frees_the_session():
    inner = CountingSession([9])
    session = OverlappedDraftSession(inner)
    session.propose(60)
    first_step, release = threading.Event(), threading.Event()

    def slow_step() -> None:
        first_step.set()
        release.wait(5)

    inner.on_propose = slow_step
    drafting = threading.Thread(target=session.draft_ahead)
    drafting.start()
    assert first_step.wait(5)
    closing = threading.Thread(target=session.close)
    closing.start()
    closing.join(0.2)
    assert closing.is_alive() and inner.closed_after is None  # close waits for the token in flight
    release.set()
    drafting.join(5)
    closing.join(5)
    assert not drafting.is_alive() and not closing.is_alive()
    assert inner.closed_after == len(inner.proposed) <= 3  # stopped early, closed after the last forward pass
    session.draft_ahead()  # a pre-draft that was still queued does nothing after close
    assert inner.closed_after == len(inner.proposed)


def test_a_pre_draft_error_surfaces_on_the_next_propose():
    inner = CountingSession([1])
    session = OverlappedDraftSession(inner)
    session.propose(2)

    def fail() -> None:
        raise RuntimeError("device lost")

    inner.on_propose = fail
    session.draft_ahead()  # never raises: it runs on a worker nobody may be waiting for
    session.feedback(2, [1])
    with pytest.raises(RuntimeError, match="device lost"):
        session.propose(2)


class _AheadRecorder:
    """A drafter whose sessions draft ahead after every block (as the service does) and record blocks."""

    name = "ahead"

    def __init__(self, drafter, ahead: bool) -> None:
        self.drafter, self.ahead = drafter, ahead
        self.blocks: list[DraftBlock] = []
        self.outcomes: list[str | None] = []

    def open(self, request: DraftRequest):
        recorder, session = self, OverlappedDraftSession(self.drafter.open(request))

        class Recording:
            committed = session.committed

            def propose(self, num_tokens: int) -> DraftBlock:
                block = session.propose(num_tokens)
                recorder.blocks.append(block)
                recorder.outcomes.append(session.report.outcome)
                if recorder.ahead:
                    session.draft_ahead()
                return block

            def feedback(self, num_accepted: int, appended_ids, accepted_nodes=None) -> None:
                session.feedback(num_accepted, appended_ids, accepted_nodes)

            def close(self) -> None:
                session.close()

        return Recording()


@pytest.mark.parametrize("mode,sampling", MODES, ids=[mode.value for mode, _ in MODES])
def test_blocks_and_outputs_are_the_same_with_and_without_drafting_ahead(tiny_target, tiny_draft, mode, sampling):
    prompt = tiny_target.tokenizer("The quick brown fox jumps over the lazy dog. The quick brown fox")["input_ids"]
    runs = []
    for ahead in (False, True):
        drafter = _AheadRecorder(ModelDrafter(tiny_draft.model), ahead)
        request = GenerationRequest(
            prompt_ids=prompt,
            max_tokens=40,
            sampling=sampling,
            seed=11,
            acceptance=mode,
            num_draft_tokens=4,
            ignore_eos=True,
            draft_top_k=8,
        )
        runs.append((SpeculativeGenerator(tiny_target, drafter).generate(request).token_ids, drafter))
    (plain_ids, plain), (ahead_ids, ahead) = runs
    assert ahead_ids == plain_ids
    assert [b.candidate_ids.tolist() for b in ahead.blocks] == [b.candidate_ids.tolist() for b in plain.blocks]
    if mode is AcceptanceMode.REJECTION:  # each q is the one its candidate was drawn from (a 1- vs 2-token pass: last bits)
        for mine, theirs in zip(ahead.blocks, plain.blocks):
            assert torch.equal(mine.draft_probs.token_ids, theirs.draft_probs.token_ids)
            assert torch.allclose(mine.draft_probs.probs, theirs.draft_probs.probs, atol=1e-5)
    assert "discarded" in ahead.outcomes  # the random tiny draft is often wrong


def test_every_guess_holds_when_the_draft_is_the_target(tiny_target):
    prompt = tiny_target.tokenizer("Once upon a time")["input_ids"]
    drafter = _AheadRecorder(ModelDrafter(tiny_target.model), ahead=True)
    request = GenerationRequest(
        prompt_ids=prompt, max_tokens=30, sampling=SamplingParams(temperature=0), num_draft_tokens=4, ignore_eos=True
    )
    SpeculativeGenerator(tiny_target, drafter).generate(request)
    assert drafter.outcomes[0] is None and len(drafter.outcomes) >= 5
    assert drafter.outcomes[1:].count("used") >= len(drafter.outcomes) - 2  # a float near-tie may flip one guess
