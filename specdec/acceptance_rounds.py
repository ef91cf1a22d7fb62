"""The tensor side of each acceptance mode (acceptance_modes.RULES says what each one is): how the
drafter chooses a candidate and how the target verifies a chain or a tree. Drafters and the target
session look their mode up in ROUNDS instead of branching on it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec.acceptance import RoundVerdict, coupled_accept, coupled_tree_accept, greedy_accept, greedy_tree_accept, rejection_accept
from specdec.acceptance_modes import RULES, TREE_REFUSAL, AcceptanceRule
from specdec.enums import AcceptanceMode
from specdec.errors import InvalidRequestError
from specdec.noise import gumbel_argmax, keyed_gumbel, keyed_gumbel_at
from specdec.sampling import SparseDistribution, sparse_top_k
from specdec.tree import node_depths


@dataclass(frozen=True)
class DraftKeys:
    """What a drafter's choice may depend on besides q."""

    seed: int  # the request's: coupled candidates use the target's own noise
    draft_seed: int  # independent of the verifier's randomness (rejection)
    draft_top_k: int


@dataclass
class RoundNoise:
    """The verifier's randomness for one round: keyed noise from `seed` at absolute positions from
    `start` (the position the round's first emitted token takes), or the request's generator."""

    seed: int
    start: int
    generator: torch.Generator


class ModeRounds:
    rule: AcceptanceRule

    def choose(self, draft_probs: torch.Tensor, position: int, keys: DraftKeys) -> tuple[int, SparseDistribution | None]:
        """draft_probs [vocab] at absolute `position`: the candidate, and q where the target needs it."""
        raise NotImplementedError

    def verify_chain(
        self, candidate_ids: torch.Tensor, draft_probs: SparseDistribution | None, target_probs: torch.Tensor, noise: RoundNoise
    ) -> RoundVerdict:  # candidate_ids [k], target_probs [k + 1, vocab]
        raise NotImplementedError

    def verify_tree(
        self, node_ids: torch.Tensor, parents: Sequence[int], target_probs: torch.Tensor, noise: RoundNoise
    ) -> RoundVerdict:  # node_ids [n], target_probs [n + 1, vocab]
        raise InvalidRequestError("acceptance", TREE_REFUSAL)


class GreedyRounds(ModeRounds):
    rule = RULES[AcceptanceMode.GREEDY]

    def choose(self, draft_probs, position, keys):
        return int(draft_probs.argmax()), None

    def verify_chain(self, candidate_ids, draft_probs, target_probs, noise):
        return greedy_accept(candidate_ids.to(target_probs.device), target_probs)

    def verify_tree(self, node_ids, parents, target_probs, noise):
        return greedy_tree_accept(node_ids, parents, target_probs)


class CoupledRounds(ModeRounds):
    rule = RULES[AcceptanceMode.COUPLED]

    def choose(self, draft_probs, position, keys):
        gumbel = keyed_gumbel(keys.seed, torch.tensor([position], device=draft_probs.device), draft_probs.shape[-1])
        return int(gumbel_argmax(draft_probs.unsqueeze(0), gumbel)[0]), None

    def verify_chain(self, candidate_ids, draft_probs, target_probs, noise):
        positions = torch.arange(noise.start, noise.start + target_probs.shape[0], device=target_probs.device)
        return coupled_accept(
            candidate_ids.to(target_probs.device), target_probs, keyed_gumbel(noise.seed, positions, target_probs.shape[-1])
        )

    def verify_tree(self, node_ids, parents, target_probs, noise):
        # NOTE: row 0 emits at position `start`, node i's row at start + depth(i): each node's noise
        # is the noise of the position its child would take in target-only decoding.
        positions = torch.tensor([noise.start] + [noise.start + depth for depth in node_depths(parents)], device=target_probs.device)
        return coupled_tree_accept(node_ids, parents, target_probs, keyed_gumbel(noise.seed, positions, target_probs.shape[-1]))


class RejectionRounds(ModeRounds):
    rule = RULES[AcceptanceMode.REJECTION]

    def choose(self, draft_probs, position, keys):
        sparse = sparse_top_k(draft_probs, keys.draft_top_k)
        sparse = SparseDistribution(sparse.token_ids.cpu(), sparse.probs.double().cpu())
        # NOTE: Gumbel-max with noise keyed by (draft seed, position) is an exact sample of q, and the
        # same sample whenever this position is drafted from this prefix, however often the session
        # drafted before: a block drafted ahead (overlap.py) is the block a later propose would draw.
        # Still lossless: the verifier judges the candidate at a position at most once (that position
        # is then committed), and noise only ever used for unjudged candidates is fresh to it.
        choice = int((sparse.probs.log() + keyed_gumbel_at(keys.draft_seed, position, sparse.token_ids)).argmax())
        return int(sparse.token_ids[choice]), sparse

    def verify_chain(self, candidate_ids, draft_probs, target_probs, noise):
        return rejection_accept(candidate_ids, draft_probs, target_probs, noise.generator)


ROUNDS: dict[AcceptanceMode, ModeRounds] = {rounds.rule.mode: rounds for rounds in (GreedyRounds(), CoupledRounds(), RejectionRounds())}
