"""Build a ready-to-run generator from configuration: draft first, then target."""

from __future__ import annotations

import logging
from collections.abc import Callable

from specdec.bundled import BUNDLED_MODELS, bundled_model_path
from specdec.drafters import Drafter, ModelDrafter, NgramDrafter, layer_skip_drafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.engines import TargetModel, load_engine, resolve_engine
from specdec.errors import IncompatibleVocabularyError, ModelLoadError, SpecdecError
from specdec.generation import SpeculativeGenerator
from specdec.models import LoadedModel, check_vocab_compatible, load_model, load_tokenizer
from specdec.serving.config import DraftMethod, ModelSection, SpecdecConfig, TargetEngine, Verification

log = logging.getLogger(__name__)


def build_generator(config: SpecdecConfig) -> SpeculativeGenerator:
    models = config.model
    if not models.target_path:
        raise SpecdecError("no target model: set model.target_path in the config or pass --target")
    draft = None
    if config.speculative.enabled and models.draft_method is DraftMethod.MODEL:
        draft = _load_draft(models)
    target = load_engine(models)
    check_tree_support(config, target, "model.target_path")
    if draft is not None:
        check_tree_support(config, draft, "model.draft_path")
    drafter = None
    if config.speculative.enabled and models.draft_method is DraftMethod.GGUF:
        drafter = with_prompt_lookup(_gguf_drafter(config, target.tokenizer), models)
    elif config.speculative.enabled:
        drafter = with_prompt_lookup(_DRAFTER_BUILDERS[models.draft_method](target, draft, models), models)
    return SpeculativeGenerator(target, drafter)


def with_prompt_lookup(drafter: Drafter, models: ModelSection) -> Drafter:
    """The drafter with prompt lookup tried first (model.prompt_lookup); n-gram drafting is lookup already."""
    if not models.prompt_lookup or models.draft_method is DraftMethod.NGRAM:
        return drafter
    return PromptLookupDrafter(
        drafter, LookupSettings(models.prompt_lookup_min_ngram, models.prompt_lookup_max_ngram, models.model_draft_tokens)
    )


def check_tree_support(config: SpecdecConfig, loaded: TargetModel, setting: str) -> None:
    """Refuse at start a tree configuration whose model cannot verify or draft token trees."""
    if config.speculative.verification is Verification.TREE and not loaded.supports_trees:
        raise SpecdecError(f"{setting}: {loaded.tree_refusal}")


def _load_draft(models: ModelSection) -> LoadedModel:
    if not models.draft_path:
        raise SpecdecError(
            "draft_method=model needs a draft model: set model.draft_path or pass --draft "
            "(or use --draft-method layer_skip|ngram, which need none)"
        )
    return _load("model.draft_path", models.draft_path, device=models.draft_device, dtype=models.dtype, quantize=models.draft_quantization)


def _load(setting: str, source: str, **options: str | None) -> LoadedModel:
    """load_model, with errors prefixed by the setting (the CLI shows the matching flag)."""
    return _prefixed(setting, load_model, source, **options)


def _prefixed(setting: str, loader, *args, **kwargs):
    """loader(*args, **kwargs), its ModelLoadError prefixed by the setting that named the file."""
    try:
        return loader(*args, **kwargs)
    except ModelLoadError as error:
        raise ModelLoadError(f"{setting}: {error}") from error


def _model_drafter(target: LoadedModel, draft: LoadedModel | None, models: ModelSection) -> Drafter:
    assert draft is not None  # loaded above whenever draft_method is model
    check_vocab_compatible(target, draft)
    return ModelDrafter(draft.model)


def _layer_skip_drafter(target: TargetModel, _draft: LoadedModel | None, models: ModelSection) -> Drafter:
    if resolve_engine(models, models.target_path) is not TargetEngine.HF:
        raise SpecdecError("draft_method=layer_skip drafts with the target's own torch layers: it needs model.target_engine hf")
    total = len(target.model.get_decoder().layers)
    num_layers = models.layer_skip_layers or max(1, total // 2)
    try:
        return layer_skip_drafter(target.model, num_layers)
    except ValueError as error:
        raise SpecdecError(f"model.layer_skip_layers: {error}") from error


def _gguf_drafter(config: SpecdecConfig, target_tokenizer=None):  # -> GgufDrafter
    """The GGUF draft, its vocabulary checked against the target's tokenizer when there is one."""
    from specdec.drafters.gguf import GgufDrafter, check_gguf_vocabulary
    from specdec.engines.llama_cpp import TREES_REFUSED
    from specdec.gguf_model import GgufOptions, default_threads, load_gguf

    models = config.model
    if not models.draft_path:
        raise SpecdecError("draft_method=gguf drafts with a .gguf file: set model.draft_path or pass --draft")
    if config.speculative.verification is Verification.TREE:
        raise SpecdecError(f"model.draft_path: {TREES_REFUSED}")
    options = GgufOptions(
        threads=models.gguf_threads or config.draft_service.cpu_threads or default_threads(),
        context_tokens=models.gguf_context_tokens,
        max_sequences=config.draft_service.max_sessions,
        device=models.draft_device,
    )
    model = _prefixed("model.draft_path", load_gguf, _bundled_or_path(models.draft_path), options)
    if target_tokenizer is None and models.target_path:
        target_tokenizer = _prefixed("model.target_path", load_tokenizer, models.target_path)
    if target_tokenizer is not None:
        try:
            check_gguf_vocabulary(model, target_tokenizer, models.target_path)
        except IncompatibleVocabularyError:
            model.close()
            raise
    else:
        log.warning("no target configured: the gguf draft's vocabulary is checked per session, by fingerprint")
    return GgufDrafter(model)


def _bundled_or_path(source: str) -> str:
    return str(bundled_model_path(source)) if source in BUNDLED_MODELS else source


def _ngram_drafter(_target: LoadedModel, _draft: LoadedModel | None, _models: ModelSection) -> Drafter:
    return NgramDrafter()


_DRAFTER_BUILDERS: dict[DraftMethod, Callable[[LoadedModel, LoadedModel | None, ModelSection], Drafter]] = {
    DraftMethod.MODEL: _model_drafter,
    DraftMethod.LAYER_SKIP: _layer_skip_drafter,
    DraftMethod.NGRAM: _ngram_drafter,
}


def load_draft_side(config: SpecdecConfig) -> tuple[Drafter, LoadedModel | None]:
    """The drafter a draft service runs, and the model behind it (None for n-gram).

    Layer-skip loads the target and keeps only its first layers, so the draft host holds no more
    than the draft needs.
    """
    models = config.model
    if models.draft_method is DraftMethod.NGRAM:
        return NgramDrafter(), None
    if models.draft_method is DraftMethod.GGUF:
        drafter = _gguf_drafter(config)
        return with_prompt_lookup(drafter, models), drafter.model
    if models.draft_method is DraftMethod.MODEL:
        draft = _load_draft(models)
        check_tree_support(config, draft, "model.draft_path")
        return with_prompt_lookup(ModelDrafter(draft.model), models), draft
    if not models.target_path:
        raise SpecdecError("draft_method=layer_skip drafts with the target's first layers: set model.target_path or pass --target")
    target = _load("model.target_path", models.target_path, device=models.draft_device, dtype=models.dtype)
    drafter = _layer_skip_drafter(target, None, models)
    return with_prompt_lookup(drafter, models), LoadedModel(model=drafter.model, tokenizer=target.tokenizer, source=target.source)
