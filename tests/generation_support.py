"""Helpers for the in-process generation tests on the tiny pair: the drafters under test, one
generation, and the exact joint law of the first two tokens (what the rejection chi-squares compare with)."""

from __future__ import annotations

from specdec.drafters import ModelDrafter, NgramDrafter, layer_skip_drafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.generation import GenerationResult, SpeculativeGenerator
from specdec.kv_cache import CachedSequence
from specdec.penalties import LogitsTransform
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams, processed_probs

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


def exact_joint(target, prompt_ids: list[int], sampling: SamplingParams,
                transform: LogitsTransform | None = None) -> dict[tuple[int, int], float]:
    """P(first two tokens) under the target's processed distribution (after `transform`, if any)."""
    lm = CachedSequence(target.model)

    def probs(sequence: list[int]):
        logits = lm.advance(sequence)[-1:].double()  # [1, vocab]
        return processed_probs((transform(logits, sequence) if transform is not None else logits)[0], sampling)

    first = probs(prompt_ids)
    joint = {}
    for token in first.nonzero().flatten().tolist():
        second = probs([*prompt_ids, token])
        for next_token in second.nonzero().flatten().tolist():
            joint[(token, next_token)] = float(first[token] * second[next_token])
    return joint
