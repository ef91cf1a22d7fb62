"""The target engine interface: what a target session, its output and its grammar read of a model.

A target engine is a model on one device that scores sequences through prefix caches
(specdec.kv_cache.PrefixCache): Hugging Face transformers (specdec.engines.hf.LoadedModel) or
llama.cpp (specdec.engines.llama_cpp.LlamaCppTarget). specdec.engines.load_engine picks one.
"""

from __future__ import annotations

from typing import Protocol

import torch

from specdec.batching.runner import BatchingOptions, SequenceRunner
from specdec.kv_cache import PrefixCache


class TargetModel(Protocol):
    tokenizer: object  # a transformers tokenizer: chat templates, detokenizing, stop strings
    source: str

    @property
    def vocab_size(self) -> int:
        """Width of the logits."""

    @property
    def max_context(self) -> int:
        """Most tokens one sequence may hold (prompt and output)."""

    @property
    def device(self) -> torch.device:
        """Where the logits land."""

    @property
    def eos_token_ids(self) -> frozenset[int]: ...

    @property
    def supports_trees(self) -> bool:
        """Whether its sequences verify token trees (`advance_tree`)."""

    @property
    def tree_refusal(self) -> str | None:
        """Why it cannot verify token trees (the start-up error); None where it can."""

    def open_sequence(self, reserve_tokens: int) -> PrefixCache:
        """A KV cache for one in-process session, with room for `reserve_tokens`."""

    def batched_runner(self, options: BatchingOptions) -> SequenceRunner:
        """Where a service's sessions get their caches, their passes shared under `options`."""

    def grammar_tokenizer(self, vocab_size: int):  # -> llguidance.LLTokenizer
        """The vocabulary as the grammar engine sees it (structured outputs)."""

    def describe_memory(self) -> str: ...
