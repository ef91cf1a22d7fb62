"""Target engines (base.TargetModel): one `load_engine` for the verify service and the in-process generator.

| engine | module | loads |
|---|---|---|
| hf | specdec.engines.hf (transformers) | a Hugging Face directory, a hub id, a .gguf de-quantized into torch |
| llama_cpp | specdec.engines.llama_cpp | a .gguf file, run by llama.cpp |
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specdec.engines.base import TargetModel
from specdec.errors import ModelLoadError, SpecdecError
from specdec.serving.config import ModelSection, SpecdecConfig, TargetEngine, Verification

__all__ = ["TargetModel", "check_tree_support", "load_engine", "resolve_engine", "target_sessions"]


def resolve_engine(models: ModelSection, source: str) -> TargetEngine:
    """The engine `models.target_engine` names; auto: llama.cpp for a .gguf file, transformers otherwise."""
    if models.target_engine is not TargetEngine.AUTO:
        return models.target_engine
    return TargetEngine.LLAMA_CPP if Path(source).suffix == ".gguf" else TargetEngine.HF


def _load_hf(source: str, models: ModelSection, threads: int | None, max_sequences: int) -> TargetModel:
    from specdec.engines.hf import load_model

    return load_model(source, device=models.device, dtype=models.dtype)


def _load_llama_cpp(source: str, models: ModelSection, threads: int | None, max_sequences: int) -> TargetModel:
    from specdec.engines.gguf_model import default_threads
    from specdec.engines.llama_cpp import LlamaCppSettings, load_llama_cpp_target

    if Path(source).suffix != ".gguf":
        raise ModelLoadError(f"{source}: the llama_cpp engine runs .gguf files (set model.target_engine: hf for this model)")
    settings = LlamaCppSettings(
        threads=threads or default_threads(),
        context_tokens=models.target_context_tokens,
        max_sequences=max_sequences,
        device=models.device,
        # NOTE: in the shared pool no prompt cache: a prefix whose KV another session computed is not bit-identical
        # to one computed for this session (SmolLM2 bf16, measured), so a seeded request's text would depend on what
        # was served before it. With cells per session, kept copies are taken only where bit-identical
        # (engines/gguf_prompt_cache.py; tests/verify_service/test_seeded_llama_cpp.py).
        prompt_cache_tokens=0 if models.target_kv_shared else models.target_prompt_cache_tokens,
        per_session_kv=not models.target_kv_shared,
    )
    return load_llama_cpp_target(source, settings)


_LOADERS: dict[TargetEngine, Callable[[str, ModelSection, int | None, int], TargetModel]] = {
    TargetEngine.HF: _load_hf,
    TargetEngine.LLAMA_CPP: _load_llama_cpp,
}


def load_engine(
    models: ModelSection, threads: int | None = None, max_sequences: int = 8, setting: str = "model.target_path"
) -> TargetModel:
    """The target `models` names, run by its engine; a file it cannot load is one ModelLoadError line naming
    the setting, the file and the engine."""
    source = models.target_path
    engine = resolve_engine(models, source)
    try:
        return _LOADERS[engine](source, models, threads, max_sequences)
    except ModelLoadError as error:
        raise ModelLoadError(f"{setting}: {error} (target engine {engine.value})") from error


def target_sessions(config: SpecdecConfig) -> int:
    """Sessions a target holds at once: model.target_kv_sessions, else the verify service's batch size."""
    batch = config.verify_service.max_batch_size or config.serving.max_batch_size
    return min(config.model.target_kv_sessions or batch, config.verify_service.max_sessions)


def check_tree_support(config: SpecdecConfig, loaded: TargetModel, setting: str) -> None:
    """Refuse at start a tree configuration whose model cannot verify or draft token trees."""
    if config.speculative.verification is Verification.TREE and not loaded.supports_trees:
        raise SpecdecError(f"{setting}: {loaded.tree_refusal}")
