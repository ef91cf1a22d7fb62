"""Fixtures of the in-process generation tests: the repeating prompt and the tiny pair's drafters."""

from __future__ import annotations

import pytest
from generation_support import PROMPT, tiny_drafters


@pytest.fixture(scope="module")
def prompt_ids(tiny_target):
    return tiny_target.tokenizer(PROMPT)["input_ids"]


@pytest.fixture(scope="module")
def drafters(tiny_target, tiny_draft):
    return tiny_drafters(tiny_target, tiny_draft)
