"""Adaptive K in the real in-process loop on the tiny pair: where it converges, and that it stays lossless."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
import torch

from specdec.cli.tiny_pair import make_tiny_pair
from specdec.drafters import ModelDrafter
from specdec.drafters.base import CommittedSequence, DraftBlock, DraftRequest
from specdec.engines.hf import load_model
from specdec.generation import SpeculativeGenerator
from specdec.output import RoundInfo
from specdec.request import GenerationRequest, GenerationStats
from specdec.sampling import SamplingParams
from specdec.target_session import TargetSession

GREEDY = SamplingParams(temperature=0)
MAX_K = 8
WARMUP = 1 + 2 * 2  # the first drafting round, then AdaptiveKSettings.warmup_rounds at each end of the range


@pytest.fixture(scope="module")
def unrelated_draft(tmp_path_factory):
    """Same tokenizer, weights from another seed: its guesses are (nearly) never the target's."""
    paths = make_tiny_pair(tmp_path_factory.mktemp("unrelated-pair"), seed=1)
    return load_model(paths.draft, device="cpu", dtype="float32")


def modelled_costs(monkeypatch, draft_ms_per_token: float, target_fixed_ms: float, target_ms_per_token: float) -> None:
    """Replace the step times a round measured with a cost model before the controller sees them.

    On two shared cores the measured times are mostly other processes' noise (the controller copes,
    see test_adaptive_k.py, but a 25-round generation is too short to assert on). Acceptance, the
    loop and the wiring stay real; only the clock is modelled.
    """
    learn = TargetSession.learn_from_round

    def learn_with_modelled_costs(session: TargetSession, info: RoundInfo) -> None:
        k = info.num_candidates
        learn(
            session,
            replace(
                info,
                draft_ms=draft_ms_per_token * k,
                target_ms=target_fixed_ms + target_ms_per_token * (k + 1),
                transport_ms=0.2 if k else 0.0,
            ),
        )

    monkeypatch.setattr(TargetSession, "learn_from_round", learn_with_modelled_costs)


@pytest.fixture
def gpu_like_costs(monkeypatch):
    """A draft at a tenth of a target step; scoring 9 tokens costs little more than 1 (a GPU)."""
    modelled_costs(monkeypatch, draft_ms_per_token=1.0, target_fixed_ms=10.0, target_ms_per_token=0.1)


@pytest.fixture
def self_draft_costs(monkeypatch):
    """Drafting with the target itself: every candidate costs a full target step."""
    modelled_costs(monkeypatch, draft_ms_per_token=10.0, target_fixed_ms=10.0, target_ms_per_token=0.1)


class SequenceDrafter:
    """Proposes the next tokens of a fixed continuation at no compute cost.

    With the target's own greedy output it is a draft equal to the target whose proposals cost
    nothing: what a fast draft on its own device looks like to the verifier.
    """

    name = "sequence"

    def __init__(self, continuation: Sequence[int]) -> None:
        self.continuation = list(continuation)

    def open(self, request: DraftRequest) -> _SequenceSession:
        return _SequenceSession(self.continuation, request)


class _SequenceSession:
    def __init__(self, continuation: list[int], request: DraftRequest) -> None:
        self.continuation = continuation
        self.prompt_length = len(request.prompt_ids)
        self.committed = CommittedSequence(list(request.prompt_ids))

    def propose(self, num_tokens: int) -> DraftBlock:
        start = len(self.committed.token_ids) - self.prompt_length
        block = DraftBlock(torch.tensor(self.continuation[start : start + num_tokens], dtype=torch.long))
        self.committed.record_block(block)
        return block

    def feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> None:
        self.committed.apply_feedback(num_accepted, appended_ids)  # chains only: accepted_nodes is for trees

    def close(self) -> None:
        pass


def _request(prompt_ids, **fields) -> GenerationRequest:
    return GenerationRequest(
        prompt_ids=prompt_ids,
        **{"max_tokens": 200, "ignore_eos": True, "sampling": GREEDY, "num_draft_tokens": MAX_K, "adaptive_k": True, **fields},
    )


def _chosen_ks(target, drafter, request) -> tuple[list[int], list[int], GenerationStats]:
    """K per round after round 0 (which never drafts: its token is the target's prefill's)."""
    stats, ks, token_ids = GenerationStats(), [], []
    for index, chunk in enumerate(SpeculativeGenerator(target, drafter).stream(request, stats)):
        ks.append(chunk.round.chosen_k)
        token_ids.extend(chunk.token_ids)
        assert chunk.round.num_candidates <= chunk.round.chosen_k <= (MAX_K if index else 0)
    return ks[1:], token_ids, stats


def _median(values: list[int]) -> int:
    return sorted(values)[len(values) // 2]


@pytest.fixture(scope="module")
def greedy_reference(tiny_target, prompt_ids):
    return SpeculativeGenerator(tiny_target).generate(_request(prompt_ids, speculative=False)).token_ids


# --- Convergence ---------------------------------------------------------------------------------


def test_the_target_as_its_own_cheap_draft_converges_to_the_largest_k(tiny_target, prompt_ids, greedy_reference, gpu_like_costs):
    ks, token_ids, stats = _chosen_ks(tiny_target, ModelDrafter(tiny_target.model), _request(prompt_ids))
    assert token_ids == greedy_reference and stats.acceptance_rate == 1.0
    assert _median(ks[WARMUP:]) == MAX_K


def test_an_unrelated_draft_converges_to_drafting_nothing_and_keeps_probing(
    tiny_target, unrelated_draft, prompt_ids, greedy_reference, gpu_like_costs
):
    # Negative control for the test above: the same costs, a draft whose guesses are wrong.
    ks, token_ids, stats = _chosen_ks(tiny_target, ModelDrafter(unrelated_draft.model), _request(prompt_ids))
    assert token_ids == greedy_reference and stats.acceptance_rate < 0.15
    assert _median(ks[WARMUP:]) == 0 and max(ks[len(ks) // 2 :]) <= 1
    assert ks[WARMUP:].count(1) >= 5  # the probes: a better draft could bring speculation back


def test_a_perfect_draft_that_costs_a_target_step_per_token_stops_drafting(tiny_target, prompt_ids, greedy_reference, self_draft_costs):
    ks, token_ids, stats = _chosen_ks(tiny_target, ModelDrafter(tiny_target.model), _request(prompt_ids))
    assert token_ids == greedy_reference and stats.acceptance_rate == 1.0
    assert _median(ks[WARMUP:]) == 0


def test_a_free_perfect_draft_converges_to_the_largest_k_on_measured_costs(tiny_target, prompt_ids, greedy_reference):
    # Real clocks: only a loose bound, as step times here are shared-machine noise.
    ks, token_ids, stats = _chosen_ks(tiny_target, SequenceDrafter(greedy_reference), _request(prompt_ids))
    assert token_ids == greedy_reference and stats.acceptance_rate == 1.0
    assert max(ks[WARMUP:]) >= 2


def test_min_draft_tokens_keeps_drafting_where_it_does_not_pay(tiny_target, unrelated_draft, prompt_ids, greedy_reference):
    ks, token_ids, _ = _chosen_ks(tiny_target, ModelDrafter(unrelated_draft.model), _request(prompt_ids, max_tokens=60, min_draft_tokens=2))
    assert token_ids == greedy_reference[:60]
    assert all(k >= 2 for k in ks[:-2])  # the last rounds are capped by max_tokens


def test_the_budget_still_stops_at_max_tokens(tiny_target, prompt_ids, greedy_reference):
    for max_tokens in (1, 2, 5, 9):
        ks, token_ids, _ = _chosen_ks(tiny_target, SequenceDrafter(greedy_reference), _request(prompt_ids, max_tokens=max_tokens))
        assert token_ids == greedy_reference[:max_tokens]
        # Round 0 emitted one token; round 1 drafts at most what leaves room for the target's own.
        assert ks[:1] == ([min(MAX_K, max_tokens - 2)] if max_tokens > 1 else [])


# --- Lossless ------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["tiny_draft", "self", "unrelated"])
def test_greedy_with_adaptive_k_equals_target_only(tiny_target, tiny_draft, unrelated_draft, prompt_ids, greedy_reference, which):
    model = {"tiny_draft": tiny_draft.model, "self": tiny_target.model, "unrelated": unrelated_draft.model}[which]
    _, token_ids, stats = _chosen_ks(tiny_target, ModelDrafter(model), _request(prompt_ids, max_tokens=80))
    assert token_ids == greedy_reference[:80] and stats.draft_tokens > 0
    if which == "self":
        assert stats.acceptance_rate == 1.0


@pytest.mark.parametrize("seed", [0, 7])
def test_coupled_with_adaptive_k_equals_target_only_with_the_same_seed(tiny_target, tiny_draft, unrelated_draft, prompt_ids, seed):
    sampling = SamplingParams(temperature=0.8)
    reference = SpeculativeGenerator(tiny_target).generate(
        _request(prompt_ids, max_tokens=80, sampling=sampling, seed=seed, speculative=False)
    )
    for model in (tiny_draft.model, unrelated_draft.model):
        request = _request(prompt_ids, max_tokens=80, sampling=sampling, seed=seed, acceptance="coupled")
        ks, token_ids, _ = _chosen_ks(tiny_target, ModelDrafter(model), request)
        assert token_ids == reference.token_ids
        assert len(set(ks)) > 1  # K really changed during the generation
    other_seed = SpeculativeGenerator(tiny_target).generate(
        _request(prompt_ids, max_tokens=80, sampling=sampling, seed=seed + 1, speculative=False)
    )
    assert other_seed.token_ids != reference.token_ids  # negative control: the comparison can fail


def test_fixed_k_is_unchanged_when_adaptive_k_is_off(tiny_target, tiny_draft, prompt_ids):
    emitted = 0
    for index, chunk in enumerate(
        SpeculativeGenerator(tiny_target, ModelDrafter(tiny_draft.model)).stream(
            _request(prompt_ids, max_tokens=40, adaptive_k=False, num_draft_tokens=3)
        )
    ):
        assert chunk.round.chosen_k == (min(3, 40 - emitted - 1) if index else 0)  # round 0 never drafts
        emitted += len(chunk.token_ids)


def test_target_only_rounds_report_no_chosen_k(tiny_target, prompt_ids):
    chunks = list(SpeculativeGenerator(tiny_target).stream(_request(prompt_ids, max_tokens=10, speculative=False)))
    assert [chunk.round.chosen_k for chunk in chunks] == [None] * 10
