"""Real processes (`specdec serve draft|verify`) with their default settings, sampled at T > 0:
overlap, prompt lookup before the model and rejection acceptance together. Blocks there join
looked-up steps (q 1 wide) and model steps (q draft_top_k wide); every request must draft, never
fall back, and the draft log must stay free of errors."""

from __future__ import annotations

import pytest
from service_support import ServiceProcess, free_port, grpc_serving, wait_until

from specdec.cli.client import VerifyClient

# Repetitive prompts, so prompt lookup matches in some rounds and the draft model drafts the others.
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "one two three four, one two three four, one two",
    "Tell me a story about the sea and the sea and the",
    "red green blue red green blue red green",
]
SEEDS = range(3)


@pytest.fixture(scope="module")
def stack(tiny_pair_paths, tmp_path_factory):
    logs = tmp_path_factory.mktemp("sampled-defaults")
    draft_port, verify_port = free_port(), free_port()
    draft = ServiceProcess(
        "draft", ["--draft", str(tiny_pair_paths.draft), "--port", str(draft_port), "--metrics-port", "0"], logs / "draft.log"
    )
    verify = ServiceProcess(
        "verify",
        [
            "--target",
            str(tiny_pair_paths.target),
            "--port",
            str(verify_port),
            "--metrics-port",
            "0",
            "--draft-endpoint",
            f"127.0.0.1:{draft_port}",
        ],
        logs / "verify.log",
    )
    client = VerifyClient(f"127.0.0.1:{verify_port}")
    try:
        # The documented start order: verify starts once the draft serves, so its first connection
        # to the draft does not land in gRPC's reconnect backoff (requests would fall back meanwhile).
        for name, process, port in (("draft", draft, draft_port), ("verify", verify, verify_port)):
            process.start()
            wait_until(lambda process=process, port=port: not process.alive() or grpc_serving(port), 90, f"the {name} service serving")
            assert process.alive(), process.output()
        yield client, draft
    finally:
        client.close()
        verify.stop()
        draft.stop()


def test_every_sampled_request_drafts_with_the_defaults_and_none_falls_back(stack):
    client, draft = stack
    summaries = [
        client.generate(prompt, max_tokens=48, temperature=0.8, seed=seed, ignore_eos=True, timeout=120).summary
        for prompt in PROMPTS
        for seed in SEEDS
    ]
    assert [summary.fallback for summary in summaries] == [False] * len(summaries), draft.output()
    assert all(summary.rounds > 0 and summary.draft_tokens > 0 for summary in summaries)
    assert sum(summary.accepted_tokens for summary in summaries) > 0
    assert "Traceback" not in draft.output()
