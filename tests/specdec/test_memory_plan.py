"""The memory plan: weights and KV bytes from configs alone, sessions that fit, refusal to start."""

from __future__ import annotations

import pytest

from specdec import memory_plan
from specdec.errors import SpecdecError
from specdec.footprints import footprint
from specdec.memory_plan import ensure_fits, plan
from specdec.serving.config import SpecdecConfig


def test_footprint_matches_the_loaded_model(tiny_pair_paths, tiny_target):
    measured = footprint("target", str(tiny_pair_paths.target), "cpu", "float32")
    assert measured.weight_bytes == sum(p.numel() * 4 for p in tiny_target.model.parameters())
    config = tiny_target.model.config
    head_dim = config.hidden_size // config.num_attention_heads
    assert measured.kv_bytes_per_token == 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 4
    assert measured.max_context == tiny_target.max_context


def test_int8_draft_and_layer_skip_shrink_the_draft(tiny_pair_paths):
    full = footprint("draft", str(tiny_pair_paths.draft), "cpu", "float32")
    quantized = footprint("draft", str(tiny_pair_paths.draft), "cpu", "float32", quantize="int8")
    assert quantized.weight_bytes < full.weight_bytes / 2
    two_layers = footprint("draft", str(tiny_pair_paths.target), "cpu", "float32", num_layers=2)
    assert two_layers.kv_bytes_per_token == footprint("target", str(tiny_pair_paths.target), "cpu", "float32").kv_bytes_per_token // 2


def test_plan_counts_sessions_per_device(tiny_pair_paths, monkeypatch):
    monkeypatch.setattr(memory_plan, "_device_bytes", lambda device: 64 * 2**20)
    config = SpecdecConfig(model={"target_path": str(tiny_pair_paths.target), "draft_path": str(tiny_pair_paths.draft)})
    [device] = plan(config)
    assert [m.role for m in device.models] == ["target", "draft"]
    expected = int((64 * 2**20 * memory_plan.USABLE_FRACTION - device.weight_bytes) // device.session_bytes)
    assert device.sessions_that_fit == expected > 0


def test_start_up_is_refused_when_one_session_cannot_fit_and_the_fixes_are_named(tiny_pair_paths, monkeypatch):
    monkeypatch.setattr(memory_plan, "_device_bytes", lambda device: 1 * 2**20)
    config = SpecdecConfig(model={"target_path": str(tiny_pair_paths.target), "draft_path": str(tiny_pair_paths.draft)})
    with pytest.raises(SpecdecError, match="do not fit") as refused:
        ensure_fits(config, "target")
    assert "int8" in str(refused.value) and "layer_skip" in str(refused.value)
    monkeypatch.setattr(memory_plan, "_device_bytes", lambda device: 2**30)
    ensure_fits(config, "target")  # fits: no error


def test_unreadable_models_are_left_to_the_loader(monkeypatch):
    ensure_fits(SpecdecConfig(model={"target_path": "/nonexistent/model"}), "target")


def test_a_gguf_draft_counts_its_file_and_the_shared_llama_cpp_cache(tiny_pair_paths, tiny_ggufs, gguf_kv_bytes_per_token):
    config = SpecdecConfig(
        model={
            "target_path": str(tiny_pair_paths.target),
            "draft_method": "gguf",
            "draft_path": str(tiny_ggufs.draft),
            "gguf_context_tokens": 2048,
        }
    )
    [device] = plan(config)
    _, draft = device.models
    assert draft.weight_bytes == tiny_ggufs.draft.stat().st_size
    assert draft.max_context == 2048  # one cache for every session, allocated at start
    assert draft.kv_bytes_per_token == gguf_kv_bytes_per_token  # f16, as llama.cpp allocates it


@pytest.fixture
def gguf_kv_bytes_per_token(tiny_ggufs):
    from gguf_support import load_draft_gguf

    model = load_draft_gguf(tiny_ggufs.draft)
    try:
        return model.budget.bytes_per_token
    finally:
        model.close()
