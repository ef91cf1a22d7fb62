"""Shared fixtures: one tiny random (target, draft) pair per test session, loaded once."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")


@pytest.fixture(scope="session")
def tiny_pair_paths(tmp_path_factory):
    from specdec.tiny_pair import make_tiny_pair

    return make_tiny_pair(tmp_path_factory.mktemp("tiny-pair"))


@pytest.fixture(scope="session")
def tiny_target(tiny_pair_paths):
    from specdec.models import load_model

    return load_model(tiny_pair_paths.target, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tiny_draft(tiny_pair_paths):
    from specdec.models import load_model

    return load_model(tiny_pair_paths.draft, device="cpu", dtype="float32")
