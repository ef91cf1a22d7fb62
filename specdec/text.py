"""Token ids -> text deltas: UTF-8 safe incremental detokenisation and stop strings."""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

_INCOMPLETE = "\ufffd"


class IncrementalDetokenizer:
    """Emits text only once it is final (TGI's prefix/read offsets).

    A token that ends in the middle of a multi-byte character decodes to U+FFFD; its text is
    held back until a later token completes the character.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.token_ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0

    def push(self, token_id: int) -> str:
        self.token_ids.append(token_id)
        decode = self.tokenizer.decode
        prefix_text = decode(self.token_ids[self.prefix_offset : self.read_offset], skip_special_tokens=True)
        full_text = decode(self.token_ids[self.prefix_offset :], skip_special_tokens=True)
        if len(full_text) <= len(prefix_text) or full_text.endswith(_INCOMPLETE):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        return full_text[len(prefix_text) :]

    def flush(self) -> str:
        """Text still held back at the end (bytes that never formed a valid character)."""
        decode = self.tokenizer.decode
        prefix_text = decode(self.token_ids[self.prefix_offset : self.read_offset], skip_special_tokens=True)
        full_text = decode(self.token_ids[self.prefix_offset :], skip_special_tokens=True)
        self.prefix_offset = self.read_offset = len(self.token_ids)
        return full_text[len(prefix_text) :]


class StopStringMatcher:
    """Finds stop strings across token boundaries and holds back text that may start one."""

    def __init__(self, stop: Sequence[str]) -> None:
        self.stop = [s for s in stop if s]
        self.pending = ""
        self.stopped = False

    def push(self, delta: str) -> str:
        """Text safe to emit now; sets `stopped` when a stop string completes (it is not emitted)."""
        if not self.stop:
            return delta
        self.pending += delta
        hits = [index for index in (self.pending.find(s) for s in self.stop) if index >= 0]
        if hits:
            self.stopped = True
            emitted, self.pending = self.pending[: min(hits)], ""
            return emitted
        held = _longest_partial_match(self.pending, self.stop)
        emitted = self.pending[: len(self.pending) - held]
        self.pending = self.pending[len(emitted) :]
        return emitted

    def flush(self) -> str:
        """At the end of generation the held-back text was not a stop string after all."""
        emitted, self.pending = self.pending, ""
        return emitted


def _longest_partial_match(text: str, stop: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
    best = 0
    for stop_string in stop:
        for size in range(min(len(text), len(stop_string) - 1), best, -1):
            if stop_string.startswith(text[-size:]):
                best = size
                break
    return best
