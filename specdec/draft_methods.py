"""The draft methods (`model.draft_method`), one row each: how its drafter is built and what it occupies in memory.

A row's builder runs in two places: in process beside a loaded target (the generator, `target` given), and alone in a
draft service (`target` None), where it loads whatever it drafts with. Adding a drafter is one module (its Drafter)
and one row here; the CLI's `--draft-method` choices and the memory plan read this table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specdec.bundled import BUNDLED_MODELS, bundled_model_path
from specdec.drafters import Drafter, ModelDrafter, NgramDrafter, layer_skip_drafter
from specdec.engines import TargetModel, check_tree_support, resolve_engine
from specdec.engines.hf import LoadedModel, check_vocab_compatible, load_model, load_tokenizer
from specdec.errors import IncompatibleVocabularyError, ModelLoadError, SpecdecError
from specdec.footprints import ModelFootprint, footprint, gguf_footprint, model_config
from specdec.serving.config import DraftMethod, ModelSection, SpecdecConfig, TargetEngine, Verification

if TYPE_CHECKING:
    from specdec.drafters.suffix_cache import SuffixTrees

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DraftSide:
    drafter: Drafter
    model: object | None  # the weights it drafts with (their describe_memory() is logged); None: none (n-gram)


@dataclass(frozen=True)
class DraftMethodRow:
    build: Callable[[SpecdecConfig, TargetModel | None], DraftSide]
    footprint: Callable[[SpecdecConfig], ModelFootprint | None]  # None: no weights of its own
    prompt_lookup: bool = True  # whether model.prompt_lookup puts prompt lookup in front of it


def prefixed(setting: str, loader, *args, **kwargs):
    """loader(*args, **kwargs), its ModelLoadError prefixed by the setting that named the file (the CLI shows the flag)."""
    try:
        return loader(*args, **kwargs)
    except ModelLoadError as error:
        raise ModelLoadError(f"{setting}: {error}") from error


def _build_model(config: SpecdecConfig, target: TargetModel | None) -> DraftSide:
    models = config.model
    if not models.draft_path:
        raise SpecdecError(
            "draft_method=model needs a draft model: set model.draft_path or pass --draft "
            "(or use --draft-method layer_skip|ngram, which need none)"
        )
    draft = prefixed(
        "model.draft_path",
        load_model,
        models.draft_path,
        device=models.draft_device,
        dtype=models.dtype,
        quantize=models.draft_quantization,
    )
    check_tree_support(config, draft, "model.draft_path")
    if target is not None:
        check_vocab_compatible(target, draft)
    return DraftSide(ModelDrafter(draft.model), draft)


def _model_footprint(config: SpecdecConfig) -> ModelFootprint:
    models = config.model
    if not models.draft_path:
        raise SpecdecError("draft_method=model needs model.draft_path")
    return footprint("draft", models.draft_path, models.draft_device, models.dtype, quantize=models.draft_quantization)


def _build_layer_skip(config: SpecdecConfig, target: TargetModel | None) -> DraftSide:
    """The target's first layers. A draft service loads the target and keeps only those, so the draft host holds no
    more than the draft needs."""
    models = config.model
    if not models.target_path:
        raise SpecdecError("draft_method=layer_skip drafts with the target's first layers: set model.target_path or pass --target")
    if resolve_engine(models, models.target_path) is not TargetEngine.HF:
        raise SpecdecError("draft_method=layer_skip drafts with the target's own torch layers: it needs model.target_engine hf")
    if target is None:
        target = prefixed("model.target_path", load_model, models.target_path, device=models.draft_device, dtype=models.dtype)
    num_layers = models.layer_skip_layers or max(1, len(target.model.get_decoder().layers) // 2)
    try:
        drafter = layer_skip_drafter(target.model, num_layers)
    except ValueError as error:
        raise SpecdecError(f"model.layer_skip_layers: {error}") from error
    return DraftSide(drafter, LoadedModel(model=drafter.model, tokenizer=target.tokenizer, source=target.source))


def _layer_skip_footprint(config: SpecdecConfig) -> ModelFootprint:
    models = config.model
    layers = models.layer_skip_layers or max(1, model_config(models.target_path).num_hidden_layers // 2)
    return footprint("draft", models.target_path, models.draft_device, models.dtype, num_layers=layers)


def _build_gguf(config: SpecdecConfig, target: TargetModel | None) -> DraftSide:
    """The GGUF draft, its vocabulary checked against the target's tokenizer (loaded alone in a draft service)."""
    from specdec.drafters.gguf import GgufDrafter, check_gguf_vocabulary
    from specdec.engines.gguf_model import GgufOptions, default_threads, load_gguf
    from specdec.engines.gguf_prompt_cache import DEFAULT_PROMPT_CACHE_TOKENS
    from specdec.engines.llama_cpp import TREES_REFUSED

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
        prompt_cache_tokens=DEFAULT_PROMPT_CACHE_TOKENS,
    )
    model = prefixed("model.draft_path", load_gguf, _bundled_or_path(models.draft_path), options)
    target_tokenizer = target.tokenizer if target is not None else None
    if target_tokenizer is None and models.target_path:
        target_tokenizer = prefixed("model.target_path", load_tokenizer, models.target_path)
    if target_tokenizer is None:
        log.warning("no target configured: the gguf draft's vocabulary is checked per session, by fingerprint")
        return DraftSide(GgufDrafter(model), model)
    try:
        check_gguf_vocabulary(model, target_tokenizer, models.target_path)
    except IncompatibleVocabularyError:
        model.close()
        raise
    return DraftSide(GgufDrafter(model), model)


def _gguf_footprint(config: SpecdecConfig) -> ModelFootprint:
    models = config.model
    return gguf_footprint(models.draft_path, models.draft_device, models.gguf_context_tokens)


def _bundled_or_path(source: str) -> str:
    return str(bundled_model_path(source)) if source in BUNDLED_MODELS else source


def _build_ngram(_config: SpecdecConfig, _target: TargetModel | None) -> DraftSide:
    return DraftSide(NgramDrafter(), None)


def _build_suffix(config: SpecdecConfig, _target: TargetModel | None) -> DraftSide:
    """Suffix decoding alone: the trees of the `suffix` section, no model (in process, or in a draft service)."""
    from specdec.drafters.suffix import SuffixDrafter

    return DraftSide(SuffixDrafter(new_suffix_trees(config, "model.draft_method")), None)


def new_suffix_trees(config: SpecdecConfig, setting: str) -> SuffixTrees:
    """Suffix decoding's trees (one set per process); `setting` is named when arctic-inference is missing."""
    try:
        from specdec.drafters.suffix_cache import SuffixTrees
    except ImportError as error:
        raise SpecdecError(
            f"{setting}: suffix decoding needs arctic-inference, which is not installed ({error}); "
            "`make install` builds it (docs/configuration.md, Suffix decoding)"
        ) from error
    return SuffixTrees(config.suffix.settings())


DRAFT_METHODS: dict[DraftMethod, DraftMethodRow] = {
    DraftMethod.MODEL: DraftMethodRow(_build_model, _model_footprint),
    DraftMethod.LAYER_SKIP: DraftMethodRow(_build_layer_skip, _layer_skip_footprint),
    DraftMethod.NGRAM: DraftMethodRow(_build_ngram, lambda _config: None, prompt_lookup=False),  # n-gram is lookup already
    DraftMethod.GGUF: DraftMethodRow(_build_gguf, _gguf_footprint),
    DraftMethod.SUFFIX: DraftMethodRow(_build_suffix, lambda _config: None, prompt_lookup=False),  # its trees hold the prompt
}


def with_prompt_lookup(drafter: Drafter, models: ModelSection) -> Drafter:
    """The drafter with prompt lookup tried first, where model.prompt_lookup is on and the method takes it."""
    from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter

    if not models.prompt_lookup or not DRAFT_METHODS[models.draft_method].prompt_lookup:
        return drafter
    return PromptLookupDrafter(
        drafter, LookupSettings(models.prompt_lookup_min_ngram, models.prompt_lookup_max_ngram, models.model_draft_tokens)
    )
