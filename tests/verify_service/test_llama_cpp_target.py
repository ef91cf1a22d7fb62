"""`specdec serve verify --target x.gguf`: a real verify process whose target llama.cpp runs, drafted by a draft
service, gives what the target alone gives."""

from __future__ import annotations

import time

import pytest
from service_support import free_port, spawn_service

from specdec.cli.client import VerifyClient
from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


@pytest.fixture(scope="module")
def gguf_verify(tiny_ggufs, draft_server):
    port = free_port()
    process = spawn_service(
        "verify",
        "--target",
        str(tiny_ggufs.target),
        "--port",
        str(port),
        "--metrics-port",
        "0",
        "--draft-endpoint",
        f"127.0.0.1:{draft_server.port}",
        env={"SPECDEC_VERIFY_SERVICE__DRAFT_ROUND_TIMEOUT_MS": "20000", "SPECDEC_VERIFY_SERVICE__CPU_THREADS": "1"},
    )
    client = VerifyClient(f"127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 60
        while not client.is_serving(timeout=1.0):
            assert process.poll() is None and time.monotonic() < deadline, (
                process.stdout.read().decode() if process.poll() is not None else "not serving"
            )
            time.sleep(0.2)
        yield client
    finally:
        client.close()
        process.kill()
        process.wait(timeout=10)


def test_a_gguf_target_serves_speculation_equal_to_the_target_alone(gguf_verify, tiny_llama_cpp_target):
    ids = tiny_llama_cpp_target.tokenizer(PROMPT)["input_ids"]
    request = GenerationRequest(prompt_ids=ids, max_tokens=60, sampling=SamplingParams(temperature=0), speculative=False, ignore_eos=True)
    reference = SpeculativeGenerator(tiny_llama_cpp_target).generate(request).token_ids
    completion = gguf_verify.generate(PROMPT, max_tokens=60, temperature=0, ignore_eos=True)
    assert completion.token_ids == reference
    assert completion.summary.draft_tokens > 0 and not completion.summary.fallback


def test_its_status_names_the_gguf_and_the_logits_width(gguf_verify, tiny_ggufs, tiny_llama_cpp_target):
    status = gguf_verify.status()
    assert status.model == str(tiny_ggufs.target) and status.vocab_size == tiny_llama_cpp_target.vocab_size
