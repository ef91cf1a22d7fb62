"""A draft model over a reduced vocabulary: the target's most frequent tokens only.

The output head is the expensive part of a small draft (49k rows for SmolLM2, against a few
million weights per layer), so the draft scores only `draft_vocab_size` tokens. Towards the
rest of the system it is an ordinary causal LM over the target's full vocabulary: it takes
target token ids and returns full-width logits with -inf outside its vocabulary, so the drafters,
the services and Hugging Face assisted generation use it unchanged.

NOTE: lossless by construction. Tokens outside the draft vocabulary get draft probability 0,
so the draft never proposes them and the verifier's residual distribution covers them.
Input tokens outside the vocabulary map to one shared "unknown" row (the last).
"""

from __future__ import annotations

import copy

import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM


class ReducedVocabLlamaConfig(LlamaConfig):
    model_type = "specdec_reduced_vocab_llama"

    def __init__(self, draft_vocab_size: int = 4096, **kwargs) -> None:
        # vocab_size stays the target's (the ids the model reads and scores, as Hugging Face checks);
        # the embedding has draft_vocab_size + 1 rows: the draft vocabulary and one for unknown inputs.
        self.draft_vocab_size = draft_vocab_size
        super().__init__(**kwargs)


class ReducedVocabLlamaForCausalLM(LlamaForCausalLM):
    config_class = ReducedVocabLlamaConfig

    def __init__(self, config: ReducedVocabLlamaConfig) -> None:
        embedding_config = copy.deepcopy(config)
        embedding_config.vocab_size = config.draft_vocab_size + 1
        super().__init__(embedding_config)
        self.config = config
        draft_vocab = config.draft_vocab_size
        # Both maps are stored: deriving one at load time would run before from_pretrained fills the other.
        self.register_buffer("draft_to_target", torch.arange(draft_vocab, dtype=torch.long))  # [draft_vocab]
        self.register_buffer("target_to_draft", torch.full((config.vocab_size,), draft_vocab, dtype=torch.long))  # [target_vocab]

    @property
    def draft_vocab_size(self) -> int:
        return self.config.draft_vocab_size

    def set_vocabulary(self, target_ids: torch.Tensor) -> None:  # [draft_vocab] long, distinct target ids
        if target_ids.shape != (self.draft_vocab_size,):
            raise ValueError(f"expected {self.draft_vocab_size} target ids, got shape {tuple(target_ids.shape)}")
        self.draft_to_target.copy_(target_ids)
        self.target_to_draft.fill_(self.draft_vocab_size)
        self.target_to_draft[target_ids] = torch.arange(self.draft_vocab_size, device=target_ids.device)

    def embedding_ids(self, input_ids: torch.Tensor) -> torch.Tensor:  # target ids -> embedding rows, same shape
        return self.target_to_draft[input_ids]

    def full_logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:  # [..., hidden] -> [..., target_vocab]
        return self._full_width(self.lm_head(hidden))

    def _full_width(self, logits: torch.Tensor) -> torch.Tensor:  # [..., draft_vocab + 1] -> [..., target_vocab]
        draft_logits = logits[..., : self.draft_vocab_size]
        full = draft_logits.new_full((*draft_logits.shape[:-1], self.config.vocab_size), float("-inf"))
        full[..., self.draft_to_target] = draft_logits
        return full

    def draft_logits(self, input_ids: torch.Tensor, **kwargs) -> torch.Tensor:  # [batch, seq] target ids -> [batch, seq, draft_vocab]
        """Logits over the draft vocabulary only (what distillation trains)."""
        output = super().forward(input_ids=self.embedding_ids(input_ids), **kwargs)
        return output.logits[..., : self.draft_vocab_size]

    def forward(self, input_ids: torch.Tensor | None = None, **kwargs):  # input_ids: [batch, seq] target ids
        output = super().forward(input_ids=self.embedding_ids(input_ids), **kwargs)
        output.logits = self._full_width(output.logits)
        return output


AutoConfig.register(ReducedVocabLlamaConfig.model_type, ReducedVocabLlamaConfig)
AutoModelForCausalLM.register(ReducedVocabLlamaConfig, ReducedVocabLlamaForCausalLM)
