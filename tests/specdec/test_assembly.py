"""Building drafters from configuration: prompt lookup in front of model drafts, as configured."""

from __future__ import annotations

from specdec.assembly import build_generator, load_draft_side
from specdec.drafters import ModelDrafter, NgramDrafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.serving.config import load_config


def _config(tiny_pair_paths, **model):
    return load_config(None, {"model": {"target_path": str(tiny_pair_paths.target), "draft_path": str(tiny_pair_paths.draft), **model}})


def test_model_drafts_get_prompt_lookup_first_by_default(tiny_pair_paths):
    side = load_draft_side(_config(tiny_pair_paths))
    drafter, model = side.drafter, side.model
    assert isinstance(drafter, PromptLookupDrafter) and isinstance(drafter.inner, ModelDrafter)
    assert drafter.settings == LookupSettings(min_ngram=2, max_ngram=3, model_tokens=None)
    assert drafter.name == "prompt_lookup+model" and model is not None


def test_lookup_settings_come_from_the_config(tiny_pair_paths):
    config = _config(tiny_pair_paths, prompt_lookup_min_ngram=1, prompt_lookup_max_ngram=4, model_draft_tokens=1)
    assert build_generator(config).drafter.settings == LookupSettings(min_ngram=1, max_ngram=4, model_tokens=1)


def test_prompt_lookup_off_leaves_the_model_draft_alone(tiny_pair_paths):
    drafter = load_draft_side(_config(tiny_pair_paths, prompt_lookup=False)).drafter
    assert isinstance(drafter, ModelDrafter)


def test_ngram_drafting_is_not_wrapped_twice(tiny_pair_paths):
    side = load_draft_side(_config(tiny_pair_paths, draft_method="ngram"))
    drafter, model = side.drafter, side.model
    assert isinstance(drafter, NgramDrafter) and model is None


def test_layer_skip_drafts_get_prompt_lookup_too(tiny_pair_paths):
    drafter = load_draft_side(_config(tiny_pair_paths, draft_method="layer_skip", layer_skip_layers=1)).drafter
    assert isinstance(drafter, PromptLookupDrafter) and drafter.inner.name == "layer_skip"


def test_every_draft_method_has_its_row_and_cli_choice():
    from specdec.cli.main import DRAFT_METHOD_CHOICES
    from specdec.draft_methods import DRAFT_METHODS
    from specdec.serving.config import DraftMethod

    assert set(DRAFT_METHODS) == set(DraftMethod)
    assert DRAFT_METHOD_CHOICES == [method.value for method in DRAFT_METHODS]
