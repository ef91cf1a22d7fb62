"""The in-process speculative loop on the tiny pair: lossless, exact stopping, honest stats."""

from __future__ import annotations

import pytest
import torch
from generation_support import PROMPT
from generation_support import run as _run
from lossless_support import always_accept, joint_p_value

from specdec import acceptance_rounds
from specdec.drafters import ModelDrafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.errors import DraftUnavailableError, InvalidRequestError
from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)


@pytest.mark.parametrize("method", ["model", "layer_skip", "ngram", "lookup+model"])
@pytest.mark.parametrize("num_draft_tokens", [1, 3, 5, 8])
def test_greedy_speculative_equals_greedy_target_only(tiny_target, drafters, prompt_ids, method, num_draft_tokens):
    reference = _run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False)
    result = _run(tiny_target, drafters[method], prompt_ids, sampling=GREEDY, num_draft_tokens=num_draft_tokens)
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_tokens > 0  # speculation really happened


@pytest.mark.parametrize("temperature", [0.7, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_coupled_is_token_identical_to_target_only_with_the_same_seed(tiny_target, drafters, prompt_ids, temperature, seed):
    sampling = SamplingParams(temperature=temperature)
    reference = _run(tiny_target, None, prompt_ids, sampling=sampling, seed=seed, speculative=False)
    for drafter in drafters.values():
        result = _run(tiny_target, drafter, prompt_ids, sampling=sampling, seed=seed, acceptance="coupled")
        assert result.token_ids == reference.token_ids
    assert reference.token_ids != _run(tiny_target, None, prompt_ids, sampling=sampling, seed=seed + 1, speculative=False).token_ids


def test_spec_off_is_the_coupled_reference_even_for_rejection_requests(tiny_target, prompt_ids):
    sampling = SamplingParams(temperature=1.0)
    as_rejection = _run(tiny_target, None, prompt_ids, sampling=sampling, seed=4, speculative=False, acceptance="rejection")
    as_coupled = _run(tiny_target, None, prompt_ids, sampling=sampling, seed=4, speculative=False, acceptance="coupled")
    assert as_rejection.token_ids == as_coupled.token_ids


# --- Rejection at temperature 1: the first two tokens follow the target's exact joint law --------


def test_rejection_joint_of_first_two_tokens_matches_target(tiny_target, tiny_draft, prompt_ids):
    assert joint_p_value(tiny_target, ModelDrafter(tiny_draft.model), prompt_ids) > 1e-3


def test_rejection_joint_matches_target_with_lookup_blocks_mixed_in(tiny_target, tiny_draft, prompt_ids):
    # The prompt repeats itself: rounds alternate looked-up (point-mass q) and model blocks.
    drafter = PromptLookupDrafter(ModelDrafter(tiny_draft.model), LookupSettings(min_ngram=1, model_tokens=1))
    assert joint_p_value(tiny_target, drafter, prompt_ids) > 1e-3


def test_negative_control_always_accepting_drafts_fails_the_joint_test(tiny_target, tiny_draft, prompt_ids, monkeypatch):
    monkeypatch.setattr(acceptance_rounds, "rejection_accept", always_accept)
    # A draft that is clearly not the target (its upper layers are missing) must be caught.
    assert joint_p_value(tiny_target, ModelDrafter(tiny_draft.model), prompt_ids) < 1e-3


# --- Acceptance bookkeeping ------------------------------------------------------------------------


@pytest.mark.parametrize("acceptance,sampling", [("greedy", GREEDY), ("coupled", SamplingParams(temperature=0.8))])
def test_draft_equal_to_target_is_always_accepted(tiny_target, prompt_ids, acceptance, sampling):
    result = _run(tiny_target, ModelDrafter(tiny_target.model), prompt_ids, sampling=sampling, acceptance=acceptance, seed=3)
    assert result.stats.acceptance_rate == 1.0
    assert result.stats.accepted_per_position == result.stats.proposed_per_position


def test_draft_equal_to_target_with_full_q_is_accepted_under_rejection(tiny_target, prompt_ids):
    result = _run(
        tiny_target, ModelDrafter(tiny_target.model), prompt_ids, sampling=SamplingParams(), seed=3, draft_top_k=tiny_target.vocab_size
    )
    assert result.stats.acceptance_rate > 0.99


def test_stats_count_rounds_and_tokens(tiny_target, drafters, prompt_ids):
    result = _run(tiny_target, drafters["model"], prompt_ids, sampling=GREEDY, num_draft_tokens=4, max_tokens=30)
    stats_ = result.stats
    assert stats_.rounds > 0 and stats_.draft_tokens <= 4 * stats_.rounds
    # Every round emits its accepted tokens plus one; only a final 1-token budget skips drafting.
    assert len(result.token_ids) == 30 and stats_.accepted_tokens + stats_.rounds in (29, 30)
    assert sum(stats_.accepted_per_position) == stats_.accepted_tokens
    assert 0 < stats_.acceptance_rate <= 1


# --- Exact stopping ------------------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 6])
def test_max_tokens_is_exact(tiny_target, drafters, prompt_ids, max_tokens):
    reference = _run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False)
    result = _run(tiny_target, drafters["model"], prompt_ids, sampling=GREEDY, num_draft_tokens=5, max_tokens=max_tokens)
    assert result.token_ids == reference.token_ids[:max_tokens]
    assert result.finish_reason == "length"
    assert result.stats.draft_tokens <= max(0, max_tokens - 1) * result.stats.rounds


def test_eos_inside_an_accepted_block_ends_generation_there(tiny_target, prompt_ids):
    reference = _run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False)
    eos_index = next(i for i in range(3, 40) if reference.token_ids[i] not in reference.token_ids[:i])
    eos_id = reference.token_ids[eos_index]
    original = tiny_target.model.generation_config.eos_token_id
    tiny_target.model.generation_config.eos_token_id = eos_id
    try:
        # The draft is the target itself, so the EOS token arrives inside an accepted block.
        result = _run(tiny_target, ModelDrafter(tiny_target.model), prompt_ids, sampling=GREEDY, num_draft_tokens=8, ignore_eos=False)
    finally:
        tiny_target.model.generation_config.eos_token_id = original
    assert result.token_ids == reference.token_ids[:eos_index]
    assert result.finish_reason == "stop"
    assert result.stats.rounds == 1 and result.stats.accepted_tokens == 8


def test_stop_string_across_a_token_boundary(tiny_target, drafters, prompt_ids):
    reference = _run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False)
    tokenizer = tiny_target.tokenizer
    head = tokenizer.decode(reference.token_ids[:6])
    pieces = [tokenizer.decode([token]) for token in reference.token_ids[6:8]]
    assert len(pieces[0]) >= 1 and len(pieces[1]) >= 1
    stop = pieces[0][-1] + pieces[1][:1]  # last char of token 6 + first char of token 7
    expected_text = reference.text[: reference.text.find(stop)]
    assert len(expected_text) <= len(head) + len(pieces[0]) - 1
    result = _run(tiny_target, drafters["model"], prompt_ids, sampling=GREEDY, stop=[stop])
    assert result.text == expected_text
    assert result.finish_reason == "stop"
    assert stop not in result.text


# --- Failure handling --------------------------------------------------------------------------


class _FailingDrafter:
    """Stands in for a draft service that dies mid-request."""

    name = "failing"

    def __init__(self, inner, fail_after: int) -> None:
        self.inner, self.fail_after = inner, fail_after

    def open(self, request):
        session, budget = self.inner.open(request), [self.fail_after]

        class Session:
            def propose(self, num_tokens):
                budget[0] -= 1
                if budget[0] < 0:
                    raise DraftUnavailableError("draft service went away")
                return session.propose(num_tokens)

            def feedback(self, num_accepted, appended_ids, accepted_nodes=None):
                session.feedback(num_accepted, appended_ids, accepted_nodes)

            def close(self):
                session.close()

        return Session()


class _ScriptedPolicy:
    """A load-aware policy whose mode per round is scripted; it records what the loop measures."""

    def __init__(self, modes: list[bool]) -> None:
        self.modes, self.recorded, self.kinds = iter(modes), [], set()

    def for_request(self, sampled: bool) -> _ScriptedPolicy:
        self.kinds.add(sampled)
        return self

    def drafting_allowed(self) -> bool:
        return next(self.modes)

    def record_round(self, drafting: bool, num_tokens: int, seconds: float) -> None:
        self.recorded.append(drafting)


def test_the_load_policy_measures_only_rounds_in_the_mode_of_the_round_before(tiny_target, drafters, prompt_ids):
    # The first is asked when the draft opens (may it draft ahead?); rounds 1-7 ask one each, round 0 never.
    modes = [True, True, True, False, False, True, True, False]
    policy = _ScriptedPolicy(modes)
    request = GenerationRequest(prompt_ids=prompt_ids, max_tokens=40, sampling=GREEDY, num_draft_tokens=2, ignore_eos=True)
    generator = SpeculativeGenerator(tiny_target, drafters["model"], load_policy=policy)
    for _round in zip(range(len(modes)), generator.stream(request)):
        pass
    # A session's first rounds (prefills) and its first after a switch (a draft catching up) are one-off costs.
    assert policy.recorded == [True, False, True]
    assert policy.kinds == {False}  # a greedy request: asked and measured as one


def test_a_failing_drafter_falls_back_to_target_only_and_completes(tiny_target, drafters, prompt_ids):
    sampling = SamplingParams(temperature=0.9)
    reference = _run(tiny_target, None, prompt_ids, sampling=sampling, seed=8, speculative=False)
    # Three proposals succeed: round 0's (for no tokens: it never drafts) and two drafting rounds.
    result = _run(
        tiny_target, _FailingDrafter(drafters["model"], fail_after=3), prompt_ids, sampling=sampling, seed=8, acceptance="coupled"
    )
    assert result.token_ids == reference.token_ids
    assert result.stats.fallback is True and result.stats.rounds == 2


def test_prompt_that_fills_the_context_is_refused_naming_both_sizes(tiny_target):
    too_long = [5] * tiny_target.max_context
    with pytest.raises(InvalidRequestError, match=f"{tiny_target.max_context} tokens but the model's context is {tiny_target.max_context}"):
        _run(tiny_target, None, too_long, sampling=GREEDY)


def test_prompt_plus_max_tokens_over_the_context_is_refused(tiny_target):
    prompt = [5] * (tiny_target.max_context - 3)
    with pytest.raises(InvalidRequestError, match="max_tokens"):
        _run(tiny_target, None, prompt, sampling=GREEDY, max_tokens=4)


def test_generation_may_fill_the_context_exactly(tiny_target, drafters):
    prompt = [5] * (tiny_target.max_context - 3)
    result = _run(tiny_target, drafters["model"], prompt, sampling=GREEDY, max_tokens=3)
    assert len(result.token_ids) == 3 and result.finish_reason == "length"


def test_prompt_ids_outside_the_vocabulary_are_refused(tiny_target):
    with pytest.raises(InvalidRequestError, match="prompt_ids"):
        _run(tiny_target, None, [1, tiny_target.vocab_size], sampling=GREEDY)


def test_logprobs_are_the_target_log_softmax_of_emitted_tokens(tiny_target, drafters, prompt_ids):
    request = GenerationRequest(prompt_ids=prompt_ids, max_tokens=6, sampling=GREEDY, logprobs=True, top_logprobs=3, ignore_eos=True)
    chunks = list(SpeculativeGenerator(tiny_target, drafters["model"]).stream(request))
    logprobs = [entry for chunk in chunks for entry in chunk.logprobs]
    token_ids = [token for chunk in chunks for token in chunk.token_ids]
    assert [entry.token_id for entry in logprobs] == token_ids
    with torch.inference_mode():
        logits = tiny_target.model(input_ids=torch.tensor([prompt_ids + token_ids])).logits[0, len(prompt_ids) - 1 : -1]
    expected = torch.log_softmax(logits, -1)
    for row, entry in enumerate(logprobs):
        assert entry.logprob == pytest.approx(float(expected[row, entry.token_id]), abs=1e-4)
        assert [token for token, _ in entry.top] == expected[row].topk(3).indices.tolist()
        assert entry.top[0][0] == entry.token_id  # greedy picks the top token


def test_rounds_report_their_timing(tiny_target, drafters, prompt_ids):
    request = GenerationRequest(prompt_ids=prompt_ids, max_tokens=12, sampling=GREEDY, ignore_eos=True)
    rounds = [chunk.round for chunk in SpeculativeGenerator(tiny_target, drafters["model"]).stream(request)]
    assert all(info.target_ms > 0 and info.draft_ms >= 0 and info.transport_ms >= 0 for info in rounds)
    assert any(info.draft_ms > 0 for info in rounds) and sum(info.num_candidates for info in rounds) > 0


def test_int8_draft_is_still_lossless(tiny_target, tiny_pair_paths, prompt_ids):
    from specdec.engines.hf import load_model

    quantized = load_model(tiny_pair_paths.draft, device="cpu", dtype="float32", quantize="int8")
    reference = _run(tiny_target, None, prompt_ids, sampling=GREEDY, speculative=False)
    result = _run(tiny_target, ModelDrafter(quantized.model), prompt_ids, sampling=GREEDY)
    assert result.token_ids == reference.token_ids and result.stats.acceptance_rate > 0.3


def test_each_drafters_blocks_are_counted_apart(tiny_target, tiny_draft):
    """Suffix decoding before the model: the stats say which drafter proposed what, and the parts add up."""
    from specdec.drafters.suffix_cache import SuffixTrees
    from specdec.serving.config import SuffixSection

    trees = SuffixTrees(SuffixSection(min_score=2.0).settings())
    generator = SpeculativeGenerator(tiny_target, ModelDrafter(tiny_draft.model), suffix=trees)
    request = GenerationRequest(prompt_ids=tiny_target.tokenizer(PROMPT)["input_ids"], max_tokens=60, ignore_eos=True, num_draft_tokens=3)
    generator.generate(request)  # teaches the trees this output
    stats = generator.generate(request).stats
    assert set(stats.drafters) == {"suffix", "draft"}
    assert sum(counts.draft_tokens for counts in stats.drafters.values()) == stats.draft_tokens
    assert sum(counts.accepted_tokens for counts in stats.drafters.values()) == stats.accepted_tokens
    assert len(stats.proposed_per_position) > 3  # suffix blocks may outgrow K (3): their budget is suffix.draft_tokens
