"""Typed errors. Transports map these to statuses; the CLI prints them as one line."""

from __future__ import annotations


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
        self.field = field


class DraftUnavailableError(SpecdecError):
    """The drafter failed or timed out; the verifier falls back to target-only decoding."""


class CapacityError(SpecdecError):
    """No room for the session now (KV cache budget, session slots): retry later."""


class DraftConversionError(SpecdecError):
    """`specdec make-draft` could not read its input or write the GGUF (the message says which)."""
