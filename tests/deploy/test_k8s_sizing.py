"""cpu-tiny's memory requests, sized by `specdec plan` on the tiny pair the overlay's init container writes: each
model Pod holds its process, the weights of the model(s) it serves and max_sessions sessions of full-context KV
cache (deploy/k8s/README.md, Sizing). The process is the big term; its size is what the rehearsal measured."""

from __future__ import annotations

import os

import pytest
from k8s_support import by_kind, container, deployments, quantity

# Memory of a model service on CPU after a chat call, measured by deploy/k8s/smoke.sh (podman stats: draft and
# verify ~515 MB each), with headroom for the allocator and a batch's activations.
PROCESS_BYTES = 768 * 2**20


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    from specdec.cli.tiny_pair import make_tiny_pair
    from specdec.serving.config import load_config

    models = tmp_path_factory.mktemp("models")
    make_tiny_pair(models)
    (configmap,) = by_kind("ConfigMap", "cpu-tiny").values()
    text = configmap["data"]["specdec.yaml"].replace("/models/", f"{models}/")
    path = models / "specdec.yaml"
    path.write_text(text, encoding="utf-8")
    saved = {key: os.environ.pop(key) for key in [key for key in os.environ if key.startswith("SPECDEC_")]}
    try:
        yield load_config(path)
    finally:
        os.environ.update(saved)


@pytest.mark.parametrize("role", ["draft", "verify"])
def test_cpu_tiny_requests_cover_the_plan(role, tiny_config):
    from specdec.memory_plan import plan

    # A draft service holds the draft; verify holds the target (its draft is remote).
    (device,) = plan(tiny_config, roles=("draft",) if role == "draft" else ("target",))
    assert device.device == "cpu"
    sessions = (tiny_config.draft_service if role == "draft" else tiny_config.verify_service).max_sessions
    needed = PROCESS_BYTES + device.weight_bytes + sessions * device.session_bytes
    resources = container(deployments("cpu-tiny")[role])["resources"]
    request, limit = quantity(resources["requests"]["memory"]), quantity(resources["limits"]["memory"])
    assert request >= needed, f"{role}: requests {request / 2**20:.0f} MiB < {needed / 2**20:.0f} MiB planned"
    assert limit >= 2 * request or limit - request >= 512 * 2**20, f"{role}: room above the request for load-time peaks"
    # and not grossly oversized for a trial cluster: a laptop's kind node should fit all three Pods
    assert request <= 4 * needed, f"{role}: {request / 2**20:.0f} MiB requested for {needed / 2**20:.0f} MiB planned"
