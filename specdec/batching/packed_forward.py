"""One forward pass over the new tokens of many sessions, packed end to end without padding.

The projections, MLPs and output head see all rows' tokens as one `[1, total, hidden]` batch
(that is where batching saves time: the weights are read once). Attention runs per row, over
views of that row's own cache, so rows of different lengths and rollback points never mix.
Supports the Llama family as Hugging Face implements it (Llama, Qwen2 without sliding windows,
Mistral without sliding windows, and specdec's reduced-vocabulary draft), reusing the model's
own modules and weights; `model_parts` returns None for anything else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel

from specdec.batching.kv_store import KVShape, SessionKV
from specdec.tree import ancestor_mask, node_depths

_SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2", "specdec_reduced_vocab_llama"}


@dataclass
class PackedRow:
    """One session's part of a pass: `input_ids` enter its cache at position `start`."""

    kv: SessionKV
    input_ids: list[int]
    start: int
    num_logits: int  # logits wanted after the last `num_logits` of `input_ids`
    # A token tree (specdec.tree) in the row's last len(tree_parents) cache slots, which may begin
    # before `start` (nodes fed by an earlier pass): their parents, -1 = child of the token just
    # before the tree. Tree nodes see the cache before the tree plus their ancestors, at position
    # (first tree slot - 1 + depth). None: every token is causal over everything before it.
    tree_parents: list[int] | None = None

    @property
    def end(self) -> int:
        return self.start + len(self.input_ids)

    @property
    def tree_start(self) -> int:
        return self.end - len(self.tree_parents) if self.tree_parents is not None else self.end


@dataclass
class ModelParts:
    """The pieces of a Llama-family causal LM the packed pass calls, in order."""

    embed: nn.Module
    rotary: nn.Module
    layers: list[nn.Module]
    norm: nn.Module
    head: Callable[[torch.Tensor], torch.Tensor]  # [n, hidden] -> [n, vocab]
    input_ids: Callable[[torch.Tensor], torch.Tensor]  # target ids -> embedding rows
    kv_shape: KVShape


def model_parts(model: PreTrainedModel) -> ModelParts | None:
    """The model's parts if the packed pass supports its architecture, else None."""
    config = model.config
    if config.model_type not in _SUPPORTED_MODEL_TYPES or _uses_sliding_window(config):
        return None
    decoder = model.get_decoder()
    layers = list(decoder.layers[: config.num_hidden_layers])
    if not all(hasattr(layer, "self_attn") and hasattr(layer.self_attn, "q_proj") for layer in layers):
        return None
    attention = layers[0].self_attn
    parameter = next(model.parameters())
    shape = KVShape(len(layers), attention.k_proj.out_features // attention.head_dim, attention.head_dim, parameter.dtype, parameter.device)
    # A reduced-vocabulary draft maps ids in and logits out itself; plain models are the identity.
    head = getattr(model, "full_logits_from_hidden", model.lm_head)
    input_ids = getattr(model, "embedding_ids", _identity)
    return ModelParts(decoder.embed_tokens, decoder.rotary_emb, layers, decoder.norm, head, input_ids, shape)


def _uses_sliding_window(config) -> bool:
    if getattr(config, "sliding_window", None) is None:
        return False
    return bool(getattr(config, "use_sliding_window", True))


def _identity(input_ids: torch.Tensor) -> torch.Tensor:
    return input_ids


@torch.inference_mode()
def packed_forward(parts: ModelParts, rows: list[PackedRow]) -> list[torch.Tensor]:
    """Feed every row's tokens; return each row's logits `[num_logits, vocab]`, in row order.

    NOTE: a row's cache `length` moves to `row.end` only after the whole pass succeeded.
    """
    device = parts.kv_shape.device
    input_ids = torch.tensor([t for row in rows for t in row.input_ids], dtype=torch.long, device=device)  # [total]
    positions = torch.cat([_positions(row) for row in rows])  # [total]
    hidden = parts.embed(parts.input_ids(input_ids))[None]  # [1, total, hidden]
    cos, sin = parts.rotary(hidden, positions[None])  # [1, total, head_dim] each
    spans = _spans(rows)
    masks = [_attention_mask(row) for row in rows]  # once per pass: every layer attends the same way
    for index, layer in enumerate(parts.layers):
        attended = _attention(layer.self_attn, layer.input_layernorm(hidden), cos[0], sin[0], rows, spans, masks, index)
        hidden = hidden + attended
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    hidden = parts.norm(hidden)[0]  # [total, hidden]
    keep = torch.cat([torch.arange(end - row.num_logits, end, device=device) for row, (_, end) in zip(rows, spans)])
    logits = parts.head(hidden[keep])  # [sum num_logits, vocab]
    for row in rows:
        row.kv.length = row.end
    return list(logits.split([row.num_logits for row in rows]))


def _spans(rows: list[PackedRow]) -> list[tuple[int, int]]:
    spans, offset = [], 0
    for row in rows:
        spans.append((offset, offset + len(row.input_ids)))
        offset += len(row.input_ids)
    return spans


def _attention(
    attention: nn.Module,
    hidden: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,  # hidden [1, total, h]; cos/sin [total, d]
    rows: list[PackedRow],
    spans: list[tuple[int, int]],
    masks: list[torch.Tensor | None],  # masks[i]: [new_i, end_i] bool
    layer: int,
) -> torch.Tensor:  # -> [1, total, h]
    total, head_dim = hidden.shape[1], attention.head_dim
    queries = attention.q_proj(hidden).view(total, -1, head_dim).transpose(0, 1)  # [heads, total, d]
    keys = attention.k_proj(hidden).view(total, -1, head_dim).transpose(0, 1)  # [kv_heads, total, d]
    values = attention.v_proj(hidden).view(total, -1, head_dim).transpose(0, 1)  # [kv_heads, total, d]
    queries, keys = queries * cos + _rotate_half(queries) * sin, keys * cos + _rotate_half(keys) * sin
    outputs = []
    for row, (begin, end), mask in zip(rows, spans, masks):
        cached_keys, cached_values = row.kv.write(layer, row.start, keys[:, begin:end], values[:, begin:end])
        outputs.append(
            nn.functional.scaled_dot_product_attention(
                queries[None, :, begin:end],
                cached_keys[None],
                cached_values[None],
                attn_mask=mask,
                scale=attention.scaling,
                enable_gqa=True,
            )[0]
        )
    attended = torch.cat(outputs, dim=1).transpose(0, 1).reshape(1, total, -1)  # [1, total, heads * d]
    return attention.o_proj(attended)


def _positions(row: PackedRow) -> torch.Tensor:  # [new] int64, the rotary position of each new token
    device = row.kv.shape.device
    if row.tree_parents is None:
        return torch.arange(row.start, row.end, device=device)
    depths = torch.tensor(node_depths(row.tree_parents), device=device)  # [tree]
    slot_positions = torch.cat([torch.arange(row.tree_start, device=device), row.tree_start - 1 + depths])  # [end]
    return slot_positions[row.start :]


def _attention_mask(row: PackedRow) -> torch.Tensor | None:  # [new, start + new] bool, True = may attend
    new = len(row.input_ids)
    if new == 1 and row.tree_parents is None:
        return None  # one query sees the whole cache
    device = row.kv.shape.device
    query_slots = torch.arange(row.start, row.end, device=device)[:, None]
    mask = torch.arange(row.end, device=device)[None, :] <= query_slots  # causal
    if row.tree_parents is not None:
        tree_start = row.tree_start
        # NOTE: tree nodes replace the causal rule inside the tree with ancestors-or-self; what lies
        # before the tree stays visible to them in full.
        tree_rows = max(0, tree_start - row.start)
        mask[tree_rows:, tree_start:] = ancestor_mask(row.tree_parents, device)[row.start + tree_rows - tree_start :]
    return mask


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
