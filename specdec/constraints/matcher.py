"""One request's grammar over one vocabulary: the tokens allowed after any sequence.

`GrammarConstraint` wraps an llguidance matcher. Callers pass whole sequences (prompt first) and
the constraint syncs its matcher to them itself: it rolls back to the longest common prefix with
what it consumed last and consumes the rest. So the verifier can ask for masks along a block's
candidates, a drafter along its own guesses, and either can roll back or jump between tree
branches, without keeping the matcher in step by hand.

Fails closed: a matcher that enters an error state (a lexer past its limits, a grammar no output
satisfies) never leaves rows unmasked. Found while the constraint is built or in its first steps
(`_probe`), it is an InvalidRequestError naming the field: the request is refused before any
output. Found later, the same error ends the generation explicitly. Matcher work is bounded by
llguidance's parser limits (MATCHER_LIMITS), and grammars by their size (MAX_GRAMMAR_CHARS).

End of sequence: the grammar decides when the output may end (its mask holds the EOS ids only
where the grammar accepts). EOS itself is never consumed (a matcher cannot roll back past it):
positions after an EOS are unreachable (generation ends there) and get an all-allowed row.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Protocol

import llguidance
import llguidance.hf
import llguidance.torch
import torch

from specdec.constraints.grammars import brief_reason
from specdec.constraints.masking import unpack_bitmask
from specdec.errors import InvalidRequestError
from specdec.tree import chain_parents

log = logging.getLogger(__name__)
ALL_ALLOWED = -1  # an int32 word with every bit set
# llguidance's defaults bound the work per grammar and per mask (lexer fuel, Earley items, lexer states);
# its errors then leave out the parser state and the grammar, which would echo the request back.
MATCHER_LIMITS = llguidance.LLParserLimits(verbose_errors=False)
# Steps taken along the grammar's lowest allowed tokens when the constraint is built, then rolled back: a
# lexer that blows up only once it runs (`a{1000000}`, nested repeats in a pattern) is refused up front.
PROBE_STEPS = 8


class GrammarVocabulary(Protocol):
    """A loaded model (Hugging Face or GGUF) that can describe its vocabulary to the grammar engine."""

    def grammar_tokenizer(self, vocab_size: int) -> llguidance.LLTokenizer: ...


@functools.lru_cache(maxsize=8)
def hf_grammar_tokenizer(tokenizer, vocab_size: int, eos_ids: tuple[int, ...]) -> llguidance.LLTokenizer:
    """llguidance's view of a Hugging Face fast tokenizer (about a second to build, so cached per model)."""
    return llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=list(eos_ids))


COMPILED_GRAMMARS = 16  # compiled matchers kept (one per grammar and vocabulary): setup is paid once per grammar


@functools.lru_cache(maxsize=COMPILED_GRAMMARS)
def compiled_matcher(tokenizer: llguidance.LLTokenizer, grammar: str) -> llguidance.LLMatcher | str:
    """A matcher for `grammar`, built and probed and never consumed from (constraints take copies), or
    the reason it is refused. Cached, refusals too: the verify service builds it in a prep worker (with
    a bound on concurrent setups) and its session then copies it; a client repeating a grammar pays once."""
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0, limits=MATCHER_LIMITS)
    return _probe(matcher, tokenizer, grammar) or matcher


def _refusal(matcher: llguidance.LLMatcher, grammar: str, first_mask: bool = False) -> str | None:
    """Why a matcher in its error state cannot constrain (None: it can). NOTE: llguidance signals grammar
    errors, resource limits and a grammar that admits no output (at its first mask: "no extension")
    only through is_error(), never by raising."""
    if not matcher.is_error():
        return None
    if first_mask and matcher.is_stopped():
        return "is unsatisfiable: no output matches it"
    # NOTE: the engine appends its state ("<state>...", or "<non-verbose/>") on lines of its own
    return f"cannot be enforced: {brief_reason(matcher.get_error().split(chr(10) + '<', 1)[0], grammar)}"


def _probe(matcher: llguidance.LLMatcher, tokenizer: llguidance.LLTokenizer, grammar: str) -> str | None:
    """Take up to PROBE_STEPS steps along the lowest allowed non-EOS token, checking the matcher at each,
    then roll back; the refusal found, if any."""
    refusal = _refusal(matcher, grammar)
    words = torch.empty((1, (tokenizer.vocab_size + 31) // 32), dtype=torch.int32)
    taken = 0
    while refusal is None and taken < PROBE_STEPS:
        llguidance.torch.fill_next_token_bitmask(matcher, words, 0)
        refusal = _refusal(matcher, grammar, first_mask=not taken)
        allowed = unpack_bitmask(words, tokenizer.vocab_size)[0]
        allowed[list(tokenizer.eos_tokens)] = False
        candidates = allowed.nonzero()
        if refusal is not None or not len(candidates):
            break
        matcher.consume_token(int(candidates[0]))
        refusal = _refusal(matcher, grammar)
        taken += 1
    if refusal is None and taken:
        matcher.rollback(taken)
        refusal = _refusal(matcher, grammar)
    return refusal


class GrammarConstraint:
    """A grammar applied after a prompt of `prompt_length` tokens (the prompt itself is not constrained)."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, grammar: str, prompt_length: int, field: str = "grammar") -> None:
        self.tokenizer = tokenizer
        self.grammar = grammar
        self.prompt_length = prompt_length
        self.field = field
        self.vocab_size = tokenizer.vocab_size
        self.eos_ids = frozenset(tokenizer.eos_tokens)
        compiled = compiled_matcher(tokenizer, grammar)
        if isinstance(compiled, str):
            self._refuse(compiled)
        self.matcher = compiled.deep_copy()
        self.consumed: list[int] = []  # the tokens after the prompt the matcher has consumed, in order

    @staticmethod
    def for_model(
        grammar: str | None, prompt_length: int, model: GrammarVocabulary, vocab_size: int, field: str = "grammar"
    ) -> GrammarConstraint | None:
        """The constraint over `model`'s vocabulary (`vocab_size` wide logits), or None without a grammar."""
        if not grammar:
            return None
        return GrammarConstraint(model.grammar_tokenizer(vocab_size), grammar, prompt_length, field)

    def fork(self) -> GrammarConstraint:
        """An independent constraint over the same grammar (another thread's, such as a drafter's),
        in the same state: a copy of the matcher, not a second compile and probe."""
        copy = object.__new__(GrammarConstraint)
        copy.__dict__.update(self.__dict__, matcher=self.matcher.deep_copy(), consumed=list(self.consumed))
        return copy

    def _refuse(self, reason: str) -> None:
        log.warning("grammar constraint refused, %s: %s", self.field, reason)
        raise InvalidRequestError(self.field, reason)

    def _check_matcher(self) -> None:
        """Fail closed: a matcher in its error state mid-generation ends it with an InvalidRequestError
        naming the field, never an unmasked row."""
        refusal = _refusal(self.matcher, self.grammar)
        if refusal is not None:
            self._refuse(f"{refusal} (after {len(self.consumed)} generated tokens)")

    def allowed(self, sequence: Sequence[int]) -> torch.Tensor:  # [vocab] bool
        """The tokens the grammar allows after `sequence` (prompt first)."""
        return self.allowed_along(sequence, [])[0]

    def allowed_along(
        self, sequence: Sequence[int], node_ids: Sequence[int], parents: Sequence[int] | None = None
    ) -> torch.Tensor:  # [n + 1, vocab] bool
        """Allowed tokens at every position of a block verified after `sequence`.

        Row 0: after `sequence`; row i + 1: after `sequence` and node i's root path (a chain when
        `parents` is None). A row after a candidate the grammar refuses (or after an EOS) is never
        used by acceptance (that candidate is rejected, or generation ends): it allows everything.
        """
        node_ids = list(node_ids)
        parents = list(parents) if parents is not None else chain_parents(len(node_ids))
        generated = self._generated(sequence)
        words = torch.full((len(node_ids) + 1, (self.vocab_size + 31) // 32), ALL_ALLOWED, dtype=torch.int32)
        if self._move_to(generated):
            self._fill(words, 0)
        paths: list[list[int] | None] = []
        for node, parent in enumerate(parents):
            before = [] if parent < 0 else paths[parent]
            path = None if before is None or node_ids[node] in self.eos_ids else [*before, node_ids[node]]
            paths.append(path)
            if path is not None and self._move_to(generated + path):
                self._fill(words, node + 1)
            elif path is not None:
                paths[node] = None  # refused: its descendants are unreachable too
        return unpack_bitmask(words, self.vocab_size)

    def valid_prefix_length(self, sequence: Sequence[int], candidate_ids: Sequence[int]) -> int:
        """How many of `candidate_ids` (a chain after `sequence`) the grammar allows, an allowed EOS included."""
        generated = self._generated(sequence)
        if not self._move_to(generated):
            return len(candidate_ids)  # generation has ended: nothing left to constrain
        valid = self.matcher.validate_tokens(list(candidate_ids))
        self._check_matcher()
        if (
            valid < len(candidate_ids)
            and candidate_ids[valid] in self.eos_ids
            and self.allowed(list(sequence) + list(candidate_ids[:valid]))[candidate_ids[valid]]
        ):
            valid += 1
        return valid

    def is_finished(self, sequence: Sequence[int]) -> bool:
        """The grammar accepts the output after `sequence` and allows nothing more than EOS."""
        return self._move_to(self._generated(sequence)) and self.matcher.is_stopped() and self.matcher.is_accepting()

    def _fill(self, words: torch.Tensor, row: int) -> None:
        llguidance.torch.fill_next_token_bitmask(self.matcher, words, row)
        self._check_matcher()

    def _generated(self, sequence: Sequence[int]) -> list[int]:
        return list(sequence[self.prompt_length :])

    def _move_to(self, generated: list[int]) -> bool:
        """Put the matcher after `generated`: True if the grammar allows it (False: refused or past an EOS)."""
        common = len(self.consumed)
        if generated[:common] != self.consumed:  # the usual case (an extension) is one C-speed comparison
            common = next(
                (i for i, (mine, theirs) in enumerate(zip(self.consumed, generated)) if mine != theirs),
                min(len(self.consumed), len(generated)),
            )
        if common < len(self.consumed):
            self.matcher.rollback(len(self.consumed) - common)
            self._check_matcher()
            del self.consumed[common:]
        rest = generated[common:]
        if not rest:
            return True
        taken = self.matcher.try_consume_tokens(rest)
        self._check_matcher()  # NOTE: a refused token is not an error; a lexer past its limits is
        self.consumed.extend(rest[:taken])
        return taken == len(rest)


def grammar_prefix(constraint: GrammarConstraint | None, sequence: Sequence[int], candidate_ids: list[int]) -> list[int]:
    """The longest prefix of a looked-up chain the grammar allows (all of it without a grammar)."""
    if constraint is None or not candidate_ids:
        return candidate_ids
    return candidate_ids[: constraint.valid_prefix_length(sequence, candidate_ids)]
