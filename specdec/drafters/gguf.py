"""A GGUF draft run by llama.cpp, e.g. a quantized copy of the target (draft_method `gguf`).

A quantized copy exists for almost every open model, needs no training and shares the target's
tokenizer. Sessions are the model drafter's (model.py): q is the top `draft_top_k` of the draft's
own logits after the request's sampling transforms, so rejection stays exact, and greedy and
coupled drafting are the same functions. Only the cache differs: a `GgufSequence` is a
`PrefixCache` over one llama.cpp sequence (engines/llama_cpp.py), rolled back by removing the rejected
tail of its KV cells, with the steps of all sessions batched into one `llama_decode`.

Token trees: a llama.cpp sequence holds a chain, so `verification: tree` with this drafter is refused at start
(draft_methods.py); a tree session that another configuration opens gets chains (a tree of one branch).
"""

from __future__ import annotations

from dataclasses import replace

from specdec.batching import BatchingOptions
from specdec.batching.scheduler import BatchScheduler
from specdec.drafters.base import DraftRequest
from specdec.drafters.model import INITIAL_DRAFT_ROOM, ModelDraftSession
from specdec.engines.gguf_model import GgufModel
from specdec.engines.hf import vocab_difference
from specdec.engines.llama_cpp import GgufRunner
from specdec.errors import IncompatibleVocabularyError


class GgufDrafter:
    name = "gguf"

    def __init__(self, model: GgufModel, options: BatchingOptions | None = None) -> None:
        self.model = model
        self.runner = GgufRunner(model, options)  # the llama.cpp target engine's: sequences, their seats, shared decodes

    @property
    def scheduler(self) -> BatchScheduler:
        return self.runner.scheduler

    def open(self, request: DraftRequest) -> ModelDraftSession:
        sequence = self.runner.open_sequence(len(request.prompt_ids) + INITIAL_DRAFT_ROOM)
        return ModelDraftSession(sequence, replace(request, tree=None))

    def batched(self, options: BatchingOptions) -> GgufDrafter:
        return GgufDrafter(self.model, options)


def check_gguf_vocabulary(model: GgufModel, target_tokenizer, target_source: str) -> None:
    """Refuse a GGUF whose token ids mean something else to the target, naming both files."""
    target_vocab, draft_vocab = target_tokenizer.get_vocab(), model.tokenizer.get_vocab()
    difference = vocab_difference(target_vocab, draft_vocab)
    if not difference and len(draft_vocab) != len(target_vocab):
        difference = f"it has {len(draft_vocab)} tokens, the target's tokenizer {len(target_vocab)}"
    if difference:
        raise IncompatibleVocabularyError(
            f"the GGUF draft {model.source} does not share the vocabulary of the target {target_source}: {difference}"
        )
