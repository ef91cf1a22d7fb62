"""Int8 weight-only quantisation for the draft model: the first answer to an OOM at start.

Weights are stored as int8 with one float scale per output channel and dequantised inside
`forward`, so it runs on any device (torch's dynamic quantisation is CPU-only and also
quantises activations, which changes the draft more than needed).
"""

from __future__ import annotations

import torch
from torch import nn


class Int8WeightOnlyLinear(nn.Module):
    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        scale = weight.abs().amax(dim=1, keepdim=True).clamp_min(1e-8) / 127.0  # [out, 1]
        self.register_buffer("weight_int8", torch.round(weight / scale).to(torch.int8))
        self.register_buffer("scale", scale.to(weight.dtype))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.weight_int8.to(hidden.dtype) * self.scale.to(hidden.dtype)
        return nn.functional.linear(hidden, weight, self.bias)


def quantize_int8_weight_only(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear in `model`, in place, by its int8 weight-only version."""
    for name, child in list(model.named_children()):
        if isinstance(child, nn.Linear):
            setattr(model, name, Int8WeightOnlyLinear(child))
        else:
            quantize_int8_weight_only(child)
    return model
