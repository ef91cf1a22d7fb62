"""A wrapped drafter's session that, once it fails, is closed and drafts nothing more.

Drafters that go first (a prediction, suffix decoding) wrap another (a model, often remote). When the wrapped one
fails (a remote draft that misses its deadline on a loaded host), the session goes on with its own source alone
instead of failing the whole draft.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from specdec.drafters.base import CommittedSequence, DraftBlock, DraftSession
from specdec.errors import DraftUnavailableError

log = logging.getLogger(__name__)


class FallibleSession:
    def __init__(self, session: DraftSession | None, fallback: str) -> None:
        self.session = session
        self.fallback = fallback  # what drafts once the session failed, for the log line

    @property
    def alive(self) -> bool:
        return self.session is not None

    def propose(self, num_tokens: int) -> DraftBlock:
        """Its block; an empty one when there is no session (any more)."""
        if self.session is not None:
            try:
                return self.session.propose(num_tokens)
            except DraftUnavailableError as error:
                self._drop(error)
        return DraftBlock.empty()

    def adopt(self, own: CommittedSequence) -> None:
        """Make the block the round verified (maybe not the wrapped session's) its last, so its feedback applies."""
        if self.session is not None:
            self.session.committed.last_block, self.session.committed.last_parents = list(own.last_block), own.last_parents

    def feedback(self, num_accepted: int, appended_ids: Sequence[int], accepted_nodes: Sequence[int] | None = None) -> None:
        if self.session is not None:
            try:
                self.session.feedback(num_accepted, appended_ids, accepted_nodes)
            except DraftUnavailableError as error:
                self._drop(error)

    def _drop(self, error: DraftUnavailableError) -> None:
        log.warning("wrapped drafter failed, drafting from %s alone: %s", self.fallback, error)
        session, self.session = self.session, None
        try:
            session.close()
        except DraftUnavailableError:
            pass  # already gone: nothing left to release

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
