"""Tree verification on the default pair (SmolLM2-135M-Instruct + the shipped distilled draft):
greedy and coupled outputs equal target-only. Short on purpose: two prompts, 16 tokens."""

from __future__ import annotations

import pytest

from specdec.default_models import DRAFT_DIR
from specdec.drafters import ModelDrafter
from specdec.generation import SpeculativeGenerator
from specdec.prompts import encode_chat
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

PROMPTS = ["What is the capital of France?", "Write one sentence about the sea."]


@pytest.fixture(scope="module")
def default_pair(default_target_dir):
    from specdec.engines.hf import load_model

    return load_model(str(default_target_dir), device="cpu", dtype="float32"), load_model(str(DRAFT_DIR), device="cpu", dtype="float32")


@pytest.mark.parametrize(
    "settings",
    [{"sampling": SamplingParams(temperature=0)}, {"sampling": SamplingParams(temperature=0.8), "acceptance": "coupled", "seed": 3}],
)
def test_tree_outputs_equal_target_only_on_the_default_pair(default_pair, settings):
    target, draft = default_pair
    drafter = ModelDrafter(draft.model)
    accepted = 0
    for prompt in PROMPTS:
        prompt_ids = encode_chat(target.tokenizer, [{"role": "user", "content": prompt}])
        fields = {"prompt_ids": prompt_ids, "max_tokens": 16, "ignore_eos": True, **settings}
        reference = SpeculativeGenerator(target, None).generate(GenerationRequest(speculative=False, **fields))
        tree = SpeculativeGenerator(target, drafter).generate(
            GenerationRequest(num_draft_tokens=3, tree_branching=2, tree_nodes=8, **fields)
        )
        assert tree.token_ids == reference.token_ids
        accepted += tree.stats.accepted_tokens
    assert accepted > 0  # the trees were really verified, and some of them accepted
