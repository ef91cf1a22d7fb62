"""`specdec check-lossless` against the real stack: passes, and catches a lossy verifier."""

from __future__ import annotations

from collections import Counter

import torch

from specdec import target_session
from specdec.acceptance import RoundVerdict
from specdec.drafters import NgramDrafter
from specdec.lossless_check import LosslessCheck, PROMPTS, run, two_sample_p_value


def test_the_real_stack_passes_every_check(gateway_url):
    results = run(gateway_url, None, None, prompts=3, max_tokens=12, samples=150)
    assert [r.passed for r in results] == [True, True, True], [(r.name, r.detail) for r in results]


def _always_accept(candidate_ids, draft_probs, target_probs, generator) -> RoundVerdict:
    bonus = int(torch.multinomial(target_probs[-1].double().cpu(), 1, generator=generator))
    return RoundVerdict(candidate_ids.tolist(), bonus, len(candidate_ids))


def test_a_verifier_that_keeps_every_draft_token_fails(make_draft_server, make_verify_server, make_gateway, tiny_target, monkeypatch):
    """Negative control: a lossy verifier (keeps every candidate) behind an n-gram drafter."""
    draft = make_draft_server(NgramDrafter(), None)
    verify = make_verify_server(tiny_target, f"127.0.0.1:{draft.port}")
    gateway = make_gateway(verify_endpoint=f"127.0.0.1:{verify.port}")
    monkeypatch.setattr(target_session, "rejection_accept", _always_accept)
    monkeypatch.setattr(target_session, "greedy_accept", lambda candidates, probs: _always_accept(candidates, None, probs, torch.Generator()))
    check = LosslessCheck(gateway.url, None, None)
    repetitive = "Repeat after me: the cat sat on the mat, the cat sat on the mat, the cat"
    assert not check.greedy([repetitive, *PROMPTS[:3]], max_tokens=24).passed
    assert not check.rejection(repetitive, samples=150, temperature=1.0).passed


def test_two_sample_p_value_pools_rare_tokens_and_separates_different_laws():
    same = two_sample_p_value(Counter(a=50, b=45, c=5, d=1), Counter(a=48, b=47, c=4, e=2))
    different = two_sample_p_value(Counter(a=90, b=10), Counter(a=40, b=60))
    assert same > 0.05 and different < 1e-6
    assert two_sample_p_value(Counter(a=10), Counter(a=12)) == 1.0
