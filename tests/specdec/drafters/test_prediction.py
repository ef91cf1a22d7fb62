"""Predicted outputs: alignment with the prediction, composition with other drafters, losslessness."""

from __future__ import annotations

import pytest
from lossless_support import always_accept, exact_joint
from scipy import stats

from specdec.drafters import ModelDrafter
from specdec.drafters.base import DraftRequest
from specdec.drafters.prediction import PredictionAlignment, PredictionDrafter, PredictionSettings
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.enums import AcceptanceMode, TokenSource
from specdec.errors import DraftUnavailableError
from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

PREDICTION = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
GREEDY = SamplingParams(temperature=0)


def _continuation(alignment: PredictionAlignment, generated: list[int], num_tokens: int = 3) -> list[int]:
    return alignment.continuation(generated, num_tokens, max_ngram=4, min_ngram=1)


def test_nothing_generated_yet_proposes_the_prediction_s_start():
    assert _continuation(PredictionAlignment(PREDICTION), []) == [10, 11, 12]
    assert _continuation(PredictionAlignment([]), []) == []


def test_a_copy_follows_the_prediction_round_after_round():
    alignment = PredictionAlignment(PREDICTION)
    assert _continuation(alignment, [10, 11, 12, 13]) == [14, 15, 16]
    assert _continuation(alignment, PREDICTION[:8], 5) == [18, 19]
    assert _continuation(alignment, PREDICTION) == []  # the prediction is used up


@pytest.mark.parametrize(
    "generated,expected",
    [
        ([10, 11, 12, 99, 98, 13], [14, 15, 16]),  # inserted tokens: realigned right after the insertion
        ([10, 11, 12, 15], [16, 17, 18]),  # deleted tokens
        ([10, 11, 12, 77, 14], [15, 16, 17]),  # a rewritten token
    ],
)
def test_an_edit_realigns_a_token_after_it(generated, expected):
    alignment = PredictionAlignment(PREDICTION)
    assert _continuation(alignment, generated[:3]) == [13, 14, 15]
    assert _continuation(alignment, generated) == expected


def test_the_occurrence_nearest_to_the_expected_place_wins():
    prediction = [1, 5, 2, 3, 5, 4, 6, 7, 5, 8]  # token 5 three times
    alignment = PredictionAlignment(prediction)
    assert _continuation(alignment, [1, 5, 2, 3], 1) == [5]
    assert _continuation(alignment, [1, 5, 2, 3, 9, 5], 2) == [4, 6]  # expected near index 6: the 5 at index 4
    assert _continuation(alignment, [1, 5, 2, 3, 9, 5, 4, 6, 7, 9, 9, 5], 2) == [8]


def test_longer_suffixes_are_preferred_over_nearer_single_tokens():
    prediction = [1, 2, 3, 9, 4, 3, 5]
    alignment = PredictionAlignment(prediction)
    # 3 occurs twice; the 2-gram (2, 3) pins it to index 2 although index 5 is nearer to the expected place
    assert _continuation(alignment, [7, 7, 7, 7, 7, 2, 3], 1) == [9]


def test_text_that_left_the_prediction_proposes_nothing():
    alignment = PredictionAlignment(PREDICTION)
    assert _continuation(alignment, [10, 11]) == [12, 13, 14]
    assert _continuation(alignment, [10, 11, 1, 2, 3]) == []


def test_a_preamble_proposes_the_prediction_s_start_until_the_output_enters_it():
    prediction = [10, 11, 12, 13, 14, 15, 13, 16, 17]  # a file, its lines ending with 13 (a newline)
    alignment = PredictionAlignment(prediction)
    assert _continuation(alignment, [7, 8]) == [10, 11, 12]  # an opening fence: nothing matches
    # a lone newline matches one token after the first line: still the start, not that line's successor
    assert _continuation(alignment, [7, 8, 13]) == [10, 11, 12]
    assert _continuation(alignment, [7, 8, 13, 10]) == [11, 12, 13]  # one token accepted where the start put it: entered
    late = PredictionAlignment(prediction)
    assert _continuation(late, [7]) == [10, 11, 12]
    assert _continuation(late, [7, 8, 13, 10], 2) == [11, 12]  # the output begins the prediction later than proposed
    assert _continuation(alignment, [7, 8, 13, 10, 11, 12, 99]) == []  # entered: text that leaves it proposes nothing


def test_negative_control_without_the_preamble_rule_a_lone_newline_picks_a_line_at_random():
    prediction = [10, 11, 12, 13, 13, 14, 15, 16, 17]
    alignment = PredictionAlignment(prediction)
    alignment.entered = True  # as if the output had entered the prediction already
    assert _continuation(alignment, [7, 8, 13]) != [10, 11, 12]


def _request(prediction, acceptance=AcceptanceMode.GREEDY, tree=None) -> DraftRequest:
    return DraftRequest(
        prompt_ids=[1, 2], sampling=GREEDY, acceptance=acceptance, seed=0, vocab_size=64, tree=tree, prediction_ids=tuple(prediction)
    )


def test_predicted_blocks_are_marked_and_rejection_mode_gets_a_point_mass_q():
    session = PredictionDrafter(None, PredictionSettings(inner_tokens=2)).open(_request(PREDICTION, AcceptanceMode.REJECTION))
    block = session.propose(4)
    assert block.candidate_ids.tolist() == [10, 11, 12, 13] and block.sources == (TokenSource.PREDICTION,) * 4
    assert block.draft_probs.probs.flatten().tolist() == [1.0] * 4
    greedy = PredictionDrafter(None, PredictionSettings(inner_tokens=2)).open(_request(PREDICTION)).propose(4)
    assert greedy.draft_probs is None


def test_after_a_failed_prediction_the_wrapped_drafter_gets_backed_off_rounds(tiny_draft):
    inner = ModelDrafter(tiny_draft.model)
    session = PredictionDrafter(inner, PredictionSettings(inner_tokens=2, max_backoff=4)).open(_request(PREDICTION))
    sources = []
    for _ in range(8):
        block = session.propose(5)
        sources.append(block.sources[:1])
        if block.sources[:1] != (TokenSource.PREDICTION,):
            assert len(block) <= 2  # the wrapped drafter keeps its own K
        session.feedback(0, [15])  # the target rejects every candidate (15 keeps the prediction aligned)
    # predicted, then 1, 2, 4 rounds of the wrapped drafter between tries
    assert [source == (TokenSource.PREDICTION,) for source in sources] == [True, False, True, False, False, True, False, False]
    session.close()


def test_predicted_blocks_double_while_accepted_in_full_and_restart_after_a_partial_acceptance():
    prediction = list(range(100, 200))
    session = PredictionDrafter(None, PredictionSettings(inner_tokens=2, start_tokens=2, max_tokens=8)).open(_request(prediction))
    lengths = []
    for accept_all in (True, True, True, True, False, True):
        block = session.propose(6)  # the round's budget caps the growth below max_tokens
        lengths.append(len(block))
        candidates = block.candidate_ids.tolist()
        accepted = candidates if accept_all else candidates[:1]
        bonus = prediction[prediction.index(accepted[-1]) + 1]  # the target goes on copying the prediction
        session.feedback(len(accepted), [bonus])
    assert lengths == [2, 4, 6, 6, 6, 2]
    session.close()


# --- Through the speculative loop on the tiny pair -----------------------------------------------


def _run(target, drafter, prompt_ids, **fields):
    request = GenerationRequest(prompt_ids=prompt_ids, **{"max_tokens": 48, "ignore_eos": True, **fields})
    return SpeculativeGenerator(target, drafter).generate(request)


@pytest.fixture(scope="module")
def reference(tiny_target, prompt_ids):
    return _run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False)


def _edited(token_ids: list[int]) -> list[int]:
    """The output with a small edit: a token rewritten, two inserted, one deleted."""
    edited = list(token_ids)
    edited[10] = (edited[10] + 1) % 200
    edited[20:20] = [3, 4]
    del edited[33]
    return edited


class _DiesOnFirstProposal:
    """A wrapped drafter standing in for a draft service that misses its deadline the first time it is asked."""

    name = "dies"

    def __init__(self, inner) -> None:
        self.inner = inner

    def open(self, request):
        session = self.inner.open(request)

        class Session:
            committed = session.committed

            def propose(self, num_tokens):
                raise DraftUnavailableError("the draft missed its per-round deadline")

            def feedback(self, num_accepted, appended_ids, accepted_nodes=None):
                session.feedback(num_accepted, appended_ids, accepted_nodes)

            def close(self):
                session.close()

        return Session()


def test_a_failing_wrapped_drafter_leaves_the_prediction_drafting(tiny_target, tiny_draft, prompt_ids, reference):
    drafter = _DiesOnFirstProposal(ModelDrafter(tiny_draft.model))  # the generator wraps it with the request's prediction
    result = _run(tiny_target, drafter, prompt_ids, sampling=GREEDY, prediction_ids=_edited(reference.token_ids))
    assert result.token_ids == reference.token_ids
    # The wrapped drafter is first asked after the edit at index 10; the prediction still drafts what follows it.
    assert result.stats.accepted_prediction_tokens > 20


@pytest.mark.parametrize("inner", ["none", "model", "lookup+model"])
def test_greedy_with_an_exact_prediction_is_identical_and_accepts_it(tiny_target, tiny_draft, prompt_ids, reference, inner):
    drafter = {
        "none": None,
        "model": ModelDrafter(tiny_draft.model),
        "lookup+model": PromptLookupDrafter(ModelDrafter(tiny_draft.model), LookupSettings(min_ngram=1)),
    }[inner]
    result = _run(tiny_target, drafter, prompt_ids, sampling=GREEDY, prediction_ids=reference.token_ids)
    assert result.token_ids == reference.token_ids
    stats_ = result.stats
    # Every emitted token was drafted from the prediction and kept, except the first (from the target's
    # prefill: round 0 never drafts) and the one the target adds after each block.
    assert stats_.accepted_prediction_tokens == len(reference.token_ids) - 1 - stats_.rounds
    assert stats_.rejected_prediction_tokens == 0
    assert stats_.rounds <= -(-len(reference.token_ids) // 17)  # blocks of at least 16 predicted tokens + 1


@pytest.mark.parametrize("inner", ["none", "lookup+model"])
def test_greedy_with_an_edited_prediction_is_identical_and_counts_rejections(tiny_target, tiny_draft, prompt_ids, reference, inner):
    drafter = None if inner == "none" else PromptLookupDrafter(ModelDrafter(tiny_draft.model), LookupSettings(min_ngram=1))
    result = _run(tiny_target, drafter, prompt_ids, sampling=GREEDY, prediction_ids=_edited(reference.token_ids))
    assert result.token_ids == reference.token_ids
    stats_ = result.stats
    assert stats_.rejected_prediction_tokens > 0
    assert stats_.accepted_prediction_tokens >= len(reference.token_ids) - 12  # all but a few tokens around the edits
    assert stats_.accepted_prediction_tokens + stats_.rejected_prediction_tokens <= stats_.draft_tokens


@pytest.mark.parametrize("seed", [0, 1])
def test_coupled_with_a_prediction_is_token_identical_to_target_only(tiny_target, tiny_draft, prompt_ids, seed):
    sampling = SamplingParams(temperature=0.8)
    reference = _run(tiny_target, None, prompt_ids, sampling=sampling, seed=seed, speculative=False)
    drafter = ModelDrafter(tiny_draft.model)
    for prediction in (reference.token_ids, _edited(reference.token_ids), [5, 6, 7] * 10):
        result = _run(tiny_target, drafter, prompt_ids, sampling=sampling, seed=seed, acceptance="coupled", prediction_ids=prediction)
        assert result.token_ids == reference.token_ids


@pytest.mark.parametrize("acceptance,sampling", [("greedy", GREEDY), ("coupled", SamplingParams(temperature=0.8))])
def test_predicted_chains_mix_with_model_trees(tiny_target, tiny_draft, prompt_ids, acceptance, sampling):
    reference = _run(tiny_target, None, prompt_ids, sampling=sampling, seed=2, speculative=False)
    result = _run(
        tiny_target,
        ModelDrafter(tiny_draft.model),
        prompt_ids,
        sampling=sampling,
        seed=2,
        acceptance=acceptance,
        tree_branching=2,
        tree_nodes=8,
        num_draft_tokens=3,
        prediction_ids=_edited(reference.token_ids),
    )
    assert result.token_ids == reference.token_ids
    assert result.stats.accepted_prediction_tokens > 0 and result.stats.draft_tokens > result.stats.accepted_prediction_tokens


def test_without_speculation_the_prediction_is_not_used(tiny_target, prompt_ids, reference):
    result = _run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False, prediction_ids=reference.token_ids)
    assert result.token_ids == reference.token_ids and result.stats.rounds == 0
    assert result.stats.accepted_prediction_tokens == result.stats.rejected_prediction_tokens == 0


# --- Rejection: exact with predicted blocks -------------------------------------------------------

TRIALS = 1500
JOINT_SAMPLING = SamplingParams(temperature=1.0, top_k=4)


def test_rejection_with_a_prediction_matches_the_target_joint(tiny_target, tiny_draft, prompt_ids):
    expected = exact_joint(tiny_target, prompt_ids, JOINT_SAMPLING)
    likely = max(expected, key=expected.get)  # predict the likeliest pair: accepted often, rejected often enough
    counts = dict.fromkeys(expected, 0)
    generator = SpeculativeGenerator(tiny_target, ModelDrafter(tiny_draft.model))
    accepted = 0
    for seed in range(TRIALS):
        request = GenerationRequest(
            prompt_ids=prompt_ids,
            max_tokens=3,
            sampling=JOINT_SAMPLING,
            seed=seed,
            num_draft_tokens=3,
            ignore_eos=True,
            prediction_ids=[*likely, 7],
        )
        result = generator.generate(request)
        accepted += result.stats.accepted_prediction_tokens
        pair = tuple(result.token_ids[:2])
        assert pair in counts
        counts[pair] += 1
    assert accepted > TRIALS * expected[likely]  # predicted blocks were proposed and kept
    observed = [counts[pair] for pair in expected]
    assert stats.chisquare(observed, [expected[pair] * TRIALS for pair in expected]).pvalue > 1e-3


def test_negative_control_accepting_the_prediction_blindly_fails_the_joint_test(tiny_target, tiny_draft, prompt_ids, monkeypatch):
    from specdec import acceptance_rounds

    monkeypatch.setattr(acceptance_rounds, "rejection_accept", always_accept)
    expected = exact_joint(tiny_target, prompt_ids, JOINT_SAMPLING)
    likely = max(expected, key=expected.get)
    generator = SpeculativeGenerator(tiny_target, None)
    pairs = [
        tuple(
            generator.generate(
                GenerationRequest(
                    prompt_ids=prompt_ids, max_tokens=3, sampling=JOINT_SAMPLING, seed=seed, ignore_eos=True, prediction_ids=[*likely, 7]
                )
            ).token_ids[:2]
        )
        for seed in range(200)
    ]
    observed = [pairs.count(pair) for pair in expected]  # a pair outside the target's support is left out (a violation too)
    assert stats.chisquare(observed, [expected[pair] * sum(observed) for pair in expected]).pvalue < 1e-3


def test_a_prediction_drafts_where_the_load_policy_runs_plain_steps(
    tiny_target, tiny_draft, prompt_ids, reference, load_policy_decided_off
):
    generator = SpeculativeGenerator(tiny_target, ModelDrafter(tiny_draft.model), load_policy=load_policy_decided_off())
    request = GenerationRequest(prompt_ids=prompt_ids, max_tokens=len(reference.token_ids), sampling=GREEDY, ignore_eos=True)
    with_prediction = generator.generate(request.model_copy(update={"prediction_ids": reference.token_ids}))
    assert with_prediction.token_ids == reference.token_ids
    assert with_prediction.stats.accepted_prediction_tokens > 20
    # Negative control: the same policy keeps a request without a prediction from drafting.
    without = generator.generate(request)
    assert without.token_ids == reference.token_ids and without.stats.draft_tokens == 0
