"""Small enums shared by the config and the engine (no torch import, so the CLI's probes stay fast)."""

from __future__ import annotations

from enum import Enum


class AcceptanceMode(str, Enum):
    GREEDY = "greedy"
    REJECTION = "rejection"
    COUPLED = "coupled"
