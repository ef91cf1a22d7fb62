"""Small enums shared by the config and the engine (no torch import, so the CLI's probes stay fast)."""

from __future__ import annotations

from enum import Enum


class AcceptanceMode(str, Enum):
    GREEDY = "greedy"
    REJECTION = "rejection"
    COUPLED = "coupled"


class SpeculationPolicy(str, Enum):
    """Whether a speculative request follows the service's load-aware policy or drafts every round."""

    AUTO = "auto"  # draft when the load-aware policy finds drafting faster at the current load
    ALWAYS = "always"  # draft every round whatever the policy says (lossless checks, benchmarks of speculation itself)


class Verification(str, Enum):
    """What a round verifies: a chain of candidates, or a token tree (specdec/tree.py)."""

    SEQUENTIAL = "sequential"
    TREE = "tree"


class TokenSource(str, Enum):
    """Where an output token came from: the target's own choice, or an accepted candidate's drafter."""

    TARGET = "target"  # recovered after a rejection, a bonus after a full accept, or target-only decoding
    DRAFT = "draft"  # a draft model (a separate model, layer-skip, a GGUF copy of the target)
    LOOKUP = "lookup"  # prompt lookup: the continuation of an earlier n-gram
    SUFFIX = "suffix"  # suffix decoding: the trees over this request and the scope's earlier outputs
    PREDICTION = "prediction"  # the request's predicted output (OpenAI `prediction`)
