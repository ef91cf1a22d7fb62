"""What a response reports beside its choices: token usage, and what speculation did (extensions)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CompletionTokensDetails(BaseModel):
    accepted_prediction_tokens: int = 0  # candidates drafted from `prediction` that the target kept
    rejected_prediction_tokens: int = 0  # ... that it rejected (computed, so counted as completion work, as OpenAI does)


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    completion_tokens_details: CompletionTokensDetails = CompletionTokensDetails()


class DrafterStats(BaseModel):
    blocks: int = 0  # rounds that verified its block
    draft_tokens: int = 0  # its candidates (a tree's nodes)
    accepted_tokens: int = 0


class SpeculativeStats(BaseModel):
    enabled: bool
    rounds: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    acceptance_rate: float = 0.0
    fallback: bool = False
    drafters: dict[str, DrafterStats] = Field(default_factory=dict)  # by drafter: draft (a model), lookup, suffix, prediction
