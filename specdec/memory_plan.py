"""The memory plan (the deployment guide's 显存评估): weights + KV cache per device, and how many
sessions of the full context fit. `specdec plan` prints it; the services refuse to start on a
device where not even one session fits, naming the fixes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from specdec.bundled import BUNDLED_MODELS, bundled_model_path
from specdec.errors import SpecdecError
from specdec.models import resolve_device, resolve_dtype
from specdec.serving.config import DraftMethod, SpecdecConfig

USABLE_FRACTION = 0.9  # headroom for activations, allocator fragmentation and the CUDA context
FIXES = (
    "lower serving.max_batch_size / max_sessions",
    "quantize the draft (model.draft_quantization: int8)",
    "use layer-skip self-speculation (model.draft_method: layer_skip)",
    "put draft and target on different devices",
)


@dataclass
class ModelFootprint:
    role: str  # "target" or "draft"
    source: str
    device: str
    weight_bytes: int
    kv_bytes_per_token: int
    max_context: int


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


def footprint(
    role: str, source: str, device: str, dtype: str, num_layers: int | None = None, quantize: str | None = None
) -> ModelFootprint:
    """Sizes from the model's config alone: the weights are never loaded (meta device)."""
    config = _config(source)
    if num_layers is not None:
        config.num_hidden_layers = num_layers
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    torch_device = resolve_device(device)
    element = torch.tensor([], dtype=resolve_dtype(dtype, torch_device)).element_size()
    weight_bytes = sum(p.numel() * (1 if quantize == "int8" and p.dim() == 2 else element) for p in model.parameters())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    kv_per_token = 2 * config.num_hidden_layers * kv_heads * head_dim * element
    return ModelFootprint(
        role, source, str(torch_device), weight_bytes, kv_per_token, int(getattr(config, "max_position_embeddings", 2048))
    )


def _config(source: str):
    path = Path(str(bundled_model_path(source)) if source in BUNDLED_MODELS else source).expanduser()
    try:
        if path.suffix == ".gguf":
            return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        return AutoConfig.from_pretrained(str(path))
    except (OSError, ValueError) as error:
        raise SpecdecError(f"cannot read the model config of {source!r}: {str(error).splitlines()[0]}") from error


def plan(config: SpecdecConfig, roles: tuple[str, ...] = ("target", "draft")) -> list[DevicePlan]:
    """Per-device plans for the models of `roles` (a draft service plans only its draft)."""
    models = config.model
    if "target" in roles and not models.target_path:
        raise SpecdecError("no target model: set model.target_path or pass --target")
    footprints = [footprint("target", models.target_path, models.device, models.dtype)] if "target" in roles else []
    draft = _draft_footprint(config) if "draft" in roles else None
    footprints += [draft] if draft is not None else []
    devices: dict[str, DevicePlan] = {}
    for model in footprints:
        devices.setdefault(model.device, DevicePlan(model.device, _device_bytes(model.device))).models.append(model)
    return list(devices.values())


def _draft_footprint(config: SpecdecConfig) -> ModelFootprint | None:
    models = config.model
    if not config.speculative.enabled or models.draft_method is DraftMethod.NGRAM:
        return None
    if models.draft_method is DraftMethod.GGUF:
        return _gguf_footprint(models.draft_path, models.draft_device, models.gguf_context_tokens)
    if models.draft_method is DraftMethod.MODEL:
        if not models.draft_path:
            raise SpecdecError("draft_method=model needs model.draft_path")
        return footprint("draft", models.draft_path, models.draft_device, models.dtype, quantize=models.draft_quantization)
    total_layers = _config(models.target_path).num_hidden_layers
    layers = models.layer_skip_layers or max(1, total_layers // 2)
    return footprint("draft", models.target_path, models.draft_device, models.dtype, num_layers=layers)


def _gguf_footprint(source: str | None, device: str, context_tokens: int) -> ModelFootprint:
    """llama.cpp's share: the file's (quantized) weights and an f16 KV cache of `context_tokens` cells for all sessions."""
    if not source:
        raise SpecdecError("draft_method=gguf needs model.draft_path")
    path = Path(str(bundled_model_path(source)) if source in BUNDLED_MODELS else source).expanduser()
    if not path.is_file():
        raise SpecdecError(f"GGUF file not found: {source}")
    config = _config(str(path))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    kv_per_token = 2 * config.num_hidden_layers * kv_heads * head_dim * 2
    # NOTE: the cache is allocated whole at start and shared: it counts as one "session" of context_tokens.
    device = device if device.startswith("cuda") else "cpu"  # auto: judged where it surely is (llama.cpp may offload)
    return ModelFootprint("draft", source, device, path.stat().st_size, kv_per_token, context_tokens)


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
