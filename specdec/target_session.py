"""The verifier's side of one generation: target KV cache, committed tokens, acceptance, output.

`step(block)` verifies one block of draft candidates in a single target forward pass. The
in-process generator, the verify service's Generate (remote drafter) and its Verify (the client
is the drafter) all drive this one class.
"""

from __future__ import annotations

import time

import torch

from specdec.acceptance import RoundVerdict
from specdec.acceptance_rounds import ROUNDS, RoundNoise
from specdec.adaptive_k import AdaptiveKSettings, DraftLengthController
from specdec.batching import SequenceRunner
from specdec.constraints.masking import mask_logits
from specdec.constraints.matcher import GrammarConstraint
from specdec.drafters.base import DraftBlock
from specdec.engines.hf import LoadedModel
from specdec.enums import SpeculationPolicy, TokenSource
from specdec.errors import InvalidRequestError, check_token_ids
from specdec.min_tokens import MinTokensMask
from specdec.output import GenerationChunk, OutputTracker, RoundInfo, token_logprobs
from specdec.penalties import LogitsTransform, path_rows
from specdec.request import GenerationRequest
from specdec.sampling import processed_probs
from specdec.tree import chain_parents


class TargetSession:
    def __init__(self, target: LoadedModel, request: GenerationRequest, runner: SequenceRunner | None = None) -> None:
        check_request_fits(target, request)
        self.target = target
        self.request = request
        self.mode = request.effective_acceptance
        self.rounds = ROUNDS[self.mode]
        # Reserved up front (waiting for room if the budget is full): an admitted generation never
        # runs out of cache midway. `runner` is a service's batched one; None: the model's own.
        # A tree round briefly holds all its nodes past the committed tokens: room for one tree more.
        reserve = len(request.prompt_ids) + request.max_tokens + (request.tree.max_nodes if request.tree else 0)
        self.lm = target.open_sequence(reserve) if runner is None else runner.open_sequence(reserve)
        self.committed = list(request.prompt_ids)
        self.output = OutputTracker(target, request)
        # One generator per request, on the CPU so a seed means the same tokens on any device.
        self.generator = torch.Generator().manual_seed(request.seed)
        self.draft_length = draft_length_controller(request)
        # Penalties / logit_bias: part of the target distribution at every position; None when there are none.
        self.transform = LogitsTransform.for_request(request.penalties, request.prompt_ids, target.vocab_size, target.device)
        # min_tokens: EOS banned before it, part of the target distribution too; None when it bans nothing.
        self.min_tokens = MinTokensMask.for_request(request.min_tokens, len(request.prompt_ids), target.eos_token_ids)
        # Structured outputs: the grammar is part of the target distribution at every position; None: none.
        self.constraint = GrammarConstraint.for_model(request.grammar, len(request.prompt_ids), target, target.vocab_size)

    @property
    def finished(self) -> bool:
        return self.output.finish_reason is not None

    def draft_budget(self, free_tokens: int = 0) -> int:
        """Most candidates the next block may hold: each round also emits one target token.

        With adaptive K this is the controller's choice for the round (num_draft_tokens bounds it). `free_tokens`:
        how long a block a model-free drafter in front may propose (suffix decoding's; it caps the model at K).
        """
        wanted = self.draft_length.next_k() if self.draft_length is not None else self.request.num_draft_tokens
        wanted = max(wanted, free_tokens)
        if self.request.prediction_ids:  # predicted blocks may be longer (drafters/prediction.py caps the others at K)
            wanted = max(wanted, self.request.prediction_draft_tokens)
        return max(0, min(wanted, self.output.remaining - 1))

    def learn_from_round(self, info: RoundInfo) -> None:
        """Feed adaptive K what a finished round measured (nothing to do with a fixed K)."""
        if self.draft_length is not None:
            self.draft_length.observe(info.num_candidates, info.num_accepted, info.draft_ms, info.target_ms, info.transport_ms)

    def step(self, block: DraftBlock) -> tuple[RoundVerdict, GenerationChunk]:
        started = time.perf_counter()
        num_candidates = len(block)
        if block.tree_parents is None:
            logits = self.lm.advance(self.committed + block.candidate_ids.tolist(), num_candidates + 1)  # [k + 1, vocab]
            verdict = self._accept(block, logits)
        else:
            verdict, logits = self._verify_tree(block)
        self.committed.extend(verdict.token_ids)
        chunk = self.output.push(verdict.token_ids)
        chunk.sources = round_sources(block, verdict)[: len(chunk.token_ids)]
        if self.request.logprobs:
            chunk.logprobs = token_logprobs(logits, chunk.token_ids, self.request.top_logprobs)
        target_ms = (time.perf_counter() - started) * 1000
        chunk.round = RoundInfo(num_candidates, verdict.num_accepted, draft_ms=block.compute_ms, target_ms=target_ms)
        return verdict, chunk

    def _verify_tree(self, block: DraftBlock) -> tuple[RoundVerdict, torch.Tensor]:
        """Score every node in one tree-masked pass, walk the tree, keep only the accepted path cached.

        Returns the verdict and the logits before each emitted token `[accepted + 1, vocab]`.
        """
        parents = block.tree_parents
        logits = self.lm.advance_tree(self.committed, block.candidate_ids.tolist(), parents)  # [n + 1, vocab]
        target_probs = self._target_probs(logits, block)  # [n + 1, vocab]
        verdict = self.rounds.verify_tree(block.candidate_ids.to(logits.device), parents, target_probs, self._noise())
        self.lm.keep_path(verdict.accepted_nodes)
        return verdict, logits[[0] + [node + 1 for node in verdict.accepted_nodes]]

    def _target_probs(self, logits: torch.Tensor, block: DraftBlock) -> torch.Tensor:  # [n + 1, vocab]
        """The target distribution at every position of the block, from the raw logits.

        NOTE: the one place the target distribution is defined for verification (README, What
        "lossless" means here): penalties / logit_bias, min_tokens' ban on EOS, then the grammar's mask,
        then temperature, top-k/top-p.
        Position i's transforms follow the committed tokens and the candidates on i's own path (a
        chain's first i, a tree node's ancestors). Logprobs stay the model's own (the raw logits).
        """
        return processed_probs(self._constrained(self._transformed(logits, block), block), self.request.sampling)

    def _transformed(self, logits: torch.Tensor, block: DraftBlock) -> torch.Tensor:  # [n + 1, vocab]
        """The penalised logits at each position of the block, EOS banned where fewer than min_tokens
        came before, each from the tokens on its own path."""
        banning = self.min_tokens is not None and self.min_tokens.bans_after(len(self.committed))
        if self.transform is None and not banning:
            return logits
        node_ids = block.candidate_ids.tolist()
        parents = block.tree_parents if block.tree_parents is not None else chain_parents(len(node_ids))
        paths = path_rows(parents)
        if self.transform is not None:
            logits = self.transform(logits, self.committed, node_ids, paths)
        return self.min_tokens(logits, len(self.committed), paths) if banning else logits

    def _constrained(self, logits: torch.Tensor, block: DraftBlock) -> torch.Tensor:  # [n + 1, vocab]
        """The logits with the grammar's refused tokens at -inf, each position after the tokens on its own path."""
        if self.constraint is None:
            return logits
        allowed = self.constraint.allowed_along(self.committed, block.candidate_ids.tolist(), block.tree_parents)  # [n + 1, vocab]
        return mask_logits(logits, allowed.to(logits.device))

    def _accept(self, block: DraftBlock, logits: torch.Tensor) -> RoundVerdict:
        target_probs = self._target_probs(logits, block)  # [k + 1, vocab]
        draft_probs = block.draft_probs if block.draft_probs is not None else DraftBlock.empty().draft_probs
        return self.rounds.verify_chain(block.candidate_ids, draft_probs, target_probs, self._noise())

    def _noise(self) -> RoundNoise:
        return RoundNoise(self.request.seed, len(self.committed), self.generator)

    def close(self) -> None:
        self.lm.release()


def round_sources(block: DraftBlock, verdict: RoundVerdict) -> list[TokenSource]:
    """Where each of the round's tokens came from: the accepted candidates' drafters, then the target."""
    candidate_sources = block.candidate_sources()
    accepted = verdict.accepted_nodes if verdict.accepted_nodes is not None else range(verdict.num_accepted)
    return [*(candidate_sources[node] for node in accepted), TokenSource.TARGET]


def draft_length_controller(request: GenerationRequest) -> DraftLengthController | None:
    """Adaptive K for a speculative request that asked for it; None keeps K = num_draft_tokens.

    Chains only: its model counts a round's candidates as one path, which a token tree is not. Not
    with a prediction either: predicted blocks have their own length (prediction_draft_tokens).
    """
    if not (request.adaptive_k and request.speculative) or request.tree is not None or request.prediction_ids:
        return None
    max_k = request.num_draft_tokens
    least = request.min_draft_tokens
    if request.speculation_policy is SpeculationPolicy.ALWAYS:
        least = max(1, least)  # "always" drafts every round: adaptive K may shrink, but not to 0
    return DraftLengthController(AdaptiveKSettings(min_k=min(least, max_k), max_k=max_k))


def check_request_fits(target: LoadedModel, request: GenerationRequest) -> None:
    """Refuse prompts with ids the model does not have, or that overflow its context."""
    check_token_ids(request.prompt_ids, target.vocab_size, "prompt_ids")
    request.penalties.check_vocab(target.vocab_size, "penalties.logit_bias")
    prompt_tokens, context = len(request.prompt_ids), target.max_context
    if prompt_tokens >= context:
        raise InvalidRequestError("prompt", f"the prompt has {prompt_tokens} tokens but the model's context is {context} tokens")
    if prompt_tokens + request.max_tokens > context:
        raise InvalidRequestError(
            "max_tokens",
            f"prompt ({prompt_tokens} tokens) + max_tokens ({request.max_tokens}) exceeds the model's context of {context} tokens",
        )
