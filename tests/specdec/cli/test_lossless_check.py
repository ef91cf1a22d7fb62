"""`specdec check-lossless` against the real stack (tiny pair): it passes only when its "on" arms
really drafted (even where the load-aware policy has switched drafting off), fails when the draft
service is down, and catches a lossy verifier."""

from __future__ import annotations

import time

import httpx
import torch
from service_support import free_port

from specdec import acceptance_rounds
from specdec.acceptance import RoundVerdict
from specdec.cli.lossless_check import PROMPTS, LosslessCheck, run
from specdec.cli.main import main
from specdec.drafters import NgramDrafter, ngram

CHECK_ARGS = ["--prompts", "3", "--max-tokens", "12"]


def _requests(verify, policy: str, drafted: str) -> float:
    labels = {"policy": policy, "drafted": drafted}
    return verify.servicer.metrics.registry.get_sample_value("specdec_speculative_requests_total", labels) or 0.0


def _counters(verify) -> dict[str, float]:
    registry = verify.servicer.metrics.registry
    return {
        "always drafted": _requests(verify, "always", "yes"),
        "always undrafted": _requests(verify, "always", "no"),
        "auto": _requests(verify, "auto", "yes") + _requests(verify, "auto", "no"),
        "draft tokens": registry.get_sample_value("specdec_spec_decode_num_draft_tokens_total"),
        "accepted tokens": registry.get_sample_value("specdec_spec_decode_num_accepted_tokens_total"),
    }


def _switch_drafting_off(url: str, verify) -> None:
    """Default ("auto") requests until the load-aware policy has measured drafting as slower and stopped it."""
    body = {"model": "target", "messages": [{"role": "user", "content": "Tell me about the sea."}], "max_tokens": 24, "temperature": 0}
    deadline = time.monotonic() + 90
    policy = verify.servicer.load_policy.kinds[False]  # greedy requests'
    # NOTE: off by decision (drafting measured slower), not while alternating before the first comparison.
    while policy.drafting or (policy.buckets[1].log_gain if 1 in policy.buckets else None) is None:
        assert time.monotonic() < deadline, "the load-aware policy never switched drafting off on the tiny pair"
        httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).raise_for_status()


def test_passes_and_every_on_request_drafts_where_the_load_aware_policy_stopped_drafting(
    draft_server, make_verify_server, make_gateway, tiny_target
):
    verify = make_verify_server(tiny_target, f"127.0.0.1:{draft_server.port}", load_aware_speculation=True, load_window_s=0.05)
    gateway = make_gateway(verify_endpoint=f"127.0.0.1:{verify.port}")
    _switch_drafting_off(gateway.url, verify)
    registry = verify.servicer.metrics.registry
    assert registry.get_sample_value("specdec_load_policy_drafting", {"requests": "greedy"}) == 0.0
    before = _counters(verify)
    results = run(gateway.url, None, None, prompts=3, max_tokens=12, samples=150)
    assert [r.passed for r in results] == [True, True, True], [(r.name, r.detail) for r in results]
    after = _counters(verify)
    on_requests = sum(r.drafting.requests for r in results)
    assert on_requests == 3 + 2 + 150 and all(r.drafting.drafted == r.drafting.requests for r in results)
    # verify's own counters agree: every "on" request drafted, and only they did.
    assert after["always drafted"] - before["always drafted"] == on_requests
    assert after["always undrafted"] == before["always undrafted"] and after["auto"] == before["auto"]
    assert after["draft tokens"] - before["draft tokens"] == sum(r.drafting.draft_tokens for r in results)
    assert after["accepted tokens"] - before["accepted tokens"] == sum(r.drafting.accepted_tokens for r in results) > 0
    assert registry.get_sample_value("specdec_load_policy_drafting", {"requests": "greedy"}) == 0.0  # still off: the checks went around it


def test_fails_saying_why_when_the_draft_service_is_down(make_verify_server, make_gateway, tiny_target, capsys):
    verify = make_verify_server(tiny_target, f"127.0.0.1:{free_port()}")  # nothing listens there
    gateway = make_gateway(verify_endpoint=f"127.0.0.1:{verify.port}")
    assert main(["check-lossless", "--url", gateway.url, *CHECK_ARGS, "--samples", "60"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["FAIL", "FAIL", "FAIL"] and lines[3].startswith("lossless: FAIL")
    assert 'the on arm did not speculate: 3/3 "on" requests fell back to the target alone (the draft service is down' in lines[0]
    assert '60/60 "on" requests fell back' in lines[2] and "no draft token was accepted" in lines[2]
    assert "chi-square p = " in lines[2] and "identical" in lines[0]  # the outputs themselves agree: fallback is lossless


def test_an_unreachable_gateway_is_one_error_line(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["check-lossless", "--url", url]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith(f"specdec: error: cannot reach the gateway at {url}")


def test_too_few_samples_get_a_warning_with_the_detectable_distance(capsys):
    assert main(["check-lossless", "--url", f"http://127.0.0.1:{free_port()}", "--samples", "40"]) == 1
    warning = capsys.readouterr().err.splitlines()[0]
    assert warning.startswith("specdec: warning: --samples 40: the rejection check cannot detect a total-variation distance below 0.")
    assert main(["check-lossless", "--url", f"http://127.0.0.1:{free_port()}", "--samples", "2"]) == 1
    assert "--samples: at least 3" in capsys.readouterr().err


def _always_accept(candidate_ids, draft_probs, target_probs, generator) -> RoundVerdict:
    bonus = int(torch.multinomial(target_probs[-1].double().cpu(), 1, generator=generator))
    return RoundVerdict(candidate_ids.tolist(), bonus, len(candidate_ids))


def test_a_verifier_that_keeps_every_draft_token_fails(make_draft_server, make_verify_server, make_gateway, tiny_target, monkeypatch):
    """Negative control: a lossy verifier (keeps every candidate) behind an n-gram drafter whose lookup
    always proposes the last token again, so every round after the first (the target's own) drafts."""
    monkeypatch.setattr(ngram, "lookup_continuation", lambda token_ids, num_tokens, max_ngram, min_ngram: token_ids[-1:] * num_tokens)
    draft = make_draft_server(NgramDrafter(), None)
    verify = make_verify_server(tiny_target, f"127.0.0.1:{draft.port}")
    gateway = make_gateway(verify_endpoint=f"127.0.0.1:{verify.port}")
    monkeypatch.setattr(acceptance_rounds, "rejection_accept", _always_accept)
    monkeypatch.setattr(
        acceptance_rounds, "greedy_accept", lambda candidates, probs: _always_accept(candidates, None, probs, torch.Generator())
    )
    check = LosslessCheck(gateway.url, None, None)
    repetitive = [
        "Repeat after me: the cat sat on the mat, the cat sat on the mat, the cat",
        "Say it again: one two three, one two three, one two three, one two",
    ]
    greedy = check.greedy([*repetitive, *PROMPTS[:2]], max_tokens=24)
    assert not greedy.passed and "prompts gave different texts" in greedy.reasons[0]
    rejection = check.rejection(repetitive, samples=200, temperature=1.0)
    assert not rejection.passed and rejection.reasons[0].startswith("the distributions differ"), rejection.detail
