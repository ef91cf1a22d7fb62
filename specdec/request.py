"""A generation request and its per-request statistics."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specdec.acceptance_modes import effective_acceptance, refusal
from specdec.enums import AcceptanceMode, SpeculationPolicy
from specdec.errors import InvalidRequestError
from specdec.fields import MinDraftTokens, MinTokens, NumDraftTokens, Seed, TopLogprobs
from specdec.limits import MAX_DRAFT_TOKENS
from specdec.penalties import Penalties
from specdec.sampling import SamplingParams
from specdec.tree import TreeShape


class GenerationRequest(BaseModel):
    """One generation. Validation errors name the offending field."""

    model_config = ConfigDict(frozen=True)

    prompt_ids: list[int] = Field(min_length=1)
    max_tokens: int = Field(64, ge=1)
    sampling: SamplingParams = SamplingParams()
    penalties: Penalties = Penalties()  # part of the target distribution (specdec.penalties)
    seed: Seed = Field(default_factory=lambda: secrets.randbits(63))
    stop: list[str] = Field(default_factory=list)
    speculative: bool = True
    # always: every round drafts (adaptive K never goes below 1), whatever the service's load-aware
    # policy says; a failing drafter still falls back to the target alone.
    speculation_policy: SpeculationPolicy = SpeculationPolicy.AUTO
    num_draft_tokens: NumDraftTokens = 5  # K; with adaptive_k, the most K may grow to
    adaptive_k: bool = False  # choose K per round from measured acceptance and costs (specdec.adaptive_k)
    min_draft_tokens: MinDraftTokens = 0  # the least adaptive K may shrink to; 0 lets it stop drafting
    # The services choose it with acceptance_modes.requested_acceptance: coupled for a seeded request that names none.
    acceptance: AcceptanceMode = AcceptanceMode.REJECTION
    draft_top_k: int = Field(32, ge=1)
    # verification=tree: the drafter may propose a token tree of up to tree_nodes nodes, tree_branching
    # children per node, num_draft_tokens deep (specdec.tree); tree_branching 0 = chains only.
    tree_branching: int = Field(0, ge=0, le=16)
    tree_nodes: int = Field(0, ge=0, le=256)
    ignore_eos: bool = False  # EOS is an ordinary token: the output ends at max_tokens or a stop string
    # vLLM's min_tokens: EOS is banned (part of the target distribution, specdec.min_tokens) and stop
    # strings are not looked for until this many tokens are generated.
    min_tokens: MinTokens = 0
    logprobs: bool = False
    top_logprobs: TopLogprobs = 0
    # OpenAI predicted outputs: the user's guess at the output, drafted from first (drafters/prediction.py),
    # in blocks of up to prediction_draft_tokens; other drafters keep num_draft_tokens.
    prediction_ids: list[int] = Field(default_factory=list)
    prediction_draft_tokens: NumDraftTokens = MAX_DRAFT_TOKENS
    # Suffix decoding (drafters/suffix.py): whose earlier outputs may draft for this request (the API key id the
    # gateway sends; "" = the shared scope).
    draft_scope: str = Field("", max_length=256)
    # Structured outputs: an llguidance grammar (specdec.constraints.grammars) the output must match;
    # part of the target distribution at every position. None: unconstrained.
    grammar: str | None = None

    @model_validator(mode="after")
    def _end_fits(self) -> GenerationRequest:
        # InvalidRequestError, not ValueError: pydantic would name the whole request, not the field.
        for name, value in (("ignore_eos", self.ignore_eos), ("min_tokens", self.min_tokens)):
            if self.grammar and value:
                raise InvalidRequestError(name, f"{name} cannot be combined with a grammar: the grammar decides where the output ends")
        if self.min_tokens > self.max_tokens:
            raise InvalidRequestError("min_tokens", f"min_tokens ({self.min_tokens}) must be at most max_tokens ({self.max_tokens})")
        return self

    @model_validator(mode="after")
    def _acceptance_fits(self) -> GenerationRequest:
        # The asked-for mode must suit the sampling; the mode that runs, the tree.
        problem = refusal(self.acceptance, self.sampling.is_greedy, tree=False) or refusal(
            self.effective_acceptance, self.sampling.is_greedy, tree=self.tree is not None and self.speculative
        )
        if problem:
            raise ValueError(problem)
        return self

    @property
    def tree(self) -> TreeShape | None:
        return TreeShape(self.tree_branching, self.tree_nodes) if self.tree_branching > 0 and self.tree_nodes > 0 else None

    @property
    def effective_acceptance(self) -> AcceptanceMode:
        """The mode rounds run (acceptance_modes.effective_acceptance)."""
        return effective_acceptance(self.acceptance, self.sampling.is_greedy, self.speculative)


@dataclass
class DrafterCounts:
    blocks: int = 0  # rounds that verified this drafter's block
    draft_tokens: int = 0  # its candidates (a tree's nodes)
    accepted_tokens: int = 0


@dataclass
class GenerationStats:
    rounds: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    fallback: bool = False
    proposed_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    # OpenAI's usage.completion_tokens_details: candidates drafted from the request's prediction
    # that the target kept, and those it rejected (both are computed, and counted as completion work).
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0
    # Per drafter (TokenSource value of the block's candidates: draft, lookup, suffix, prediction): which one pays.
    drafters: dict[str, DrafterCounts] = field(default_factory=dict)

    def record_round(self, num_candidates: int, num_accepted: int) -> None:
        self.rounds += 1
        self.draft_tokens += num_candidates
        self.accepted_tokens += num_accepted
        grow = num_candidates - len(self.proposed_per_position)
        if grow > 0:
            self.proposed_per_position.extend([0] * grow)
            self.accepted_per_position.extend([0] * grow)
        for position in range(num_candidates):
            self.proposed_per_position[position] += 1
            self.accepted_per_position[position] += position < num_accepted

    def record_drafter(self, drafter: str, num_candidates: int, num_accepted: int) -> None:
        counts = self.drafters.setdefault(drafter, DrafterCounts())
        counts.blocks += 1
        counts.draft_tokens += num_candidates
        counts.accepted_tokens += num_accepted

    def record_prediction(self, num_candidates: int, num_accepted: int) -> None:
        self.accepted_prediction_tokens += num_accepted
        self.rejected_prediction_tokens += num_candidates - num_accepted

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    def as_dict(self) -> dict:
        return {
            "rounds": self.rounds,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": round(self.acceptance_rate, 6),
            "fallback": self.fallback,
            "accepted_prediction_tokens": self.accepted_prediction_tokens,
            "rejected_prediction_tokens": self.rejected_prediction_tokens,
            "drafters": {name: vars(counts).copy() for name, counts in self.drafters.items()},
            "acceptance_by_position": [
                round(accepted / proposed, 6) if proposed else 0.0
                for accepted, proposed in zip(self.accepted_per_position, self.proposed_per_position)
            ],
        }
