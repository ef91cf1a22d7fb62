"""The memory plan (the deployment guide's 显存评估): weights + KV cache per device, and how many
sessions of the full context fit. `specdec plan` prints it; the services refuse to start on a
device where not even one session fits, naming the fixes."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specdec.draft_methods import DRAFT_METHODS
from specdec.errors import SpecdecError
from specdec.footprints import ModelFootprint, footprint
from specdec.serving.config import SpecdecConfig

USABLE_FRACTION = 0.9  # headroom for activations, allocator fragmentation and the CUDA context
FIXES = (
    "lower serving.max_batch_size / max_sessions",
    "quantize the draft (model.draft_quantization: int8)",
    "use layer-skip self-speculation (model.draft_method: layer_skip)",
    "put draft and target on different devices",
)


@dataclass
class DevicePlan:
    device: str
    total_bytes: int
    models: list[ModelFootprint] = field(default_factory=list)

    @property
    def weight_bytes(self) -> int:
        return sum(model.weight_bytes for model in self.models)

    @property
    def session_bytes(self) -> int:
        """KV cache of one session at full context, for every model on this device."""
        return sum(model.kv_bytes_per_token * model.max_context for model in self.models)

    @property
    def sessions_that_fit(self) -> int:
        free = self.total_bytes * USABLE_FRACTION - self.weight_bytes
        return max(0, int(free // self.session_bytes)) if self.session_bytes else 0


def plan(config: SpecdecConfig, roles: tuple[str, ...] = ("target", "draft")) -> list[DevicePlan]:
    """Per-device plans for the models of `roles` (a draft service plans only its draft)."""
    models = config.model
    if "target" in roles and not models.target_path:
        raise SpecdecError("no target model: set model.target_path or pass --target")
    footprints = [footprint("target", models.target_path, models.device, models.dtype)] if "target" in roles else []
    draft = DRAFT_METHODS[models.draft_method].footprint(config) if "draft" in roles and config.speculative.enabled else None
    footprints += [draft] if draft is not None else []
    devices: dict[str, DevicePlan] = {}
    for model in footprints:
        devices.setdefault(model.device, DevicePlan(model.device, _device_bytes(model.device))).models.append(model)
    return list(devices.values())


def _device_bytes(device: str) -> int:
    torch_device = torch.device(device)
    if torch_device.type == "cuda":
        return torch.cuda.get_device_properties(torch_device).total_memory
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def ensure_fits(config: SpecdecConfig, role: str) -> None:
    """Refuse to start when one session of the full context cannot fit beside the weights.

    A model whose config cannot be read here is not judged: loading it reports that error.
    """
    try:
        devices = plan(config, roles=(role,))
    except SpecdecError:
        return
    for device in devices:
        if device.sessions_that_fit < 1:
            raise SpecdecError(
                f"the models do not fit on {device.device}: {_gib(device.weight_bytes)} of weights + {_gib(device.session_bytes)} "
                f"per full-context session > {USABLE_FRACTION:.0%} of {_gib(device.total_bytes)}. Fixes: {'; '.join(FIXES)}"
            )


def describe(devices: list[DevicePlan]) -> str:
    lines = []
    for device in devices:
        lines.append(f"{device.device}: {_gib(device.total_bytes)} total, {USABLE_FRACTION:.0%} usable")
        for model in device.models:
            lines.append(
                f"  {model.role:<6} {model.source}: weights {_gib(model.weight_bytes)}, "
                f"KV {model.kv_bytes_per_token / 1024:.1f} KiB/token, "
                f"context {model.max_context} tokens ({_gib(model.kv_bytes_per_token * model.max_context)} per session)"
            )
        verdict = (
            f"{device.sessions_that_fit} concurrent full-context sessions fit"
            if device.sessions_that_fit
            else f"DOES NOT FIT. Fixes: {'; '.join(FIXES)}"
        )
        lines.append(f"  => {verdict}")
    return "\n".join(lines)


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:.2f} GiB" if num_bytes >= 2**29 else f"{num_bytes / 2**20:.2f} MiB"
