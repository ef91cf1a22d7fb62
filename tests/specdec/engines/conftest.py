"""Each target engine on the tiny target's own weights: transformers, and llama.cpp on a GGUF written from them."""

from __future__ import annotations

import pytest

ENGINES = ["hf", "llama_cpp"]


@pytest.fixture(scope="module", params=ENGINES)
def engine_target(request, tiny_target):
    """The tiny target run by each engine in turn."""
    return tiny_target if request.param == "hf" else request.getfixturevalue("tiny_llama_cpp_target")
