"""Penalties and logit_bias under speculation (tiny pair): they define the target distribution, and
greedy / coupled stay token-identical to speculation off, rejection stays exact, chains and trees."""

from __future__ import annotations

import pytest
from generation_support import run
from lossless_support import exact_joint
from scipy import stats

from specdec.drafters import ModelDrafter
from specdec.generation import SpeculativeGenerator
from specdec.kv_cache import CachedSequence
from specdec.penalties import LogitsTransform, Penalties
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams
from specdec.target_session import TargetSession

GREEDY = SamplingParams(temperature=0)
SETTINGS = {
    "presence": Penalties(presence_penalty=1.5),
    "frequency": Penalties(frequency_penalty=1.2),
    "repetition": Penalties(repetition_penalty=1.8),
    "all": Penalties(presence_penalty=-0.5, frequency_penalty=0.8, repetition_penalty=1.3, logit_bias={5: 4.0, 17: -100.0}),
}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_penalties_change_greedy_output_and_speculation_reproduces_it(tiny_target, drafters, prompt_ids, setting):
    penalties = SETTINGS[setting]
    plain = run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False)
    reference = run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False, penalties=penalties)
    assert reference.token_ids != plain.token_ids  # the penalties really act
    for name, drafter in drafters.items():
        result = run(tiny_target, drafter, prompt_ids, sampling=GREEDY, penalties=penalties, num_draft_tokens=4)
        assert result.token_ids == reference.token_ids, name
        # A penalty on repeats may leave n-gram lookup nothing in the output to repeat.
        assert result.stats.draft_tokens > 0 or name == "ngram", name


def test_logit_bias_minus_100_bans_a_token_and_plus_100_forces_it(tiny_target, drafters, prompt_ids):
    plain = run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False)
    banned = plain.token_ids[0]
    result = run(tiny_target, drafters["model"], prompt_ids, sampling=GREEDY, penalties=Penalties(logit_bias={banned: -100.0}))
    assert banned not in result.token_ids
    forced = run(
        tiny_target,
        drafters["model"],
        prompt_ids,
        sampling=SamplingParams(temperature=1.0),
        seed=3,
        penalties=Penalties(logit_bias={11: 100.0}),
        max_tokens=8,
    )
    assert forced.token_ids == [11] * 8


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("setting", ["frequency", "all"])
def test_coupled_under_penalties_is_token_identical_to_target_only(tiny_target, drafters, prompt_ids, setting, seed):
    common = {"sampling": SamplingParams(temperature=0.9, top_k=20), "seed": seed, "penalties": SETTINGS[setting]}
    reference = run(tiny_target, None, prompt_ids, speculative=False, **common)
    assert reference.token_ids != run(tiny_target, None, prompt_ids, speculative=False, **{**common, "penalties": Penalties()}).token_ids
    for name, drafter in drafters.items():
        assert run(tiny_target, drafter, prompt_ids, acceptance="coupled", **common).token_ids == reference.token_ids, name


@pytest.mark.parametrize("acceptance,sampling", [("greedy", GREEDY), ("coupled", SamplingParams(temperature=0.8))])
def test_tree_verification_under_penalties_applies_each_node_s_root_path(tiny_target, tiny_draft, prompt_ids, acceptance, sampling):
    penalties = SETTINGS["all"]
    reference = run(tiny_target, None, prompt_ids, sampling=sampling, seed=5, speculative=False, penalties=penalties)
    result = run(
        tiny_target,
        ModelDrafter(tiny_draft.model),
        prompt_ids,
        sampling=sampling,
        seed=5,
        penalties=penalties,
        acceptance=acceptance,
        tree_branching=2,
        tree_nodes=10,
        num_draft_tokens=4,
    )
    assert result.token_ids == reference.token_ids and result.stats.draft_tokens > 0


def test_a_draft_equal_to_the_target_is_always_accepted_under_penalties(tiny_target, prompt_ids):
    # The drafter applies the same transform to its q: a draft that is the target agrees everywhere.
    result = run(tiny_target, ModelDrafter(tiny_target.model), prompt_ids, sampling=GREEDY, penalties=SETTINGS["all"])
    assert result.stats.acceptance_rate == 1.0


# --- Rejection: the first two tokens follow the penalised target's exact joint law -----------------

TRIALS = 1500
JOINT_SAMPLING = SamplingParams(temperature=1.0, top_k=4)
# Biases that reorder the first position's top tokens, and a presence penalty that reshapes the second.
JOINT_PENALTIES = Penalties(presence_penalty=2.0, repetition_penalty=1.5)


def _joint_p_value(target, drafter, prompt_ids, penalties, trials: int = TRIALS) -> float:
    expected = exact_joint(target, prompt_ids, JOINT_SAMPLING, LogitsTransform(penalties, prompt_ids, target.vocab_size))
    counts = dict.fromkeys(expected, 0)
    generator = SpeculativeGenerator(target, drafter)
    for seed in range(trials):
        request = GenerationRequest(
            prompt_ids=prompt_ids,
            max_tokens=3,
            sampling=JOINT_SAMPLING,
            seed=seed,
            num_draft_tokens=3,
            ignore_eos=True,
            penalties=penalties,
        )
        pair = tuple(generator.generate(request).token_ids[:2])
        if pair not in counts:
            return 0.0  # a pair the penalised target can never produce
        counts[pair] += 1
    observed = [counts[pair] for pair in expected]
    return float(stats.chisquare(observed, [expected[pair] * trials for pair in expected]).pvalue)


@pytest.fixture(scope="module")
def joint_penalties(tiny_target, prompt_ids):
    """JOINT_PENALTIES plus a bias that lifts the first position's 4th-ranked token to the top."""
    logits = CachedSequence(tiny_target.model).advance(prompt_ids)[-1]
    fourth = int(logits.topk(4).indices[-1])
    return JOINT_PENALTIES.model_copy(update={"logit_bias": {fourth: 3.0}})


def test_rejection_under_penalties_matches_the_penalised_joint(tiny_target, tiny_draft, prompt_ids, joint_penalties):
    assert _joint_p_value(tiny_target, ModelDrafter(tiny_draft.model), prompt_ids, joint_penalties) > 1e-3


def test_negative_control_a_verifier_that_ignores_the_penalties_fails_the_joint_test(
    tiny_target, tiny_draft, prompt_ids, joint_penalties, monkeypatch
):
    monkeypatch.setattr(TargetSession, "_transformed", lambda self, logits, block: logits)
    # The bias moves a lot of mass, so fewer trials than the positive test already catch the difference.
    assert _joint_p_value(tiny_target, ModelDrafter(tiny_draft.model), prompt_ids, joint_penalties, trials=300) < 1e-3
