"""speculation_policy in the in-process loop: "always" drafts every round where the load-aware policy
(or adaptive K) would run plain steps, "auto" follows them, and the output is the same either way."""

from __future__ import annotations

import pytest

from specdec.cli.tiny_pair import make_tiny_pair
from specdec.drafters import ModelDrafter
from specdec.engines.hf import load_model
from specdec.enums import SpeculationPolicy
from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=0), SamplingParams(temperature=0.9)])
def test_always_drafts_where_the_load_policy_says_no_and_the_output_is_the_same(
    tiny_target, tiny_draft, prompt_ids, sampling, load_policy_decided_off
):
    generator = SpeculativeGenerator(tiny_target, ModelDrafter(tiny_draft.model), load_policy=load_policy_decided_off())
    request = GenerationRequest(prompt_ids=prompt_ids, max_tokens=30, sampling=sampling, seed=5, acceptance="coupled", ignore_eos=True)
    auto = generator.generate(request)
    always = generator.generate(request.model_copy(update={"speculation_policy": SpeculationPolicy.ALWAYS}))
    assert auto.stats.rounds == auto.stats.draft_tokens == 0  # the policy ran plain steps
    assert always.stats.rounds > 0 and always.stats.draft_tokens > 0 and always.stats.accepted_tokens > 0
    assert always.token_ids == auto.token_ids and not always.stats.fallback


def test_always_keeps_adaptive_k_at_one_or_more(tiny_target, prompt_ids, tmp_path_factory):
    # A draft that is (nearly) never right: adaptive K with min_draft_tokens 0 stops drafting.
    unrelated = load_model(make_tiny_pair(tmp_path_factory.mktemp("unrelated"), seed=1).draft, device="cpu", dtype="float32")
    generator = SpeculativeGenerator(tiny_target, ModelDrafter(unrelated.model))
    request = GenerationRequest(
        prompt_ids=prompt_ids,
        max_tokens=40,
        sampling=SamplingParams(temperature=0),
        adaptive_k=True,
        num_draft_tokens=4,
        min_draft_tokens=0,
        ignore_eos=True,
    )

    def candidates(policy: SpeculationPolicy) -> list[int]:
        chunks = generator.stream(request.model_copy(update={"speculation_policy": policy}))
        # Round 0 never drafts: its token is the target's prefill's.
        return [chunk.round.num_candidates for chunk in chunks if chunk.round is not None][1:]

    assert 0 in candidates(SpeculationPolicy.AUTO)
    always = candidates(SpeculationPolicy.ALWAYS)
    assert min(always[:-1]) >= 1  # the last round may have room for the target's token only
