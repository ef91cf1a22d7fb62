"""min_tokens and ignore_eos under speculation (tiny pair): min_tokens bans EOS in the target distribution
itself, so greedy and coupled stay token-identical to speculation off, chains and trees; the drafters
ban it in their q too; stop strings are not looked for in the first min_tokens tokens."""

from __future__ import annotations

import pytest
from generation_support import run
from lossless_support import joint_p_value

from specdec.drafters import ModelDrafter
from specdec.errors import InvalidRequestError
from specdec.min_tokens import MinTokensMask
from specdec.penalties import LogitsTransform, Penalties
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)
MIN_TOKENS = 12


@pytest.fixture(scope="module")
def forced_eos(tiny_target):
    """EOS pushed so far up that the model stops at once, without min_tokens or ignore_eos."""
    return {"penalties": Penalties(logit_bias={eos: 100.0 for eos in tiny_target.eos_token_ids}), "ignore_eos": False}


def test_min_tokens_holds_a_forced_eos_off_and_every_drafter_reproduces_it(tiny_target, drafters, prompt_ids, forced_eos):
    assert run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False, **forced_eos).token_ids == []
    unbiased = run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False, max_tokens=MIN_TOKENS)
    reference = run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False, min_tokens=MIN_TOKENS, **forced_eos)
    # EOS banned for the first MIN_TOKENS (the rest of the distribution untouched), then the forced EOS ends it.
    assert reference.token_ids == unbiased.token_ids and reference.finish_reason == "stop"
    for name, drafter in drafters.items():
        result = run(tiny_target, drafter, prompt_ids, sampling=GREEDY, min_tokens=MIN_TOKENS, num_draft_tokens=4, **forced_eos)
        assert result.token_ids == reference.token_ids and result.finish_reason == "stop", name
        assert result.stats.draft_tokens > 0, name


@pytest.mark.parametrize("seed", [0, 7])
def test_coupled_under_min_tokens_is_token_identical_to_target_only(tiny_target, drafters, prompt_ids, forced_eos, seed):
    common = {"sampling": SamplingParams(temperature=1.0), "seed": seed, "min_tokens": MIN_TOKENS, **forced_eos}
    reference = run(tiny_target, None, prompt_ids, speculative=False, **common)
    assert len(reference.token_ids) == MIN_TOKENS
    for name, drafter in drafters.items():
        assert run(tiny_target, drafter, prompt_ids, acceptance="coupled", **common).token_ids == reference.token_ids, name


@pytest.mark.parametrize("acceptance,sampling", [("greedy", GREEDY), ("coupled", SamplingParams(temperature=1.0))])
def test_tree_verification_bans_eos_by_each_node_s_depth(tiny_target, tiny_draft, prompt_ids, forced_eos, acceptance, sampling):
    common = {"sampling": sampling, "seed": 5, "min_tokens": MIN_TOKENS, **forced_eos}
    reference = run(tiny_target, None, prompt_ids, speculative=False, **common)
    result = run(
        tiny_target,
        ModelDrafter(tiny_draft.model),
        prompt_ids,
        acceptance=acceptance,
        tree_branching=2,
        tree_nodes=10,
        num_draft_tokens=4,
        **common,
    )
    assert result.token_ids == reference.token_ids and len(result.token_ids) == MIN_TOKENS and result.stats.draft_tokens > 0


def test_rejection_under_min_tokens_follows_the_masked_target_s_joint_law(tiny_target, tiny_draft, prompt_ids):
    penalties = Penalties(logit_bias={eos: 8.0 for eos in tiny_target.eos_token_ids})  # EOS likely at both positions, but for the ban
    bias = LogitsTransform(penalties, prompt_ids, tiny_target.vocab_size)
    ban = MinTokensMask.for_request(2, len(prompt_ids), tiny_target.eos_token_ids)
    p_value = joint_p_value(
        tiny_target,
        ModelDrafter(tiny_draft.model),
        prompt_ids,
        penalties=penalties,
        min_tokens=2,
        transform=lambda logits, sequence: ban(bias(logits, sequence), len(sequence)),
    )
    assert p_value > 1e-3


def test_a_draft_equal_to_the_target_is_always_accepted_under_min_tokens(tiny_target, prompt_ids, forced_eos):
    # The drafter bans EOS in its q where the target does; otherwise it would propose the forced EOS every time.
    result = run(
        tiny_target, ModelDrafter(tiny_target.model), prompt_ids, sampling=GREEDY, min_tokens=MIN_TOKENS, num_draft_tokens=4, **forced_eos
    )
    assert len(result.token_ids) == MIN_TOKENS and result.stats.draft_tokens >= MIN_TOKENS - 4
    assert result.stats.acceptance_rate == 1.0


def test_ignore_eos_generates_max_tokens_through_a_forced_eos(tiny_target, drafters, prompt_ids, forced_eos):
    eos = min(tiny_target.eos_token_ids)
    common = {**forced_eos, "sampling": GREEDY, "max_tokens": 10, "ignore_eos": True}
    reference = run(tiny_target, None, prompt_ids, speculative=False, **common)
    assert reference.token_ids == [eos] * 10 and reference.finish_reason == "length"
    for name, drafter in drafters.items():
        assert run(tiny_target, drafter, prompt_ids, num_draft_tokens=4, **common).token_ids == reference.token_ids, name


def test_stop_strings_are_not_looked_for_in_the_first_min_tokens_tokens(tiny_target, prompt_ids):
    plain = run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False, max_tokens=30)
    stop = max(plain.text.split(), key=plain.text.count)  # a word the output repeats
    assert plain.text.count(stop) >= 2
    first = plain.text.index(stop)
    early = run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False, max_tokens=30, stop=[stop])
    assert early.text == plain.text[:first] and early.finish_reason == "stop"
    held = run(
        tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False, max_tokens=30, stop=[stop], min_tokens=len(early.token_ids)
    )
    # The first occurrence is in the text of the first min_tokens tokens: the next one ends the output.
    assert held.text == plain.text[: plain.text.index(stop, first + len(stop))] and held.finish_reason == "stop"


def test_min_tokens_is_refused_past_max_tokens_and_with_a_grammar(prompt_ids):
    with pytest.raises(InvalidRequestError) as refused:
        GenerationRequest(prompt_ids=prompt_ids, max_tokens=4, min_tokens=5)
    assert refused.value.field == "min_tokens"
    for field in ({"min_tokens": 1}, {"ignore_eos": True}):
        with pytest.raises(InvalidRequestError) as refused:
            GenerationRequest(prompt_ids=prompt_ids, max_tokens=4, grammar='{"grammars": []}', **field)
        assert refused.value.field == next(iter(field))
