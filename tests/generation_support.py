"""Helpers for the in-process generation tests on the tiny pair: the drafters under test, one
generation."""

from __future__ import annotations

from specdec.drafters import ModelDrafter, NgramDrafter, layer_skip_drafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.generation import GenerationResult, SpeculativeGenerator
from specdec.request import GenerationRequest

# Repeats itself, so prompt lookup finds matches.
PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


def tiny_drafters(tiny_target, tiny_draft) -> dict:
    return {
        "model": ModelDrafter(tiny_draft.model),
        "layer_skip": layer_skip_drafter(tiny_target.model, 2),
        "ngram": NgramDrafter(),
        "lookup+model": PromptLookupDrafter(ModelDrafter(tiny_draft.model), LookupSettings(min_ngram=1, model_tokens=2)),
    }


def run(target, drafter, prompt_ids: list[int], **fields) -> GenerationResult:
    """One generation of 40 tokens (EOS ignored) unless `fields` say otherwise."""
    request = GenerationRequest(prompt_ids=prompt_ids, **{"max_tokens": 40, "ignore_eos": True, **fields})
    return SpeculativeGenerator(target, drafter).generate(request)
