"""The acceptance modes as one table: what each mode asks of the drafter and of the target, and
every rule that refuses or coerces a mode. Torch-free: config and the gateway's checks read it;
the tensor work each mode names is in acceptance_rounds.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec.enums import AcceptanceMode


@dataclass(frozen=True)
class AcceptanceRule:
    mode: AcceptanceMode
    draft_chooses: str  # how the drafter picks each candidate
    target_verifies: str  # how the target judges the candidates
    needs_draft_probs: bool  # blocks carry q (the draft's distribution per candidate)
    verifies_trees: bool  # token trees allowed (otherwise chains only)
    greedy_sampling_only: bool  # valid only at temperature 0 (it would change sampled outputs)


RULES: dict[AcceptanceMode, AcceptanceRule] = {
    rule.mode: rule
    for rule in (
        AcceptanceRule(
            AcceptanceMode.GREEDY,
            "the argmax of q",
            "keep candidates equal to the target's argmax",
            needs_draft_probs=False,
            verifies_trees=True,
            greedy_sampling_only=True,
        ),
        AcceptanceRule(
            AcceptanceMode.COUPLED,
            "Gumbel-max with noise keyed by (seed, position)",
            "keep candidates equal to the target's Gumbel-max under the same noise (token-identical per seed)",
            needs_draft_probs=False,
            verifies_trees=True,
            greedy_sampling_only=False,
        ),
        AcceptanceRule(
            AcceptanceMode.REJECTION,
            "a sample of q (its top draft_top_k)",
            "accept with min(1, p/q), else sample the residual max(0, p - q) (Leviathan et al.)",
            needs_draft_probs=True,
            verifies_trees=False,
            greedy_sampling_only=False,
        ),
    )
}

TREE_REFUSAL = (
    "acceptance=rejection cannot verify a token tree (speculative.verification=tree): ask for acceptance "
    "coupled (token-identical to target-only per seed; in a config file speculative.acceptance: coupled) or temperature 0"
)
GREEDY_REFUSAL = "acceptance=greedy would change the output at temperature > 0; use rejection or coupled"
TREE_DEFAULT = AcceptanceMode.COUPLED  # a tree config that names no acceptance: lossless and token-identical per seed
# Where neither the request nor the config names a mode: a request that carries a seed gets coupled
# (its text is a function of the seed and the target's logits alone, equal to speculation off;
# rejection's draws follow what the draft proposed, which depends on timing), one without the fastest
# exact mode.
SEEDED_DEFAULT = AcceptanceMode.COUPLED
UNSEEDED_DEFAULT = AcceptanceMode.REJECTION


def rule(mode: AcceptanceMode) -> AcceptanceRule:
    return RULES[mode]


def requested_acceptance(named: AcceptanceMode | None, seeded: bool) -> AcceptanceMode:
    """The mode a request asks for: `named` (the request's own, else the config's) when there is one,
    else SEEDED_DEFAULT for a request that carries a seed and UNSEEDED_DEFAULT for one that does not.
    The one place that rule lives: verify's requests, `specdec generate` and the benchmarks read it."""
    if named is not None:
        return named
    return SEEDED_DEFAULT if seeded else UNSEEDED_DEFAULT


def effective_acceptance(requested: AcceptanceMode, greedy_sampling: bool, speculative: bool = True) -> AcceptanceMode:
    """The mode a round really runs. Greedy at temperature 0 whatever was asked (every mode agrees
    there, and greedy is cheapest); target-only decoding samples with the keyed noise, so it is the
    coupled reference."""
    if greedy_sampling:
        return AcceptanceMode.GREEDY
    return requested if speculative else AcceptanceMode.COUPLED


def refusal(mode: AcceptanceMode, greedy_sampling: bool, tree: bool) -> str | None:
    """Why `mode` cannot serve this request (None: it can). Checked after effective_acceptance."""
    if rule(mode).greedy_sampling_only and not greedy_sampling:
        return GREEDY_REFUSAL
    if tree and not rule(mode).verifies_trees:
        return TREE_REFUSAL
    return None
