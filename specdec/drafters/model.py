"""A drafter backed by a causal LM: a separate small model, or the target's first layers."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

import torch
from torch import nn
from transformers import PreTrainedModel

from specdec.acceptance_rounds import ROUNDS, DraftKeys
from specdec.batching import BatchingOptions, SequenceRunner, default_runner
from specdec.constraints.masking import mask_logits
from specdec.drafters.base import CommittedSequence, DraftBlock, DraftRequest
from specdec.drafters.tree_draft import TreeRanking, draft_tree
from specdec.kv_cache import PrefixCache
from specdec.min_tokens import MinTokensMask
from specdec.penalties import LogitsTransform
from specdec.sampling import SparseDistribution, processed_probs
from specdec.tree import TreeShape

# Draft randomness must be independent of the verifier's: derive its seed from the request's.
_DRAFT_SEED_SALT = 0x5DEECE66D
INITIAL_DRAFT_ROOM = 128


class ModelDrafter:
    name = "model"

    def __init__(self, model: PreTrainedModel, name: str = "model", runner: SequenceRunner | None = None) -> None:
        self.model = model
        self.name = name
        self.runner = runner or default_runner(model)  # the draft service installs a batched one

    def open(self, request: DraftRequest) -> ModelDraftSession:
        # The draft is not told max_tokens: start with room for the prompt and a few rounds, grow on demand.
        return ModelDraftSession(self.runner.open_sequence(len(request.prompt_ids) + INITIAL_DRAFT_ROOM), request)

    def batched(self, options: BatchingOptions) -> ModelDrafter:
        return ModelDrafter(self.model, self.name, default_runner(self.model, options))


class ModelDraftSession:
    def __init__(self, lm: PrefixCache, request: DraftRequest) -> None:
        self.lm = lm
        self.request = request
        self.committed = CommittedSequence(list(request.prompt_ids))
        self.draft_seed = (request.seed ^ _DRAFT_SEED_SALT) & 0xFFFFFFFFFFFFFFFF
        self.keys = DraftKeys(request.seed, self.draft_seed, request.draft_top_k)
        self.rounds = ROUNDS[request.acceptance]
        self.kept_path: list[int] | None = None  # the last tree's accepted nodes, kept in the cache by the next propose
        self.transform = LogitsTransform.for_request(request.penalties, request.prompt_ids, request.vocab_size)
        self.min_tokens = MinTokensMask.for_request(request.min_tokens, len(request.prompt_ids), request.stop_token_ids)

    def propose(self, num_tokens: int) -> DraftBlock:
        started = time.perf_counter()
        if self.kept_path is not None:  # here, not in feedback: feedback does no model work
            self.lm.keep_path(self.kept_path)
            self.kept_path = None
        if num_tokens <= 0:
            block = DraftBlock.empty()
        elif self.request.tree is not None:
            block = self._draft_tree(num_tokens, self.request.tree)
        else:
            block = self._draft(num_tokens)
        block = replace(block, compute_ms=(time.perf_counter() - started) * 1000)
        self.committed.record_block(block)
        return block

    def _draft_tree(self, depth_limit: int, shape: TreeShape) -> DraftBlock:
        request = self.request
        ranking = TreeRanking(request.acceptance, request.sampling, request.seed)
        node_ids, parents = draft_tree(
            self.lm,
            list(self.committed.token_ids),
            depth_limit,
            shape,
            ranking,
            partial(_fit_vocab, vocab_size=request.vocab_size),
            self.transform,
            self.min_tokens,
        )
        return DraftBlock(torch.tensor(node_ids, dtype=torch.long), tree_parents=parents)

    def _draft(self, num_tokens: int) -> DraftBlock:
        sequence = list(self.committed.token_ids)
        candidates, sparse_rows = [], []
        for _ in range(num_tokens):
            logits = _fit_vocab(self.lm.advance(sequence)[-1:], self.request.vocab_size)  # [1, vocab]
            if self.transform is not None:
                logits = self.transform(logits, sequence)
            if self.min_tokens is not None:  # no EOS in q where the target bans it
                logits = self.min_tokens(logits, len(sequence))
            if self.request.constraint is not None:  # q over the grammar's tokens only: candidates stay valid
                logits = mask_logits(logits, self.request.constraint.allowed(sequence).to(logits.device).unsqueeze(0))
            draft_probs = processed_probs(logits[0], self.request.sampling)
            token_id, sparse = self.rounds.choose(draft_probs, len(sequence), self.keys)
            candidates.append(token_id)
            sparse_rows.append(sparse)
            sequence.append(token_id)
        draft_sparse = None
        if sparse_rows[0] is not None:
            draft_sparse = SparseDistribution(torch.stack([s.token_ids for s in sparse_rows]), torch.stack([s.probs for s in sparse_rows]))
        return DraftBlock(torch.tensor(candidates, dtype=torch.long), draft_sparse)

    def feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> None:
        was_tree = self.committed.last_parents is not None
        path = self.committed.apply_feedback(num_accepted, appended_ids, accepted_nodes)
        if was_tree:
            self.kept_path = path

    def close(self) -> None:
        self.lm.release()


def _fit_vocab(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:  # [vocab_size]
    """Trim or -inf-pad draft logits to the target's width (ids agree; see check_vocab_compatible)."""
    width = logits.shape[-1]
    if width >= vocab_size:
        return logits[..., :vocab_size]
    return nn.functional.pad(logits, (0, vocab_size - width), value=float("-inf"))


def truncated_view(model: PreTrainedModel, num_layers: int) -> PreTrainedModel:
    """The model's first `num_layers` decoder layers + its final norm and head, sharing weights.

    This is layer-skip self-speculation: no extra memory for a draft model.
    """
    decoder = model.get_decoder()
    total = len(decoder.layers)
    if not 1 <= num_layers < total:
        raise ValueError(f"layer_skip num_layers must be in [1, {total - 1}] for a {total}-layer target, got {num_layers}")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:num_layers]
    view_decoder = _shallow_module_copy(decoder)
    view_decoder.layers = nn.ModuleList(decoder.layers[:num_layers])
    view_decoder.config = config
    view = _shallow_module_copy(model)
    setattr(view, _child_name(model, decoder), view_decoder)
    view.config = config
    return view


def _shallow_module_copy(module: nn.Module) -> nn.Module:
    clone = copy.copy(module)
    clone._modules = dict(module._modules)
    return clone


def _child_name(parent: nn.Module, child: nn.Module) -> str:
    return next(name for name, module in parent.named_children() if module is child)


def layer_skip_drafter(target: PreTrainedModel, num_layers: int) -> ModelDrafter:
    return ModelDrafter(truncated_view(target, num_layers), name="layer_skip")
