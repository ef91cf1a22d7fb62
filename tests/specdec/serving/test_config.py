"""load_config: the documented YAML format as written, SPECDEC_* env, flag overrides, and one-line errors."""

import os

import pytest

from specdec.errors import SpecdecError
from specdec.serving.config import DraftMethod, Verification, load_config

SEED_YAML = """\
model: {target_path: /models/target-model, draft_path: /models/draft-model}
speculative: {enabled: true, draft_tokens: 5, verification: tree, acceptance_sampling: true}
serving: {host: 0.0.0.0, port: 8080, max_batch_size: 8, max_concurrent_requests: 64}
observability: {metrics_port: 9090, log_level: info}
"""


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in [name for name in os.environ if name.startswith("SPECDEC_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def seed_file(tmp_path):
    path = tmp_path / "seed.yaml"
    path.write_text(SEED_YAML)
    return path


def _write(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_seed_yaml_loads_as_written(seed_file):
    config = load_config(seed_file)
    assert config.model.target_path == "/models/target-model"
    assert config.model.draft_path == "/models/draft-model"
    assert config.model.draft_method is DraftMethod.MODEL
    assert config.speculative.enabled is True
    assert config.speculative.verification is Verification.TREE
    assert config.speculative.acceptance.value == "coupled"  # trees' default: rejection verifies chains only
    assert config.speculative.draft_tokens == 5
    assert config.speculative.acceptance_sampling is True
    assert (config.serving.host, config.serving.port) == ("0.0.0.0", 8080)
    assert (config.serving.max_batch_size, config.serving.max_concurrent_requests) == (8, 64)
    assert (config.observability.metrics_port, config.observability.log_level) == (9090, "info")


@pytest.mark.parametrize(
    ("text", "admitted"),
    [("", 8), ("serving: {max_batch_size: 32}\n", 32), ("serving: {max_batch_size: 32, max_concurrent_requests: 4}\n", 4)],
)
def test_the_gateway_admits_one_forward_pass_of_generations_unless_told(tmp_path, text, admitted):
    config = load_config(_write(tmp_path, text or "{}\n"))
    assert config.serving.max_concurrent_requests == admitted


def test_the_admission_default_follows_the_batch_size_set_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_SERVING__MAX_BATCH_SIZE", "16")
    assert load_config(_write(tmp_path, "{}\n")).serving.max_concurrent_requests == 16


def test_acceptance_sampling_false_is_refused(tmp_path):
    path = _write(tmp_path, "speculative: {acceptance_sampling: false}\n")
    with pytest.raises(SpecdecError, match=r"speculative\.acceptance_sampling"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "name"),
    [("speculative: {draft_tokenz: 3}\n", "speculative.draft_tokenz"), ("caching: {size: 1}\n", "caching")],
)
def test_unknown_key_is_refused_by_name(tmp_path, text, name):
    with pytest.raises(SpecdecError) as caught:
        load_config(_write(tmp_path, text))
    assert name in str(caught.value)


def test_out_of_range_value_names_the_field_and_file(tmp_path):
    path = _write(tmp_path, "speculative: {draft_tokens: 0}\n")
    with pytest.raises(SpecdecError) as caught:
        load_config(path)
    assert "speculative.draft_tokens" in str(caught.value) and str(path) in str(caught.value)


def test_env_overrides_file(seed_file, monkeypatch):
    monkeypatch.setenv("SPECDEC_SPECULATIVE__DRAFT_TOKENS", "7")
    config = load_config(seed_file)
    assert config.speculative.draft_tokens == 7
    assert config.speculative.verification is Verification.TREE  # the rest of the section still comes from the file


def test_flags_override_env_and_keep_the_files_other_keys(seed_file, monkeypatch):
    monkeypatch.setenv("SPECDEC_SPECULATIVE__DRAFT_TOKENS", "7")
    config = load_config(seed_file, {"speculative": {"draft_tokens": 9}, "model": {"target_path": "/flag/target"}})
    assert config.speculative.draft_tokens == 9
    assert config.model.target_path == "/flag/target"
    assert config.model.draft_path == "/models/draft-model"
    assert config.speculative.verification is Verification.TREE
    assert config.speculative.acceptance.value == "coupled"  # trees' default: rejection verifies chains only


def test_none_overrides_mean_not_given(seed_file, monkeypatch):
    monkeypatch.setenv("SPECDEC_SPECULATIVE__DRAFT_TOKENS", "7")
    config = load_config(seed_file, {"speculative": {"draft_tokens": None, "enabled": None}, "model": {"target_path": None}})
    assert config.speculative.draft_tokens == 7
    assert config.speculative.enabled is True
    assert config.model.target_path == "/models/target-model"


def test_specdec_config_env_names_the_file(seed_file, monkeypatch):
    monkeypatch.setenv("SPECDEC_CONFIG", str(seed_file))
    config = load_config()
    assert config.speculative.verification is Verification.TREE
    assert config.speculative.acceptance.value == "coupled"  # trees' default: rejection verifies chains only
    assert config.model.target_path == "/models/target-model"


def test_no_file_gives_defaults():
    config = load_config()
    assert config.model.target_path is None
    assert config.speculative.verification is Verification.SEQUENTIAL
    assert config.speculative.acceptance_sampling is True


@pytest.mark.parametrize(
    ("text", "problem"),
    [("model: [unclosed\n", "not valid YAML"), ("- a\n- b\n", "must be a mapping"), ("just a string\n", "must be a mapping")],
)
def test_bad_file_contents_name_the_path(tmp_path, text, problem):
    path = _write(tmp_path, text)
    with pytest.raises(SpecdecError) as caught:
        load_config(path)
    assert str(path) in str(caught.value) and problem in str(caught.value)


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(SpecdecError) as caught:
        load_config(path)
    assert str(path) in str(caught.value)


def test_every_setting_is_in_the_configuration_reference_table():
    from pathlib import Path

    from specdec.serving.config import SpecdecConfig

    readme = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Configuration reference") : readme.index("### Memory plan")]
    missing = [
        f"{section}.{name}"
        for section, field in SpecdecConfig.model_fields.items()
        for name in field.annotation.model_fields
        if f"`{section}.{name}`" not in table
    ]
    assert not missing, f"document these settings in docs/configuration.md: {missing}"


def test_tree_settings_are_checked_naming_the_fields(tmp_path):
    config = load_config(_write(tmp_path, "speculative: {verification: tree, tree_branching: 3, tree_nodes: 12}\n"))
    assert (config.speculative.tree.branching, config.speculative.tree.max_nodes) == (3, 12)
    assert config.speculative.tree_request_fields() == {"tree_branching": 3, "tree_nodes": 12}
    assert load_config(_write(tmp_path, "speculative: {verification: sequential}\n")).speculative.tree_request_fields() == {}
    with pytest.raises(SpecdecError, match=r"speculative\.acceptance: coupled"):
        load_config(_write(tmp_path, "speculative: {verification: tree, acceptance: rejection}\n"))
    with pytest.raises(SpecdecError, match=r"tree_nodes \(4\) is smaller than draft_tokens \(5\)"):
        load_config(_write(tmp_path, "speculative: {verification: tree, tree_nodes: 4}\n"))


def test_adaptive_k_settings_load_and_min_stays_within_draft_tokens(tmp_path):
    config = load_config(_write(tmp_path, "speculative: {adaptive_k: true, draft_tokens: 6, min_draft_tokens: 1}\n"))
    assert (config.speculative.adaptive_k, config.speculative.min_draft_tokens, config.speculative.draft_tokens) == (True, 1, 6)
    defaults = load_config()
    assert (defaults.speculative.adaptive_k, defaults.speculative.min_draft_tokens) == (False, 0)
    with pytest.raises(SpecdecError, match=r"min_draft_tokens \(6\) is larger than draft_tokens \(5\)"):
        load_config(_write(tmp_path, "speculative: {adaptive_k: true, min_draft_tokens: 6}\n"))
