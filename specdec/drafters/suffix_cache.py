"""The suffix trees suffix decoding drafts from (drafters/suffix.py), one set per scope.

The trees are arctic-inference's `SuffixDecodingCache` (Snowflake's SuffixDecoding, the core vLLM's `method:
suffix` uses; C++ behind nanobind, no torch or vLLM at run time): a tree per active request over its prompt and
output, and one global tree over the outputs of the last `max_cached_requests` requests, evicted oldest first.

A scope is whose outputs may draft for whom: by default the caller's API key id (the gateway sends it), so one
tenant's text never drafts for another's. The output is the target's either way (lossless), but how fast a request
runs would tell a tenant whether another's outputs continue its text. At most `max_scopes` scopes are kept; the one
used longest ago is dropped first (its active sessions keep their own reference until they close).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from arctic_inference.suffix_decoding import SuffixDecodingCache, SuffixDecodingDraft


@dataclass(frozen=True)
class SuffixSettings:
    """What the trees keep and how boldly they draft; the defaults and their meaning: the config's `suffix` section."""

    max_depth: int  # longest context matched, and deepest continuation kept
    max_cached_requests: int  # outputs kept in all scopes' global trees together (a scope evicts its oldest first)
    max_scopes: int  # scopes (API keys) with a global tree; the least recently used is dropped first
    draft_tokens: int  # most candidates per suffix block
    max_spec_factor: float  # a block holds at most this many times the match length
    min_token_prob: float  # the continuation stops where its estimated frequency falls below this
    min_score: float  # a block goes before the model drafter's when its expected accepted tokens reach this
    per_key: bool  # False: one global tree for every caller


class SuffixTrees:
    """The global trees by scope, bounded in scopes and in outputs per scope; safe to share between threads."""

    def __init__(self, settings: SuffixSettings) -> None:
        self.settings = settings
        self._scopes: OrderedDict[str, _Scope] = OrderedDict()
        self._lock = threading.Lock()
        self._request_ids = itertools.count()

    def open(self, scope: str, prompt_ids: Sequence[int]) -> SuffixRequest:
        """A request's handle: its prompt indexed, its output added to its scope's global tree as it grows."""
        key = scope if self.settings.per_key else ""
        with self._lock:
            trees = self._scopes.pop(key, None) or _Scope(self.settings)
            self._scopes[key] = trees  # most recently used last
            self._drop_least_recent()
        return SuffixRequest(trees, next(self._request_ids), prompt_ids)

    def _drop_least_recent(self) -> None:
        """Room for one more output: the oldest outputs of the scopes used longest ago go first; scopes past
        `max_scopes` go whole.

        NOTE: memory grows with the outputs kept (about 250 bytes per output token at max_depth 24, measured by
        benchmarks/suffix_memory.py), so the output bound is over all scopes together, not per scope.
        """
        while len(self._scopes) > self.settings.max_scopes:
            self._scopes.popitem(last=False)
        excess = sum(scope.cached_outputs() for scope in self._scopes.values()) - self.settings.max_cached_requests + 1
        for scope in self._scopes.values():  # least recently used first; the one being opened last
            while excess > 0 and scope.evict_oldest():
                excess -= 1

    def cached_outputs(self) -> int:
        """Outputs held in all global trees (a gauge)."""
        with self._lock:
            scopes = list(self._scopes.values())
        return sum(scope.cached_outputs() for scope in scopes)

    def scopes(self) -> int:
        with self._lock:
            return len(self._scopes)


class _Scope:
    def __init__(self, settings: SuffixSettings) -> None:
        self.cache = SuffixDecodingCache(max_tree_depth=settings.max_depth, max_cached_requests=settings.max_cached_requests)
        self.lock = threading.Lock()  # NOTE: SuffixDecodingCache is not thread-safe; sessions run in worker threads

    def cached_outputs(self) -> int:
        with self.lock:
            return len(self.cache.cached_requests)

    def evict_oldest(self) -> bool:
        """Drop the oldest output from the global tree; False when there is none."""
        with self.lock:
            oldest = next(iter(self.cache.cached_requests), None)
            if oldest is None:
                return False
            self.cache.evict_cached_response(oldest)
            return True


class SuffixRequest:
    """One request's view of its scope's trees: its prompt, its output so far, and everyone's cached outputs."""

    def __init__(self, scope: _Scope, request_id: int, prompt_ids: Sequence[int]) -> None:
        self.scope = scope
        self.request_id = request_id
        self.settings_depth = scope.cache.max_tree_depth
        with scope.lock:
            scope.cache.start_request(request_id, list(prompt_ids))
        self.active = True

    def speculate(self, context: Sequence[int], max_tokens: int, settings: SuffixSettings, tree: bool) -> SuffixDecodingDraft:
        context = list(context[-self.settings_depth :])
        with self.scope.lock:
            return self.scope.cache.speculate(
                self.request_id,
                context,
                max_spec_tokens=max_tokens,
                max_spec_factor=settings.max_spec_factor,
                min_token_prob=settings.min_token_prob,
                use_tree_spec=tree,
            )

    def extend(self, token_ids: Sequence[int]) -> None:
        if token_ids:
            with self.scope.lock:
                self.scope.cache.add_active_response(self.request_id, list(token_ids))

    def close(self) -> None:
        """The prompt's tree is freed; the output stays in the global tree until evicted."""
        if self.active:
            self.active = False
            with self.scope.lock:
                self.scope.cache.stop_request(self.request_id)
