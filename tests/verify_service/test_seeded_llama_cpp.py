"""A seeded request repeats on the default pair's llama.cpp target whatever was served before it. The target reuses
a finished session's kept KV cells only where they are bit-identical to a fresh decode (engines/gguf_prompt_cache.py):
a prefix reused from the shared pool was not, and a seeded text then changed after the first line (found by hand
with `specdec up` and the openai SDK)."""

from __future__ import annotations

import pytest
from conftest import start_draft_server, start_verify_server
from gguf_support import load_draft_gguf

from specdec.bundled import bundled_model_path
from specdec.cli.client import VerifyClient
from specdec.drafters.gguf import GgufDrafter
from specdec.engines import load_engine
from specdec.make_draft import make_draft
from specdec.serving.config import ModelSection

OTHER = [{"role": "user", "content": "Name three colors."}]
SEEDED = [{"role": "user", "content": "Write a haiku."}]
# a system prompt long enough that a fresh decode runs it in a pass of 64 tokens or more
SYSTEM = {"role": "system", "content": " ".join(f"Rule {n}: answer briefly, plainly and politely." for n in range(1, 16))}


@pytest.fixture(scope="module")
def smollm2_llama_cpp(service_loop, default_target_dir, tmp_path_factory):
    bf16 = make_draft(default_target_dir, "bf16", tmp_path_factory.mktemp("bf16") / "target-bf16.gguf").path
    target = load_engine(ModelSection(target_path=str(bf16)))
    gguf = load_draft_gguf(bundled_model_path("smollm2-135m-instruct"))
    draft = start_draft_server(service_loop, GgufDrafter(gguf), gguf, overlap=True)
    verify = start_verify_server(service_loop, target, f"127.0.0.1:{draft.port}")
    with VerifyClient(f"127.0.0.1:{verify.port}") as client:
        yield client
    service_loop.run(verify.stop(0))
    service_loop.run(draft.stop(0))
    gguf.close()


def test_a_seeded_request_repeats_after_other_requests(smollm2_llama_cpp):
    smollm2_llama_cpp.generate(OTHER, max_tokens=40, temperature=1.0, seed=7)
    texts = {tuple(smollm2_llama_cpp.generate(SEEDED, max_tokens=30, temperature=1.0, seed=42).token_ids) for _ in range(4)}
    assert len(texts) == 1


def test_a_next_turn_is_the_same_text_after_its_first_turn_was_served(smollm2_llama_cpp):
    first_turn = [SYSTEM, {"role": "user", "content": "Name a fruit."}]
    answer = smollm2_llama_cpp.generate(first_turn, max_tokens=24, temperature=1.0, seed=3).text
    next_turn = [*first_turn, {"role": "assistant", "content": answer}, {"role": "user", "content": "And a vegetable?"}]
    settings = {"max_tokens": 30, "temperature": 1.0, "seed": 42}
    after_first_turn = smollm2_llama_cpp.generate(next_turn, **settings).token_ids  # reuses the first turn's cells
    smollm2_llama_cpp.generate(OTHER, max_tokens=40, temperature=1.0, seed=7)
    for _ in range(2):
        assert smollm2_llama_cpp.generate(next_turn, **settings).token_ids == after_first_turn
