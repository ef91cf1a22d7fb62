"""The gateway is an HTTP proxy: importing it must not load torch (hundreds of MB and seconds per replica)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = "import importlib, sys; importlib.import_module(sys.argv[1]); print('torch' in sys.modules)"


def _loads_torch(module: str) -> bool:
    done = subprocess.run([sys.executable, "-c", _PROBE, module], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip() == "True"


@pytest.mark.parametrize("module", ["gateway.app", "specdec.serving.config", "specdec.serving.metrics", "specdec.serving.rpc.server"])
def test_the_gateway_and_what_it_shares_import_without_torch(module):
    assert not _loads_torch(module)


def test_the_probe_sees_torch_where_it_is_loaded():
    # Negative control: the model services' CUDA gauges do import torch, and the probe must say so.
    assert _loads_torch("specdec.model_services.device_metrics")
