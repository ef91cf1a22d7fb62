"""Model drafters: a separate draft model and layer-skip self-speculation."""

from __future__ import annotations

import pytest
import torch

from specdec.drafters import DraftRequest, ModelDrafter, layer_skip_drafter
from specdec.drafters.model import truncated_view
from specdec.enums import AcceptanceMode
from specdec.sampling import SamplingParams


def _request(tiny_target, acceptance, sampling=SamplingParams(), seed=0):
    prompt = tiny_target.tokenizer("Once upon a time")["input_ids"]
    return DraftRequest(prompt, sampling, acceptance, seed=seed, vocab_size=tiny_target.vocab_size, draft_top_k=16)


def test_layer_skip_view_shares_weights_and_leaves_target_whole(tiny_target):
    view = truncated_view(tiny_target.model, 2)
    assert len(view.get_decoder().layers) == 2 and len(tiny_target.model.get_decoder().layers) == 4
    assert view.lm_head.weight.data_ptr() == tiny_target.model.lm_head.weight.data_ptr()
    assert tiny_target.model.config.num_hidden_layers == 4


def test_layer_skip_of_two_layers_equals_the_tiny_draft(tiny_target, tiny_draft):
    # The tiny draft is a copy of the target's first two layers, final norm and head.
    ids = torch.tensor([tiny_target.tokenizer("the river and the market")["input_ids"]])
    with torch.inference_mode():
        view_logits = truncated_view(tiny_target.model, 2)(input_ids=ids).logits
        draft_logits = tiny_draft.model(input_ids=ids).logits
    assert torch.allclose(view_logits, draft_logits, atol=1e-5)


def test_layer_skip_rejects_layer_counts_outside_the_target(tiny_target):
    for bad in (0, 4):
        with pytest.raises(ValueError, match="num_layers"):
            layer_skip_drafter(tiny_target.model, bad)


def test_rejection_block_carries_the_sparse_q_each_candidate_was_sampled_from(tiny_target, tiny_draft):
    session = ModelDrafter(tiny_draft.model).open(_request(tiny_target, AcceptanceMode.REJECTION))
    block = session.propose(4)
    ids, probs = block.draft_probs
    assert block.candidate_ids.shape == (4,) and ids.shape == probs.shape == (4, 16)
    assert torch.allclose(probs.sum(-1), torch.ones(4, dtype=probs.dtype))
    for position, candidate in enumerate(block.candidate_ids.tolist()):
        assert candidate in ids[position].tolist()


def test_greedy_and_coupled_blocks_need_no_q_and_are_deterministic(tiny_target, tiny_draft):
    drafter = ModelDrafter(tiny_draft.model)
    for mode, sampling in (
        (AcceptanceMode.GREEDY, SamplingParams(temperature=0)),
        (AcceptanceMode.COUPLED, SamplingParams(temperature=0.9)),
    ):
        first = drafter.open(_request(tiny_target, mode, sampling, seed=5)).propose(5)
        second = drafter.open(_request(tiny_target, mode, sampling, seed=5)).propose(5)
        assert first.draft_probs is None and torch.equal(first.candidate_ids, second.candidate_ids)


def test_feedback_rolls_back_and_extends_the_draft_cache(tiny_target, tiny_draft):
    session = ModelDrafter(tiny_draft.model).open(_request(tiny_target, AcceptanceMode.GREEDY, SamplingParams(temperature=0)))
    prompt_length = len(session.committed.token_ids)
    block = session.propose(4)
    session.feedback(2, [11])
    assert session.committed.token_ids[prompt_length:] == [*block.candidate_ids[:2].tolist(), 11]
    session.propose(3)  # rolls the cache back to the committed prefix before drafting
    assert session.lm.cached_ids[: prompt_length + 3] == session.committed.token_ids
    with pytest.raises(ValueError, match="num_accepted"):
        session.feedback(4, [1])
    session.close()
    assert session.lm.cached_ids == []


def test_rejection_candidates_are_samples_of_their_q_and_a_pure_function_of_seed_and_state(tiny_target, tiny_draft):
    from scipy import stats

    drafter = ModelDrafter(tiny_draft.model)
    sampling = SamplingParams(temperature=1.0)
    first = drafter.open(_request(tiny_target, AcceptanceMode.REJECTION, sampling, seed=3)).propose(3)
    again = drafter.open(_request(tiny_target, AcceptanceMode.REJECTION, sampling, seed=3))
    again.propose(5)  # drafting before, at the same positions, must not change the next draw
    assert torch.equal(again.propose(3).candidate_ids, first.candidate_ids)
    trials, counts = 400, {}
    for seed in range(trials):
        block = drafter.open(_request(tiny_target, AcceptanceMode.REJECTION, sampling, seed=seed)).propose(1)
        counts[int(block.candidate_ids[0])] = counts.get(int(block.candidate_ids[0]), 0) + 1
    ids, probs = block.draft_probs  # the same prompt every time: the same q
    expected = probs[0] / probs[0].sum() * trials
    observed = [counts.get(int(token), 0) for token in ids[0]]
    assert sum(observed) == trials  # never outside q's support
    assert stats.chisquare(observed, expected.tolist()).pvalue > 1e-3
