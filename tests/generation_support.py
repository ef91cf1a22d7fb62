"""Helpers for the in-process generation tests on the tiny pair: the drafters under test, one
generation."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import replace

from specdec.drafters import ModelDrafter, NgramDrafter, layer_skip_drafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.enums import TokenSource
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


class ReportingDrafter:
    """A drafter whose blocks report `compute_ms` (one value each in turn, or the same for all) and come from
    `source`: what a draft step's timing reads (specdec/drafting_ceiling.py)."""

    name = "model"

    def __init__(self, inner, compute_ms: Iterable[float] | float, source: TokenSource = TokenSource.DRAFT) -> None:
        self.inner, self.source = inner, source
        self.compute_ms = itertools.repeat(compute_ms) if isinstance(compute_ms, float) else iter(compute_ms)

    def batched(self, options) -> ReportingDrafter:
        return ReportingDrafter(self.inner.batched(options), self.compute_ms, self.source)

    def open(self, request):
        session = self.inner.open(request)
        propose = session.propose

        def reporting(num_tokens):
            block = propose(num_tokens)
            return replace(block, compute_ms=next(self.compute_ms), sources=(self.source,) * len(block))

        session.propose = reporting
        return session
