"""Refusals paced per client: a client whose requests keep being refused (4xx) gets its answers
spaced out (specdec/serving/pacing.py), so a loop of requests that can only be refused
(pathological schemas, bad tools, wrong keys) cannot take the host's CPU from the requests that are
served. A lone refusal is answered at once; served requests are never delayed."""

from __future__ import annotations

import hashlib

from fastapi import Request

from specdec.serving.pacing import KeyedRefusalPacing

PACED_STATUSES = frozenset(range(400, 500)) - {404, 413, 429}  # 413s have their own pacer; 429s already say when to come back


def client_identity(request: Request) -> str:
    """Who is refused: the credential if one was sent (hashed: never kept), else the client address."""
    authorization = request.headers.get("authorization")
    if authorization:
        return "key-" + hashlib.blake2b(authorization.encode(), digest_size=8).hexdigest()
    return request.client.host if request.client else "anonymous"


class ClientRefusalPacing:
    """At most `per_second` refusals a second per client identity; 0 turns it off."""

    def __init__(self, per_second: float) -> None:
        self.pacing = KeyedRefusalPacing(per_second)

    async def pace(self, request: Request, status: int) -> None:
        if status in PACED_STATUSES:
            await self.pacing.pace(client_identity(request))
