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
