"""N-gram prompt lookup drafter."""

from __future__ import annotations

import random

import torch

from specdec.drafters import DraftRequest, NgramDrafter
from specdec.drafters.ngram import lookup_continuation
from specdec.enums import AcceptanceMode
from specdec.sampling import SamplingParams


def test_lookup_follows_latest_match_of_longest_suffix():
    tokens = [1, 2, 3, 9, 1, 2, 3, 4, 5, 6, 1, 2, 3]
    assert lookup_continuation(tokens, 3, max_ngram=3, min_ngram=1) == [4, 5, 6]


def test_lookup_falls_back_to_shorter_ngrams_and_to_nothing():
    assert lookup_continuation([5, 6, 7, 8, 6], 2, max_ngram=3, min_ngram=1) == [7, 8]
    assert lookup_continuation([1, 2, 3, 4], 2, max_ngram=3, min_ngram=1) == []
    assert lookup_continuation([1, 2, 1], 0, max_ngram=3, min_ngram=1) == []


def _naive_lookup(tokens, num_tokens, max_ngram, min_ngram):
    for size in range(min(max_ngram, len(tokens) - 1), min_ngram - 1, -1):
        for start in range(len(tokens) - size - 1, -1, -1):
            if tokens[start : start + size] == tokens[-size:]:
                return tokens[start + size : start + size + num_tokens]
    return []


def test_lookup_equals_the_naive_definition_on_random_sequences():
    generator = random.Random(0)
    for _ in range(500):
        tokens = [generator.randrange(6) for _ in range(generator.randrange(1, 40))]
        k, max_ngram = generator.randrange(1, 4), generator.randrange(1, 5)
        min_ngram = generator.randrange(1, max_ngram + 1)
        assert lookup_continuation(tokens, k, max_ngram, min_ngram) == _naive_lookup(tokens, k, max_ngram, min_ngram)


def test_session_tracks_feedback_and_sends_point_mass_q():
    request = DraftRequest([1, 2, 3, 4, 1, 2], SamplingParams(), AcceptanceMode.REJECTION, seed=0, vocab_size=10)
    session = NgramDrafter().open(request)
    block = session.propose(3)
    assert block.candidate_ids.tolist() == [3, 4, 1]
    assert block.draft_probs.token_ids.flatten().tolist() == [3, 4, 1]
    assert torch.equal(block.draft_probs.probs, torch.ones(3, 1, dtype=torch.float64))
    session.feedback(1, [7])  # kept 3, target appended 7
    assert session.committed.token_ids == [1, 2, 3, 4, 1, 2, 3, 7]
