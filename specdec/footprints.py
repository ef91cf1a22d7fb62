"""What a model occupies on its device, from its config alone (the weights are never loaded): weights and KV
cache bytes per token. The memory plan adds them up per device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from specdec.bundled import BUNDLED_MODELS, bundled_model_path
from specdec.engines.hf import resolve_device, resolve_dtype
from specdec.errors import SpecdecError


@dataclass
class ModelFootprint:
    role: str  # "target" or "draft"
    source: str
    device: str
    weight_bytes: int
    kv_bytes_per_token: int
    max_context: int


def footprint(
    role: str, source: str, device: str, dtype: str, num_layers: int | None = None, quantize: str | None = None
) -> ModelFootprint:
    """Sizes from the model's config alone: the weights are never loaded (meta device)."""
    config = model_config(source)
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


def model_config(source: str):
    path = Path(str(bundled_model_path(source)) if source in BUNDLED_MODELS else source).expanduser()
    try:
        if path.suffix == ".gguf":
            return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        return AutoConfig.from_pretrained(str(path))
    except (OSError, ValueError) as error:
        raise SpecdecError(f"cannot read the model config of {source!r}: {str(error).splitlines()[0]}") from error


def gguf_footprint(source: str | None, device: str, context_tokens: int) -> ModelFootprint:
    """llama.cpp's share: the file's (quantized) weights and an f16 KV cache of `context_tokens` cells for all sessions."""
    if not source:
        raise SpecdecError("draft_method=gguf needs model.draft_path")
    path = Path(str(bundled_model_path(source)) if source in BUNDLED_MODELS else source).expanduser()
    if not path.is_file():
        raise SpecdecError(f"GGUF file not found: {source}")
    config = model_config(str(path))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    kv_per_token = 2 * config.num_hidden_layers * kv_heads * head_dim * 2
    # NOTE: the cache is allocated whole at start and shared: it counts as one "session" of context_tokens.
    device = device if device.startswith("cuda") else "cpu"  # auto: judged where it surely is (llama.cpp may offload)
    return ModelFootprint("draft", source, device, path.stat().st_size, kv_per_token, context_tokens)
