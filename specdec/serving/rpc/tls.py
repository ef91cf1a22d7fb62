"""TLS credentials from the `tls` config section: servers, their clients, and health probes beside them.

Kept apart from the server scaffolding so a probe (`specdec healthcheck`) loads grpc alone, not torch."""

from __future__ import annotations

from pathlib import Path

import grpc

from specdec.errors import SpecdecError
from specdec.serving.config import TlsSection


def server_credentials(tls: TlsSection) -> grpc.ServerCredentials:
    key, cert = _read(tls.key_file, "tls.key_file"), _read(tls.cert_file, "tls.cert_file")
    ca = _read(tls.ca_file, "tls.ca_file") if tls.ca_file else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=tls.require_client_auth)


def channel_credentials(tls: TlsSection) -> grpc.ChannelCredentials:
    ca = _read(tls.ca_file, "tls.ca_file") if tls.ca_file else None
    key = _read(tls.client_key_file, "tls.client_key_file") if tls.client_key_file else None
    cert = _read(tls.client_cert_file, "tls.client_cert_file") if tls.client_cert_file else None
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def probe_tls(tls: TlsSection) -> TlsSection | None:
    """The client side of a health probe that runs beside a service with these settings: None (plaintext) when
    the service serves plaintext; else trust tls.ca_file and, for mTLS, present the client certificate or,
    without one, the service's own (which then needs the clientAuth usage)."""
    if not tls.server_enabled:
        return None
    if tls.client_cert_file:
        return TlsSection(ca_file=tls.ca_file, client_cert_file=tls.client_cert_file, client_key_file=tls.client_key_file)
    return TlsSection(ca_file=tls.ca_file, client_cert_file=tls.cert_file, client_key_file=tls.key_file)


def _read(path: str | None, field: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except (OSError, TypeError) as error:
        raise SpecdecError(f"{field}: cannot read {path!r}") from error
