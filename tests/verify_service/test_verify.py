"""Verify: a client with its own drafter sends candidate blocks and gets verdicts back."""

from __future__ import annotations

import pytest
import torch

from specdec.generation import SpeculativeGenerator
from specdec.noise import keyed_gumbel
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

PROMPT = "Once upon a time there was a little house by the river."


@pytest.fixture(scope="module")
def greedy_reference(tiny_target):
    ids = tiny_target.tokenizer(PROMPT)["input_ids"]
    request = GenerationRequest(prompt_ids=ids, max_tokens=20, sampling=SamplingParams(temperature=0), speculative=False, ignore_eos=True)
    return SpeculativeGenerator(tiny_target).generate(request).token_ids


def _greedy_session(verify_client, max_tokens=20):
    return verify_client.verify_session(PROMPT, max_tokens=max_tokens, temperature=0, ignore_eos=True)


def test_open_reports_prompt_seed_and_budget(verify_client, tiny_target):
    with verify_client.verify_session(PROMPT, max_tokens=20, temperature=0, seed=5) as session:
        assert list(session.opened.prompt_ids) == tiny_target.tokenizer(PROMPT)["input_ids"]
        assert session.opened.seed == 5 and session.opened.max_candidates == 19


def test_right_candidates_are_all_accepted_plus_a_bonus(verify_client, greedy_reference):
    with _greedy_session(verify_client) as session:
        verdict = session.verify(greedy_reference[:4])
        assert verdict.num_accepted == 4 and list(verdict.token_ids) == greedy_reference[:5]


def test_wrong_candidates_are_rejected_and_the_target_token_returned(verify_client, greedy_reference):
    wrong = [(token + 1) % 512 for token in greedy_reference[:3]]
    with _greedy_session(verify_client) as session:
        verdict = session.verify(wrong)
        assert verdict.num_accepted == 0 and list(verdict.token_ids) == greedy_reference[:1]


def test_a_mix_is_accepted_up_to_the_first_wrong_candidate(verify_client, greedy_reference):
    mixed = [*greedy_reference[:2], (greedy_reference[2] + 1) % 512, greedy_reference[3]]
    with _greedy_session(verify_client) as session:
        first = session.verify(mixed)
        assert first.num_accepted == 2 and list(first.token_ids) == greedy_reference[:3]
        second = session.verify(greedy_reference[3:6])  # the session continues from the verdict
        assert second.num_accepted == 3 and list(second.token_ids) == greedy_reference[3:7]


def test_budget_shrinks_and_the_session_finishes_at_max_tokens(verify_client, greedy_reference):
    with _greedy_session(verify_client, max_tokens=4) as session:
        verdict = session.verify(greedy_reference[:3])
        assert verdict.finish_reason == "length" and list(verdict.token_ids) == greedy_reference[:4]
        assert verdict.max_candidates == 0 and verdict.usage.completion_tokens == 4


def test_rejection_mode_with_point_mass_q_accepts_in_proportion_to_p(verify_client, tiny_target):
    """A candidate sent with q = 1 is accepted with probability p(x): certain when p(x) = 1."""
    ids = tiny_target.tokenizer(PROMPT)["input_ids"]
    with torch.inference_mode():
        probs = torch.softmax(tiny_target.model(input_ids=torch.tensor([ids])).logits[0, -1], -1)
    likely, unlikely = int(probs.argmax()), int(probs.argmin())
    accepted_likely = accepted_unlikely = 0
    for seed in range(40):
        for candidate in (likely, unlikely):
            with verify_client.verify_session(PROMPT, max_tokens=5, temperature=1.0, seed=seed, acceptance="rejection") as session:
                verdict = session.verify([candidate], draft_probs=[([candidate], [1.0])])
                accepted = verdict.num_accepted == 1
                accepted_likely += accepted and candidate == likely
                accepted_unlikely += accepted and candidate == unlikely
                assert accepted or verdict.token_ids[0] != candidate  # the recovered token excludes x
    assert accepted_likely >= 40 * float(probs[likely]) / 3 and accepted_unlikely <= 2


def test_coupled_client_drafting_with_keyed_noise_reproduces_target_only(verify_client, tiny_target):
    """A client that drafts with the target itself and the shared keyed noise is always accepted."""
    sampling = SamplingParams(temperature=0.9)
    ids = tiny_target.tokenizer(PROMPT)["input_ids"]
    request = GenerationRequest(prompt_ids=ids, max_tokens=10, sampling=sampling, seed=21, speculative=False, ignore_eos=True)
    reference = SpeculativeGenerator(tiny_target).generate(request).token_ids
    with verify_client.verify_session(PROMPT, max_tokens=10, temperature=0.9, seed=21, acceptance="coupled", ignore_eos=True) as session:
        position = len(ids)
        with torch.inference_mode():
            logits = tiny_target.model(input_ids=torch.tensor([ids])).logits[0, -1] / 0.9
        noise = keyed_gumbel(session.opened.seed, torch.tensor([position]), logits.shape[-1])[0]
        candidate = int((torch.log_softmax(logits.double(), -1) + noise).argmax())
        verdict = session.verify([candidate])
        assert verdict.num_accepted == 1 and list(verdict.token_ids) == reference[:2]
