"""compose.yaml and its overrides, loaded and merged the way `docker compose -f a -f b` does."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from deploy_support import ROOT, StrictLoader

COMPOSE = ROOT / "compose.yaml"
OVERRIDES = {"single-gpu": ROOT / "compose.single-gpu.yaml", "cpu": ROOT / "compose.cpu.yaml", "podman": ROOT / "compose.podman.yaml"}


# --- loading and merging, the way `docker compose -f a -f b` does -------------------------------------


class _Reset:
    """`!reset`: drop the key inherited from the files before."""


RESET = _Reset()


class _Override:
    """`!override`: replace the inherited value instead of merging into it."""

    def __init__(self, value):
        self.value = value


class _ComposeLoader(StrictLoader):
    pass


def _construct_reset(loader, node):
    return RESET


def _construct_override(loader, node):
    if isinstance(node, yaml.MappingNode):
        return _Override(loader.construct_mapping(node, deep=True))
    if isinstance(node, yaml.SequenceNode):
        return _Override(loader.construct_sequence(node, deep=True))
    return _Override(loader.construct_scalar(node))


_ComposeLoader.add_constructor("!reset", _construct_reset)
_ComposeLoader.add_constructor("!override", _construct_override)


def load_yaml(path: Path):
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_ComposeLoader)


def plain(value):
    if isinstance(value, _Override):
        return plain(value.value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items() if item is not RESET}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def merge(base, override, path: tuple = ()):
    """Compose's merge rules: mappings merge by key, sequences append (without duplicates), except the
    shell-command attributes (command, entrypoint, healthcheck.test), which replace; `!override` replaces,
    `!reset` removes."""
    if isinstance(override, _Override):
        return plain(override.value)
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            if value is RESET:
                merged.pop(key, None)
            elif key in merged:
                merged[key] = merge(merged[key], value, (*path, key))
            else:
                merged[key] = plain(value)
        return merged
    replaced = path[-1:] in (("command",), ("entrypoint",)) or path[-2:] == ("healthcheck", "test")
    if isinstance(base, list) and isinstance(override, list) and not replaced:
        return base + [item for item in plain(override) if item not in base]
    return plain(override)


def load_variant(name: str) -> dict:
    merged = plain(load_yaml(COMPOSE))
    if name != "base":
        merged = merge(merged, load_yaml(OVERRIDES[name]))
    return merged


VARIANTS = ["base", *OVERRIDES]


def duration_s(text: str) -> float:
    """A Compose duration ('1m30s', '10s', '1h') in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|m|s)", str(text))
    assert parts and "".join(n + u for n, u in parts) == str(text), f"not a duration: {text!r}"
    return sum(float(number) * units[unit] for number, unit in parts)


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return env
