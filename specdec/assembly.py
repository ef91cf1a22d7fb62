"""A ready-to-run generator from configuration: the target through its engine, then the drafter its draft method
names (specdec.draft_methods)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specdec.draft_methods import DRAFT_METHODS, DraftSide, new_suffix_trees, with_prompt_lookup
from specdec.drafters import Drafter
from specdec.engines import check_tree_support, load_engine, target_sessions
from specdec.errors import SpecdecError
from specdec.generation import SpeculativeGenerator
from specdec.serving.config import SpecdecConfig

if TYPE_CHECKING:
    from specdec.drafters.suffix_cache import SuffixTrees


def build_generator(config: SpecdecConfig) -> SpeculativeGenerator:
    models = config.model
    if not models.target_path:
        raise SpecdecError("no target model: set model.target_path in the config or pass --target")
    target = load_engine(models, max_sequences=target_sessions(config))
    check_tree_support(config, target, "model.target_path")
    drafter: Drafter | None = None
    if config.speculative.enabled:
        drafter = with_prompt_lookup(DRAFT_METHODS[models.draft_method].build(config, target).drafter, models)
    return SpeculativeGenerator(target, drafter, suffix=suffix_trees(config))


def suffix_trees(config: SpecdecConfig) -> SuffixTrees | None:
    """Suffix decoding's trees where `suffix.enabled` (one set per process, shared by its sessions); None: off."""
    if not (config.suffix.enabled and config.speculative.enabled):
        return None
    return new_suffix_trees(config, "suffix.enabled")


def load_draft_side(config: SpecdecConfig) -> DraftSide:
    """The drafter a draft service runs, and the weights behind it (None for n-gram)."""
    side = DRAFT_METHODS[config.model.draft_method].build(config, None)
    return DraftSide(with_prompt_lookup(side.drafter, config.model), side.model)
