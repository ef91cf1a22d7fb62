"""Acceptance rules: which draft candidates the target keeps, and the token it appends.

Notation, said once: p is the target's processed distribution (`target_probs`), q the
distribution the drafter sampled its candidate from (`draft_probs`). Every round emits the
accepted prefix of the candidates plus one target token: a **recovered** token at the first
rejection, or a **bonus** token when all k candidates are accepted.

All functions are pure over tensors for one sequence; randomness comes only from the request's
own `torch.Generator`, and only where a draw is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec.noise import gumbel_argmax
from specdec.sampling import SparseDistribution, densify


@dataclass(frozen=True)
class RoundVerdict:
    """The outcome of verifying one block of k candidates."""

    accepted_ids: list[int]  # the accepted prefix of the candidates
    next_token_id: int  # recovered (after a rejection) or bonus (all accepted)
    num_candidates: int
    # A tree block: the indices of the accepted nodes, a path from the root; None for a chain.
    accepted_nodes: list[int] | None = None

    @property
    def num_accepted(self) -> int:
        return len(self.accepted_ids)

    @property
    def token_ids(self) -> list[int]:
        return [*self.accepted_ids, self.next_token_id]

    @property
    def accepted_path(self) -> list[int]:
        """The accepted candidates' indices in the block (a chain's are 0..num_accepted-1)."""
        return list(range(self.num_accepted)) if self.accepted_nodes is None else list(self.accepted_nodes)


def accept_matching_prefix(
    candidate_ids: torch.Tensor,  # [k] int64
    target_choice_ids: torch.Tensor,  # [k + 1] int64, the target's own token at each position
) -> RoundVerdict:
    """Accept candidates while they equal the target's choice; then append the target's choice.

    This is the whole rule for greedy (choice = argmax p) and coupled (choice = argmax of
    log p + keyed Gumbel noise) acceptance: the output is exactly the target's own sequence.
    """
    num_candidates = candidate_ids.shape[0]
    mismatches = (candidate_ids != target_choice_ids[:num_candidates]).nonzero()
    num_accepted = int(mismatches[0, 0]) if mismatches.numel() else num_candidates
    choices = target_choice_ids.tolist()
    return RoundVerdict(choices[:num_accepted], choices[num_accepted], num_candidates)


def greedy_accept(
    candidate_ids: torch.Tensor,  # [k]
    target_probs: torch.Tensor,  # [k + 1, vocab]
) -> RoundVerdict:
    return accept_matching_prefix(candidate_ids, target_probs.argmax(dim=-1))


def rejection_accept(
    candidate_ids: torch.Tensor,  # [k] int64
    draft_probs: SparseDistribution,  # [k, draft_top_k]: q each candidate was sampled from
    target_probs: torch.Tensor,  # [k + 1, vocab]
    generator: torch.Generator,
) -> RoundVerdict:
    """Leviathan et al. / Chen et al. rejection sampling: output ~ p exactly, for any q.

    Candidate i is accepted with probability min(1, p(x_i) / q(x_i)); the first rejected
    position emits a recovered token from norm(max(p - q, 0)); if all k are accepted the bonus
    token comes from p at position k.
    """
    num_candidates = candidate_ids.shape[0]
    vocab_size = target_probs.shape[-1]
    if torch.isnan(target_probs).any():
        raise ValueError("target_probs contains NaN; the target model produced invalid logits")
    draft_dense = densify(draft_probs, vocab_size).to(target_probs)  # [k, vocab]
    # NOTE: a NaN in q is treated as q=0: such a candidate is rejected, never divided by.
    draft_dense = torch.nan_to_num(draft_dense, nan=0.0)
    candidate_ids = candidate_ids.to(target_probs.device)
    rows = torch.arange(num_candidates, device=target_probs.device)
    # NOTE: the k per-candidate probabilities move to the CPU once; the loop below then costs
    # no device synchronisation per position.
    target_at_candidate = target_probs[rows, candidate_ids].double().cpu()  # [k]
    draft_at_candidate = draft_dense[rows, candidate_ids].double().cpu()  # [k]
    # NOTE: a candidate with q(x) = 0 (or NaN) cannot have been sampled from q: the block is cut
    # there and that position draws from p itself, which keeps the output exact anyway.
    num_valid = _leading_true(draft_at_candidate > 0)
    accept_probs = acceptance_probabilities(target_at_candidate[:num_valid], draft_at_candidate[:num_valid]).tolist()
    num_accepted = num_valid
    for position, accept_prob in enumerate(accept_probs):
        if accept_prob >= 1.0:
            continue  # min(1, p/q) == 1: no random draw needed
        if torch.rand((), generator=generator, dtype=torch.float64) >= accept_prob:
            num_accepted = position
            break
    accepted = candidate_ids[:num_accepted].tolist()
    if num_accepted == num_valid:
        return RoundVerdict(accepted, sample(target_probs[num_accepted], generator), num_candidates)
    residual = recovery_distribution(target_probs[num_accepted], draft_dense[num_accepted])
    return RoundVerdict(accepted, sample(residual, generator), num_candidates)


def _leading_true(mask: torch.Tensor) -> int:  # mask [k] bool
    false_positions = (~mask).nonzero()
    return int(false_positions[0, 0]) if false_positions.numel() else int(mask.shape[0])


def acceptance_probabilities(
    target_at_candidate: torch.Tensor,  # [k] p(x_i)
    draft_at_candidate: torch.Tensor,  # [k] q(x_i)
) -> torch.Tensor:  # [k] min(1, p/q)
    """min(1, p(x)/q(x)) for candidates with q(x) > 0."""
    return (target_at_candidate / draft_at_candidate).clamp(max=1.0)


def recovery_distribution(
    target_probs: torch.Tensor,  # [vocab]
    draft_probs: torch.Tensor,  # [vocab] dense
) -> torch.Tensor:  # [vocab]
    """norm(max(p - q, 0)), the distribution of a recovered token after a rejection."""
    residual = (target_probs - draft_probs).clamp_min(0.0)
    total = residual.sum()
    # NOTE: the residual is all zero only when p <= q everywhere, i.e. p == q up to rounding,
    # where a rejection has probability 0; sampling from p is then the exact answer.
    return residual / total if total > 0 else target_probs


def sample(
    probs: torch.Tensor,  # [vocab]
    generator: torch.Generator,
) -> int:
    """One draw from `probs` with the request's CPU generator.

    NOTE: sampling on the CPU makes a seed give the same tokens on every device.
    """
    return int(torch.multinomial(probs.detach().double().cpu(), 1, generator=generator))


def coupled_accept(
    candidate_ids: torch.Tensor,  # [k]
    target_probs: torch.Tensor,  # [k + 1, vocab]
    gumbel: torch.Tensor,  # [k + 1, vocab] keyed noise at the same absolute positions
) -> RoundVerdict:
    """Accept while the candidate equals the target's Gumbel-max choice (see specdec.noise)."""
    return accept_matching_prefix(candidate_ids, gumbel_argmax(target_probs, gumbel))


def accept_tree_path(
    node_ids: torch.Tensor,  # [n] int64, the candidate token of each tree node
    parents: Sequence[int],  # [n] parent node of each node, -1 = child of the last committed token
    target_choice_ids: torch.Tensor,  # [n + 1] int64: row 0 the target's choice after the committed
    # tokens, row i + 1 its choice after node i (each node scored with its own ancestors only)
) -> RoundVerdict:
    """Walk down from the root: at each step accept the child equal to the target's choice.

    The tree analogue of accept_matching_prefix, and as lossless: every emitted token is the
    target's own choice given exactly the tokens before it, so greedy / coupled output is the
    target-only sequence whatever the tree. NOTE: siblings should be distinct tokens; with
    duplicates the first listed one is taken (either gives the same output).
    """
    token_ids, choices = node_ids.tolist(), target_choice_ids.tolist()
    children: dict[int, list[int]] = {}
    for node, parent in enumerate(parents):
        children.setdefault(parent, []).append(node)
    path, current = [], -1
    while (child := next((c for c in children.get(current, ()) if token_ids[c] == choices[current + 1]), None)) is not None:
        path.append(child)
        current = child
    return RoundVerdict([token_ids[node] for node in path], choices[current + 1], len(token_ids), accepted_nodes=path)


def greedy_tree_accept(
    node_ids: torch.Tensor,  # [n]
    parents: Sequence[int],  # [n]
    target_probs: torch.Tensor,  # [n + 1, vocab], rows as in accept_tree_path
) -> RoundVerdict:
    return accept_tree_path(node_ids, parents, target_probs.argmax(dim=-1))


def coupled_tree_accept(
    node_ids: torch.Tensor,  # [n]
    parents: Sequence[int],  # [n]
    target_probs: torch.Tensor,  # [n + 1, vocab], rows as in accept_tree_path
    gumbel: torch.Tensor,  # [n + 1, vocab] keyed noise at each row's absolute position (root row: the
    # committed length; node i: committed length + depth(i))
) -> RoundVerdict:
    """Accept down the tree while a child equals the target's Gumbel-max choice (see specdec.noise)."""
    return accept_tree_path(node_ids, parents, gumbel_argmax(target_probs, gumbel))
