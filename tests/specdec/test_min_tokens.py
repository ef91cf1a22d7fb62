"""min_tokens' ban on stop tokens: a pure function over logits, and the per-request mask along a block."""

from __future__ import annotations

import torch

from specdec.min_tokens import MinTokensMask, mask_stop_tokens
from specdec.penalties import path_rows
from specdec.sampling import SamplingParams, processed_probs

VOCAB = 8
STOPS = (0, 5)


def _banned(logits: torch.Tensor) -> list[list[int]]:
    return [row.isneginf().nonzero().flatten().tolist() for row in logits]


def test_stop_ids_are_minus_inf_only_where_fewer_than_min_tokens_came_before():
    logits = torch.randn(4, VOCAB)
    masked = mask_stop_tokens(logits, torch.tensor([0, 2, 3, 7]), min_tokens=3, stop_ids=torch.tensor(STOPS))
    assert _banned(masked) == [[0, 5], [0, 5], [], []]
    keep = ~masked.isneginf()
    assert torch.equal(masked[keep], logits[keep])  # every other logit is untouched
    assert not _banned(logits)[0]  # a new tensor: the raw logits (logprobs) stay the model's own


def test_the_masked_distribution_gives_stop_tokens_nothing_and_renormalises():
    logits = torch.zeros(1, VOCAB)
    logits[0, 0] = 50.0  # EOS would be all but certain
    probs = processed_probs(mask_stop_tokens(logits, torch.tensor([0]), 1, torch.tensor(STOPS)), SamplingParams(temperature=1.0))
    assert probs[0, 0] == 0 and probs[0, 5] == 0
    assert torch.allclose(probs.sum(-1), torch.ones(1)) and torch.allclose(probs[0, 1], torch.tensor(1 / 6))
    greedy = processed_probs(mask_stop_tokens(logits, torch.tensor([0]), 1, torch.tensor(STOPS)), SamplingParams(temperature=0))
    assert greedy[0, 0] == 0 and greedy.sum() == 1


def test_a_chain_block_counts_the_candidates_before_each_position():
    # prompt of 4, 1 token generated, min_tokens 3: positions after 1, 2, 3, 4 generated tokens
    mask = MinTokensMask.for_request(3, prompt_length=4, stop_ids=STOPS)
    masked = mask(torch.zeros(4, VOCAB), sequence_length=5, paths=path_rows([-1, 0, 1]))
    assert _banned(masked) == [[0, 5], [0, 5], [], []]


def test_a_tree_counts_each_node_s_own_root_path():
    # nodes: 0 and 1 are root children, 2 is 0's child, 3 is 2's child -> depths 1, 1, 2, 3
    mask = MinTokensMask.for_request(2, prompt_length=3, stop_ids=STOPS)
    masked = mask(torch.zeros(5, VOCAB), sequence_length=3, paths=path_rows([-1, -1, 0, 2]))
    # rows: after the committed tokens (0 before), after node 0 (1), node 1 (1), node 2 (2), node 3 (3)
    assert _banned(masked) == [[0, 5], [0, 5], [0, 5], [], []]


def test_one_position_without_paths_and_nothing_to_do_past_min_tokens():
    mask = MinTokensMask.for_request(2, prompt_length=3, stop_ids=[5, 0, 5])
    assert mask.stop_ids == STOPS
    assert _banned(mask(torch.zeros(1, VOCAB), sequence_length=4)) == [[0, 5]]
    assert mask.bans_after(4) and not mask.bans_after(5)
    logits = torch.zeros(3, VOCAB)
    assert mask(logits, sequence_length=5, paths=path_rows([-1, 0])) is logits  # no work once past it


def test_no_mask_without_min_tokens_or_stop_ids():
    assert MinTokensMask.for_request(0, 3, STOPS) is None
    assert MinTokensMask.for_request(4, 3, ()) is None
