"""CUDA memory gauges for the model services (torch), apart from specdec/serving so the gateway's metrics stay torch-free."""

from __future__ import annotations

import torch

from specdec.serving.metrics import ModelServiceMetrics


def track_cuda(metrics: ModelServiceMetrics, device: torch.device) -> None:
    """Export allocated / reserved / total memory of a CUDA device (read at scrape time)."""
    if device.type != "cuda":
        return
    name = str(device)
    metrics.model_memory.labels(name, "allocated").set_function(lambda: torch.cuda.memory_allocated(device))
    metrics.model_memory.labels(name, "reserved").set_function(lambda: torch.cuda.memory_reserved(device))
    metrics.device_memory_total.labels(name).set(torch.cuda.get_device_properties(device).total_memory)
