"""A GGUF file run by llama.cpp (llama-cpp-python's C API): one context for every draft session.

Each session owns one llama.cpp sequence id in one context whose KV cache (`kv_unified`) all
sequences share, so the steps of many sessions run as one `llama_decode`, and the model's weights
and compute buffers exist once. A session's KV cells are reserved from a `KVBudget` of the
context's size (waiting up to a timeout at open, doubling as it grows), so a decode never runs out
of cells halfway.

NOTE: rollback is `llama_memory_seq_rm` of the rejected tail, run by the next decode of that
sequence (never from another thread: every call into the context holds `_lock`); the prefix is
never evaluated again.

NOTE: llama.cpp runs a one-token pass through other kernels (matrix-vector) than a pass of two or
more tokens, whose rows are bit-identical whatever the pass's size and whichever other sequences
share it, up to 63 tokens (gguf_passes.py says what runs longer passes; tests/specdec/engines/test_llama_cpp.py).
`min_pass_tokens=2` pads a lone token with one on a scratch sequence, so a target's plain steps score
exactly as its verify passes do; a target measures at load whether its build needs that (gguf_pass_floor.py).

NOTE (sessions): in the shared pool a session's cells land wherever llama.cpp finds free ones, among other
sessions' and in the holes their rollbacks leave. Attention adds up a sequence's cells in cell order, and a pass of
64 or more tokens in tiles of 64 cells; so on SmolLM2 bf16 a session's logits moved by up to 0.35 with where its
cells began (benchmarks/kv_invariance.py). `per_session_kv` gives each sequence a stream of its own (llama.cpp's
kv_unified off): its cells then start at 0 and follow its positions whatever else runs, and a target's text is the
same at any load. Each session then holds context_tokens / max_sequences cells (less room for padding), and
llama.cpp decodes several streams as one pass only where their ids run consecutively and their rows are of one
length, which gguf_passes.plan_passes arranges.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from specdec.batching.kv_store import KVBudget
from specdec.engines.gguf_library import llama_log, load_model, token_text
from specdec.engines.gguf_pass_floor import one_token_passes_match
from specdec.engines.gguf_passes import MANY_TOKENS, PADDING, Entry, plan_passes
from specdec.engines.gguf_prompt_cache import GgufPromptCache
from specdec.engines.gguf_seats import LowestFirst, Seat
from specdec.errors import CapacityError, DraftUnavailableError, InvalidRequestError, ModelLoadError

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
_BATCH_TOKENS = 512  # tokens per llama_decode call; longer feeds (a prompt) take several
_KV_BYTES_PER_VALUE = 2  # llama.cpp's default KV cache type is f16
PASS_FLOOR_NOTES = {
    1: "score as longer passes do (no sgemm under 64 tokens in this llama.cpp build): no padding",
    2: "score unlike longer passes (sgemm from 2 tokens in this llama.cpp build): lone tokens padded to two",
}
_DECODE_ERRORS = {1: "no KV cache slot for the batch", 2: "aborted", -1: "invalid batch"}


@dataclass(frozen=True)
class GgufOptions:
    threads: int
    context_tokens: int  # KV cells shared by all sequences
    max_sequences: int  # sessions open at once
    device: str = "auto"  # cpu: no offload; auto: every layer on the GPU when llama.cpp was built with one; cuda:N
    min_pass_tokens: int = 1  # 2: every pass runs the many-token kernels (batch invariance; the module's NOTE)
    # A target: batch-invariant passes (gguf_passes.py), lone tokens padded to two only where this build scores a
    # one-token pass unlike longer ones, as measured at load (gguf_pass_floor.py); min_pass_tokens is then ignored.
    measure_pass_floor: bool = False
    prompt_cache_tokens: int = 0  # of finished sequences, copied for later sessions that start alike (gguf_prompt_cache.py)
    per_session_kv: bool = False  # each session its own cells (context_tokens split evenly): the module's NOTE on sessions
    failure: type[Exception] = DraftUnavailableError  # what a failed decode raises: a draft's is a fallback, a target's is not


class GgufVocabulary:
    """The GGUF's token texts by id, with a tokenizer's `get_vocab()` (for vocabulary fingerprints)."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens

    def get_vocab(self) -> dict[str, int]:
        return {token: token_id for token_id, token in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass
class GgufRow:
    """One session's part of a decode: `input_ids` enter its sequence at position `start`."""

    seat: Seat
    input_ids: list[int]
    start: int
    num_logits: int  # logits wanted after the last `num_logits` of `input_ids`

    @property
    def kv(self) -> Seat:  # what the batch metrics read (a packed row's SessionKV)
        return self.seat


class GgufModel:
    """A GGUF model and its one llama.cpp context; `decode` runs the rows of many sessions at once."""

    def __init__(self, path: Path, options: GgufOptions) -> None:
        import llama_cpp

        self.lib = llama_cpp
        self.source = str(path)
        self.options = options
        self.device = torch.device("cpu")  # where the logits land (llama.cpp copies them to host memory)
        self._lock = threading.Lock()
        self.model = load_model(llama_cpp, path, options.device)
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.max_context = int(llama_cpp.llama_model_n_ctx_train(self.model))
        self.tokenizer = GgufVocabulary([token_text(llama_cpp, self.vocab, i) for i in range(self.vocab_size)])
        self.invariant = options.min_pass_tokens > 1 or options.measure_pass_floor  # passes planned for batch invariance
        scratch = self.invariant and not options.per_session_kv  # else a short pass pads its own sequence
        self.max_sequences = min(options.max_sequences, int(llama_cpp.llama_max_parallel_sequences()) - scratch)
        self.scratch_seq_id = self.max_sequences if scratch else None  # where a short pass's padding goes
        self._extra_sequences = scratch
        self.context = self._new_context()
        self.memory = llama_cpp.llama_get_memory(self.context)
        self.batch = llama_cpp.llama_batch_init(_BATCH_TOKENS, 0, 1)
        self.prefixes = (
            GgufPromptCache(llama_cpp, self.context, self.memory, options.prompt_cache_tokens, _BATCH_TOKENS, exact=self.invariant)
            if options.prompt_cache_tokens
            else None
        )
        self.budget = self._new_budget()
        self._free_seq_ids = LowestFirst(range(self.max_sequences))
        self.min_pass_tokens = options.min_pass_tokens
        if options.measure_pass_floor:
            self.min_pass_tokens = 1 if self._one_token_passes_match() else 2
            log.info("%s: one-token passes %s", self.source, PASS_FLOOR_NOTES[self.min_pass_tokens])

    def _one_token_passes_match(self) -> bool:
        """Whether this build scores a lone token as it does inside longer passes (gguf_pass_floor.py), on
        sequences 0 and 1 before any session has them."""

        def decode(tokens: Sequence[tuple[int, int, int, bool]]) -> list[np.ndarray]:
            logits: list[list[torch.Tensor]] = [[]]
            self._decode_entries([Entry(0, *token) for token in tokens], [token[3] for token in tokens], logits)
            return [row.numpy() for row in logits[0]]

        def clear(seq_id: int, position: int) -> None:
            self.lib.llama_memory_seq_rm(self.memory, seq_id, position, -1)

        cells = self.session_cells or self.budget.capacity_tokens
        try:
            with self._lock:
                return one_token_passes_match(decode, clear, self.vocab_size, cells, two_sequences=self.max_sequences > 1)
        except self.options.failure as error:  # fails closed: padded passes are invariant on every build measured
            log.warning("%s: the one-token pass probe failed (%s); lone tokens padded to two", self.source, error)
            return False

    def _new_context(self):
        lib, options = self.lib, self.options
        params = lib.llama_context_default_params()
        params.n_ctx = options.context_tokens
        params.n_batch = params.n_ubatch = _BATCH_TOKENS
        params.n_seq_max = self.max_sequences + self._extra_sequences
        params.n_threads = params.n_threads_batch = options.threads
        # Shared: one pool of cells for every sequence, sessions of any length share it. Per session: each sequence
        # its own stream of cells (the module's NOTE on sessions).
        params.kv_unified = not options.per_session_kv
        params.no_perf = True
        llama_log().begin()
        context = lib.llama_init_from_model(self.model, params)
        if context is None:
            raise ModelLoadError(
                f"llama.cpp could not create a context of {options.context_tokens} tokens for {self.source}: "
                f"{llama_log().first_error() or 'see the debug log'}"
            )
        return context

    def _new_budget(self) -> KVBudget:
        lib, options = self.lib, self.options
        if options.per_session_kv:
            # NOTE: a short pass pads its rows past their last token (gguf_passes._padded): fewer than MANY_TOKENS cells
            self.session_cells = int(lib.llama_n_ctx_seq(self.context)) - MANY_TOKENS
            return KVBudget(self.session_cells * self.max_sequences, self._kv_bytes_per_token())
        self.session_cells = None
        # held apart from the sessions': the padding's cells for the length of one pass
        return KVBudget(int(lib.llama_n_ctx(self.context)) - int(self.invariant), self._kv_bytes_per_token())

    def _kv_bytes_per_token(self) -> int:
        lib = self.lib
        n_head = max(1, lib.llama_model_n_head(self.model))
        head_dim = lib.llama_model_n_embd(self.model) // n_head
        return 2 * lib.llama_model_n_layer(self.model) * lib.llama_model_n_head_kv(self.model) * head_dim * _KV_BYTES_PER_VALUE

    def take_seat(self, reserve_tokens: int, timeout_s: float | None) -> Seat:
        """A sequence id and `reserve_tokens` KV cells for a new session (waits up to `timeout_s` for both)."""
        try:
            seq_id = self._free_seq_ids.take(timeout_s)
        except TimeoutError:
            raise CapacityError(f"all {self.max_sequences} sequences of {self.source} are in use; retry later") from None
        cells = reserve_tokens if self.session_cells is None else self.session_cells
        try:
            if reserve_tokens > cells:
                raise InvalidRequestError(
                    "max_tokens",
                    f"this request needs {reserve_tokens} tokens of KV cache but a session of {self.source} holds "
                    f"{cells}; ask for fewer tokens, or raise model.target_context_tokens",
                )
            self.budget.reserve(cells, timeout_s, what="the prompt")
        except BaseException:
            self._free_seq_ids.give(seq_id)
            raise
        return Seat(seq_id, self.budget, cells, self.options.failure, limit=self.session_cells)

    def attach_prefix(self, seat: Seat, token_ids: Sequence[int], limit: int) -> int:
        """Start the empty `seat` with the kept cells of the longest prefix of `token_ids` (at most `limit`);
        returns how many it holds now (0 without a prompt cache or a match)."""
        if self.prefixes is None or seat.length:
            return 0
        with self._lock:
            if self.context is None:
                return 0
            self.prefixes.attach(seat, token_ids, limit)
        return seat.length

    def release(self, seat: Seat, token_ids: Sequence[int] = ()) -> None:
        """Free the seat; with a prompt cache its sequence's start (`token_ids`, what it holds) is kept first."""
        if seat.released:
            return
        seat.released = True
        with self._lock:
            # NOTE: a session closed after the model (a teardown, an overlap thread finishing late) must not
            # touch the freed context: its memory went with it.
            if self.context is not None:
                if self.prefixes is not None:
                    self.prefixes.keep(seat, token_ids)
                self.lib.llama_memory_seq_rm(self.memory, seat.seq_id, 0, -1)
        self.budget.release(seat.capacity)
        self._free_seq_ids.give(seat.seq_id)

    def decode(self, rows: list[GgufRow]) -> list[torch.Tensor]:  # per row: [num_logits, vocab]
        """Feed every row's tokens at its start (after removing its sequence's cells past that start)."""
        entries = [
            [
                Entry(index, row.seat.seq_id, row.start + offset, token_id, offset >= len(row.input_ids) - row.num_logits)
                for offset, token_id in enumerate(row.input_ids)
            ]
            for index, row in enumerate(rows)
        ]
        passes = plan_passes(entries, _BATCH_TOKENS, invariant=self.invariant, equal_rows=self.options.per_session_kv)
        logits: list[list[torch.Tensor]] = [[] for _ in rows]
        with self._lock:
            if self.context is None:
                raise self.options.failure(f"the gguf model {self.source} is closed")
            for row in rows:
                self._truncate(row.seat, row.start)
            try:
                for entries_of_pass in passes:
                    if self.prefixes is not None and self.prefixes.exact:  # only a target's reuse asks the class
                        _mark_classes(rows, entries_of_pass)
                    self._decode_chunk(entries_of_pass, logits)
            finally:
                for row in rows:  # on failure llama.cpp may keep part of the batch: the next decode removes it
                    row.seat.length = row.start + len(row.input_ids)
        return [torch.stack(row_logits) for row_logits in logits]

    def _truncate(self, seat: Seat, start: int) -> None:
        if seat.length > start:
            if not self.lib.llama_memory_seq_rm(self.memory, seat.seq_id, start, -1):
                raise self.options.failure(f"llama.cpp cannot roll back sequence {seat.seq_id} of {self.source} to {start} tokens")
            seat.length = start

    def _decode_chunk(self, entries: Sequence[Entry], logits: list[list[torch.Tensor]]) -> None:
        """One llama_decode of `entries` (row, seq id, position, token, logits wanted), padded to min_pass_tokens."""
        minimum = self.min_pass_tokens
        padding = self._padding(entries[-1], minimum - len(entries)) if len(entries) < minimum else []
        entries = [*entries, *padding]
        outputs = [wants for *_rest, wants in entries]
        # NOTE: llama.cpp's last layer runs only the rows whose logits are wanted: at least `minimum` of them too,
        # where any is read (a chunk without outputs only writes the KV cache, which that layer does not change).
        wanted = sum(outputs)
        for index in reversed(range(len(entries)) if wanted else ()):
            if wanted >= minimum:
                break
            if not outputs[index]:
                outputs[index], wanted = True, wanted + 1
        try:
            self._decode_entries(entries, outputs, logits)
        finally:
            first_padding: dict[int, int] = {}  # per sequence: where its padding begins (the planner's and this pass's)
            for entry in entries:
                if entry.row == PADDING:
                    first_padding[entry.seq_id] = min(entry.position, first_padding.get(entry.seq_id, entry.position))
            for seq_id, position in first_padding.items():
                self.lib.llama_memory_seq_rm(self.memory, seq_id, position, -1)

    def _padding(self, last: Entry, count: int) -> list[Entry]:
        """`count` tokens that lengthen a short pass: on the scratch sequence, or after `last` in its own sequence
        (per_session_kv: a sequence's own stream; the next decode of it starts before them)."""
        if self.scratch_seq_id is not None:
            return [Entry(PADDING, self.scratch_seq_id, position, 0, False) for position in range(count)]
        return [Entry(PADDING, last.seq_id, last.position + 1 + offset, 0, False) for offset in range(count)]

    def _decode_entries(self, entries: Sequence[Entry], outputs: list[bool], logits: list[list[torch.Tensor]]) -> None:
        batch = self.batch
        batch.n_tokens = len(entries)
        for i, (_row, seq_id, position, token_id, _wants) in enumerate(entries):
            batch.token[i] = token_id
            batch.pos[i] = position
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq_id
            batch.logits[i] = outputs[i]
        llama_log().begin()
        status = self.lib.llama_decode(self.context, batch)
        if status != 0:
            raise self.options.failure(
                f"llama.cpp could not decode {len(entries)} tokens with {self.source}: llama_decode returned "
                f"{status} ({_DECODE_ERRORS.get(status, 'error')}) {llama_log().first_error()}".rstrip()
            )
        for i, (row, *_rest, wants_logits) in enumerate(entries):
            if wants_logits:
                pointer = self.lib.llama_get_logits_ith(self.context, i)
                logits[row].append(torch.from_numpy(np.ctypeslib.as_array(pointer, shape=(self.vocab_size,)).copy()))

    def describe_memory(self) -> str:
        lib = self.lib
        size = lib.llama_model_size(self.model)
        cells = self.budget.capacity_tokens
        layout = "shared" if self.session_cells is None else f"{self.session_cells} per session"
        return (
            f"{size / 2**20:.1f} MiB GGUF weights, {cells} KV cells, {layout} ({cells * self.budget.bytes_per_token / 2**20:.0f} MiB), "
            f"{self.options.threads} llama.cpp threads, up to {self.max_sequences} sessions"
            + (f", prompt cache of {self.options.prompt_cache_tokens} tokens" if self.prefixes is not None else "")
        )

    @functools.lru_cache(maxsize=2)  # noqa: B019 -- one model per process, kept for its lifetime
    def grammar_tokenizer(self, vocab_size: int):  # -> llguidance.LLTokenizer
        """The vocabulary as the grammar engine sees it (structured outputs), from llama.cpp's own token pieces."""
        from llguidance.llamacpp import lltokenizer_from_vocab  # imports llama_cpp, as this module does lazily

        return lltokenizer_from_vocab(self.vocab, n_vocab=vocab_size)

    def close(self) -> None:
        with self._lock:
            if self.context is not None:
                self.lib.llama_batch_free(self.batch)
                self.lib.llama_free(self.context)
                self.lib.llama_model_free(self.model)
                self.context = None


def _mark_classes(rows: list[GgufRow], entries: Sequence[Entry]) -> None:
    """Record which class of pass computes each of its rows' positions (a prompt cache reuses cells of one class)."""
    long = len(entries) >= MANY_TOKENS
    for entry in entries:
        if entry.row != PADDING:
            rows[entry.row].seat.mark(entry.position, long)


def load_gguf(path: str | Path, options: GgufOptions) -> GgufModel:
    """Load `path` for drafting; a missing, foreign or corrupt file is one ModelLoadError line."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelLoadError(f"GGUF file not found: {path}")
    with path.open("rb") as file:
        magic = file.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)")
    try:
        import llama_cpp  # noqa: F401 -- checked here so a missing install is one clear line
    except ImportError as error:
        raise ModelLoadError(f"a .gguf model needs llama-cpp-python: pip install 'specdec[llama]' ({error})") from error
    llama_log()
    return GgufModel(path, options)


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
