"""A llama.cpp target engine: a .gguf target scored by `llama_decode`, several sessions per decode.

Each session is one llama.cpp sequence (specdec.engines.gguf_model): a verify round is one decode of its
K + 1 new tokens with logits at every position, and a rejection rolls the sequence back by removing
its KV cells past the accepted prefix. Sessions share decodes through the same scheduler the
Hugging Face engine's packed passes use.

NOTE (batch invariance): every pass has at least two tokens where the build needs it (gguf_pass_floor.py), passes of 64 or
more hold one request's prompt chunk only (gguf_passes.py), and each session has KV cells of its own
(GgufOptions.per_session_kv): then a position's logits are bit-identical whether it is scored alone, inside a
verify pass of any K, or beside other sessions, so greedy speculation on equals off and a seeded coupled
request is the same text at any load and whatever was served before (gguf_prompt_cache.py). Token trees are
refused: a llama.cpp sequence holds one chain.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specdec.batching.runner import BatchingOptions
from specdec.batching.scheduler import BatchScheduler
from specdec.engines.gguf_model import GgufModel, GgufOptions, GgufRow, load_gguf
from specdec.engines.gguf_seats import Seat
from specdec.errors import SpecdecError
from specdec.kv_cache import PrefixCache

TREES_REFUSED = (
    "a llama.cpp model verifies and drafts chains only (a llama.cpp sequence holds one chain); use "
    "verification: sequential, or target_engine: hf"
)


class GgufSequence(PrefixCache):
    """One session's sequence in the llama.cpp context."""

    def __init__(
        self, model: GgufModel, seat: Seat, scheduler: BatchScheduler, on_prompt: Callable[[int, int], None] | None = None
    ) -> None:
        super().__init__()
        self.model = model
        self.seat = seat
        self.scheduler = scheduler
        self.on_prompt = on_prompt  # metrics: the prompt's tokens, and how many the prompt cache held
        scheduler.join()

    @property
    def device(self) -> torch.device:
        return self.model.device

    def _drop(self, num_tokens: int) -> None:
        pass  # NOTE: the next decode removes this sequence's cells from its row's start on (GgufModel.decode)

    def _feed(self, new_ids: list[int], start: int, num_logits: int) -> torch.Tensor:  # [num_logits, vocab]
        self.seat.ensure_capacity(start + len(new_ids))
        if start == 0:  # the prompt: its start may be cached already (engines/gguf_prompt_cache.py)
            start = self.model.attach_prefix(self.seat, new_ids, len(new_ids) - num_logits)
            if self.on_prompt is not None:
                self.on_prompt(len(new_ids), start)
            new_ids = new_ids[start:]
        return self.scheduler.submit(GgufRow(self.seat, new_ids, start, num_logits))

    def release(self) -> None:
        if not self.seat.released:
            self.model.release(self.seat, self.cached_ids)
            self.scheduler.leave()
        self.cached_ids = []


class GgufRunner:
    """Sessions of one GGUF model, each a sequence of its context; their decodes shared by a scheduler."""

    batched = True

    def __init__(self, model: GgufModel, options: BatchingOptions | None = None) -> None:
        self.model = model
        self.options = options or BatchingOptions()
        self.scheduler = BatchScheduler(model.decode, self.options.max_batch_size, self.options.max_wait_s, self.options.on_batch)

    def open_sequence(self, reserve_tokens: int, timeout_s: float | None = None) -> GgufSequence:
        timeout_s = self.options.admission_timeout_s if timeout_s is None else timeout_s
        seat = self.model.take_seat(max(1, reserve_tokens), timeout_s)
        return GgufSequence(self.model, seat, self.scheduler, self.options.on_prompt)

    def close(self) -> None:
        self.scheduler.close()


@dataclass
class LlamaCppTarget:
    """A .gguf target (TargetModel): its tokenizer is the one the GGUF carries, read by transformers."""

    gguf: GgufModel
    tokenizer: object
    source: str
    runner: GgufRunner | None = field(default=None, repr=False)
    tree_refusal = TREES_REFUSED
    supports_trees = False

    @property
    def vocab_size(self) -> int:
        return self.gguf.vocab_size

    @property
    def max_context(self) -> int:
        # NOTE: a session's cells bound one sequence too: a request that fits the model but not the cells is refused early.
        cells = self.gguf.session_cells or self.gguf.budget.capacity_tokens
        return min(self.gguf.max_context, cells)

    @property
    def device(self) -> torch.device:
        return self.gguf.device

    @functools.cached_property
    def eos_token_ids(self) -> frozenset[int]:  # read by every session: asked of llama.cpp once
        lib, vocab = self.gguf.lib, self.gguf.vocab
        ids = {self.tokenizer.eos_token_id, int(lib.llama_vocab_eos(vocab)), int(lib.llama_vocab_eot(vocab))}
        return frozenset(i for i in ids if i is not None and 0 <= i < self.vocab_size)

    def open_sequence(self, reserve_tokens: int) -> GgufSequence:
        if self.runner is None:
            self.runner = GgufRunner(self.gguf)
        return self.runner.open_sequence(reserve_tokens)

    def batched_runner(self, options: BatchingOptions) -> GgufRunner:
        return GgufRunner(self.gguf, options)

    def grammar_tokenizer(self, vocab_size: int):  # -> llguidance.LLTokenizer
        return self.gguf.grammar_tokenizer(vocab_size)

    def describe_memory(self) -> str:
        return self.gguf.describe_memory()

    def close(self) -> None:
        self.gguf.close()


@dataclass(frozen=True)
class LlamaCppSettings:
    threads: int
    context_tokens: int
    max_sequences: int
    device: str = "auto"
    prompt_cache_tokens: int = 0  # engines/gguf_prompt_cache.py
    per_session_kv: bool = True  # each session its own cells (gguf_model.py's NOTE on sessions)


def load_llama_cpp_target(source: str | Path, settings: LlamaCppSettings) -> LlamaCppTarget:
    """The .gguf at `source` as a target; a file llama.cpp cannot run is one ModelLoadError line naming it."""
    from specdec.engines.hf import load_tokenizer  # deferred: transformers, only once a file is found

    options = GgufOptions(
        threads=settings.threads,
        context_tokens=settings.context_tokens,
        max_sequences=settings.max_sequences,
        device=settings.device,
        measure_pass_floor=True,
        prompt_cache_tokens=settings.prompt_cache_tokens,
        per_session_kv=settings.per_session_kv,
        failure=SpecdecError,
    )
    gguf = load_gguf(source, options)
    try:
        tokenizer = load_tokenizer(source)
    except BaseException:
        gguf.close()
        raise
    return LlamaCppTarget(gguf=gguf, tokenizer=tokenizer, source=str(source))
