"""Typed errors. Transports map these to statuses; the CLI prints them as one line."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable


class SpecdecError(Exception):
    """Base class: a problem the user can fix, reported without a traceback."""


class ModelLoadError(SpecdecError):
    """A model or tokenizer could not be found or loaded."""


class IncompatibleVocabularyError(SpecdecError):
    """The draft's tokenizer does not map token ids the way the target's does."""


class InvalidRequestError(SpecdecError):
    """A request field is out of range; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message

    def __reduce__(self):  # pickled from worker processes (the gateway's checks): rebuilt from both arguments
        return type(self), (self.field, self.message)


class DraftUnavailableError(SpecdecError):
    """The drafter failed or timed out; the verifier falls back to target-only decoding."""


class CapacityError(SpecdecError):
    """No room for the session now (KV cache budget, session slots): retry later."""


class DraftConversionError(SpecdecError):
    """`specdec make-draft` could not read its input or write the GGUF (the message says which)."""


def check_token_ids(token_ids: Iterable[int], vocab_size: int, field: str) -> None:
    """Refuse ids the model does not have, naming the field."""
    bad = next((token for token in token_ids if not 0 <= token < vocab_size), None)
    if bad is not None:
        raise InvalidRequestError(field, f"token id {bad} is outside the vocabulary [0, {vocab_size})")


def field_path(location: Iterable, prefix: str = "", skip: Collection[str] = ()) -> str:
    """A pydantic error location as a dotted field name: ('speculative', 'draft_tokens') -> 'speculative.draft_tokens'."""
    return ".".join([*([prefix] if prefix else []), *(str(part) for part in location if part not in skip)])


def describe_validation_error(
    problems: Iterable[dict],
    prefix: str = "",
    skip: Collection[str] = (),
    rename: Callable[[str], str] = str,
    reason: Callable[[dict], str] = lambda item: str(item.get("msg")),
) -> str:
    """One 'field: message' per pydantic problem (`error.errors()`), joined by '; '; `rename` maps a field
    to what the user typed (a CLI flag), `skip` drops location parts (FastAPI's 'body'), `reason` words a problem."""
    return "; ".join(f"{rename(field_path(item.get('loc', ()), prefix, skip)) or 'body'}: {reason(item)}" for item in problems)
