"""The flag <-> setting table: every entry names a real setting and a real flag, and parsed command
lines become the overrides the services were always given."""

from __future__ import annotations

import argparse

import pytest

from specdec.cli.flags import CONFIG_FLAGS, config_overrides, flag_for, name_flags
from specdec.cli.main import build_parser
from specdec.serving.config import SpecdecConfig


def _all_flags(parser: argparse.ArgumentParser) -> set[str]:
    flags = set()
    for action in parser._actions:
        flags.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= _all_flags(sub)
    return flags


def test_every_entry_names_a_setting_and_a_flag_that_exist():
    flags = _all_flags(build_parser())
    for setting, flag in CONFIG_FLAGS:
        section, field = setting.split(".")
        assert field in SpecdecConfig.model_fields[section].annotation.model_fields, setting
        assert flag in flags, flag


def test_serve_draft_flags_become_draft_settings_only():
    args = build_parser().parse_args(["serve", "draft", "--port", "7", "--draft", "d", "--no-overlap", "--tls-ca", "ca.pem"])
    overrides = {section: {k: v for k, v in values.items() if v is not None} for section, values in config_overrides(args, "draft").items()}
    assert overrides == {"model": {"draft_path": "d"}, "draft_service": {"port": 7, "overlap": False}, "tls": {"ca_file": "ca.pem"}}


@pytest.mark.parametrize(("service", "section"), [("verify", "verify_service"), ("gateway", "serving")])
def test_per_service_flags_land_in_that_services_section(service, section):
    args = build_parser().parse_args(["serve", service, "--port", "9"])
    assert config_overrides(args, service)[section]["port"] == 9


def test_errors_name_the_flag_the_user_typed():
    assert flag_for("speculative.draft_tokens") == "--num-draft-tokens"
    assert flag_for("verify_service.port") == "--port"
    assert flag_for("observability.log_level") == "observability.log_level"  # no flag: the setting itself
    assert name_flags("speculative.draft_tokens: too large") == "--num-draft-tokens: too large"
