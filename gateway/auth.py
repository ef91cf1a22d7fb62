"""API keys (SPECDEC_API_KEYS and/or a keys file re-read on change), their audit ids, and a client CIDR allow-list."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
from pathlib import Path

from fastapi import Request

from gateway.errors import OpenAIError

CHALLENGE = 'Bearer realm="specdec"'  # RFC 6750: what a 401 asks for
log = logging.getLogger(__name__)


class ApiKeys:
    """Keys from the environment plus a file (one per line, # comments); the file is re-read
    whenever its modification time changes, so keys rotate without a restart."""

    def __init__(self, env_value: str | None, keys_file: str | None) -> None:
        self.env_keys = frozenset(key.strip() for key in (env_value or "").split(",") if key.strip())
        self.keys_file = Path(keys_file) if keys_file else None
        self._file_keys: frozenset[str] = frozenset()
        self._file_stamp: tuple[int, int] | None = None

    @classmethod
    def from_environment(cls, keys_file: str | None) -> ApiKeys:
        return cls(os.environ.get("SPECDEC_API_KEYS"), keys_file)

    @property
    def enabled(self) -> bool:
        return bool(self.env_keys or self.keys_file)

    def current(self) -> frozenset[str]:
        if self.keys_file is not None:
            self._reload_if_changed()
        return self.env_keys | self._file_keys

    def _reload_if_changed(self) -> None:
        try:
            stat = self.keys_file.stat()
        except OSError:
            if self._file_stamp is not None:
                log.warning("API keys file %s is gone; only SPECDEC_API_KEYS keys are valid now", self.keys_file)
            self._file_keys, self._file_stamp = frozenset(), None
            return
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._file_stamp:
            lines = self.keys_file.read_text(encoding="utf-8").splitlines()
            self._file_keys = frozenset(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))
            self._file_stamp = stamp
            log.info("loaded %d API keys from %s", len(self._file_keys), self.keys_file)  # counts only, never keys

    def authenticate(self, authorization: str | None) -> str:
        """The caller's key, or 401. Every key is compared in constant time; none short-circuits."""
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise OpenAIError(
                401,
                "missing API key: send 'Authorization: Bearer <key>'",
                "authentication_error",
                code="invalid_api_key",
                headers={"WWW-Authenticate": CHALLENGE},
            )
        presented = presented.strip().encode()
        matched = False
        for key in self.current():
            matched |= hmac.compare_digest(presented, key.encode())
        if not matched:
            raise OpenAIError(
                401,
                "invalid API key",
                "authentication_error",
                code="invalid_api_key",
                headers={"WWW-Authenticate": f'{CHALLENGE}, error="invalid_token"'},
            )
        return presented.decode()


class ClientAllowList:
    def __init__(self, cidrs: list[str]) -> None:
        self.networks = [ipaddress.ip_network(cidr, strict=False) for cidr in cidrs]

    def check(self, request: Request) -> None:
        if not self.networks:
            return
        host = request.client.host if request.client else ""
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        if address is None or not any(address in network for network in self.networks):
            raise OpenAIError(403, "this client address is not allowed", "permission_error", code="ip_not_allowed")


class AuditKeyIds:
    """The id an API key has in the audit log: HMAC-SHA256 of the key under a per-deployment secret.

    An unkeyed hash would let anyone holding the logs test guesses of a weak key offline. The secret
    comes from $SPECDEC_AUDIT_SECRET, else from serving.audit_secret_file; with neither, a random one
    per process (ids are then stable only until a restart, and differ between replicas).
    """

    def __init__(self, secret: bytes) -> None:
        self.secret = secret

    @classmethod
    def from_environment(cls, secret_file: str | None) -> AuditKeyIds:
        secret = os.environ.get("SPECDEC_AUDIT_SECRET", "").encode()
        if not secret and secret_file:
            secret = Path(secret_file).read_bytes().strip()
        if not secret:
            log.info("no audit secret configured (SPECDEC_AUDIT_SECRET or serving.audit_secret_file): audit key ids are random per process")
            secret = secrets.token_bytes(32)
        return cls(secret)

    def of(self, key: str) -> str:
        return "key-" + hmac.new(self.secret, key.encode(), hashlib.sha256).hexdigest()[:16]
