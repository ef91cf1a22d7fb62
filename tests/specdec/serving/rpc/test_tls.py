"""TLS between services: mTLS on the draft and verify servers, verify -> draft over mTLS, refusals."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from specdec.cli.client import VerifyClient
from specdec.serving.config import SpecdecConfig, TlsSection

TIMEOUT = 30


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key, issuer: str, issuer_key, extensions) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory: Path, stem: str, key, certificate: x509.Certificate) -> tuple[str, str]:
    key_path, cert_path = directory / f"{stem}.key", directory / f"{stem}.crt"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return str(cert_path), str(key_path)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, str]:
    """A throwaway CA, a server certificate for localhost / 127.0.0.1 and a client certificate."""
    directory = tmp_path_factory.mktemp("tls")
    ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _certificate(
        "specdec test CA",
        ca_key,
        "specdec test CA",
        ca_key,
        [
            (x509.BasicConstraints(ca=True, path_length=None), True),
            (
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                True,
            ),
        ],
    )
    server = _certificate(
        "localhost",
        server_key,
        "specdec test CA",
        ca_key,
        [
            (x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        ],
    )
    client = _certificate(
        "specdec client",
        client_key,
        "specdec test CA",
        ca_key,
        [
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False),
        ],
    )
    ca_file = directory / "ca.crt"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server_cert, server_key_file = _write(directory, "server", server_key, server)
    client_cert, client_key_file = _write(directory, "client", client_key, client)
    return {
        "ca_file": str(ca_file),
        "cert_file": server_cert,
        "key_file": server_key_file,
        "client_cert_file": client_cert,
        "client_key_file": client_key_file,
    }


async def _construct(server_class, config, address):
    return server_class(config, address)  # grpc.aio servers must be created on the loop that runs them


@pytest.fixture(scope="module")
def tls_draft_server(service_loop, tiny_draft, certs):
    from draft_service.server import DraftServer
    from draft_service.servicer import LoadedDrafter
    from specdec.drafters import ModelDrafter

    tls = {key: certs[key] for key in ("cert_file", "key_file", "ca_file")}
    config = SpecdecConfig(tls={**tls, "require_client_auth": True}, draft_service={"max_sessions": 4})
    server = service_loop.run(_construct(DraftServer, config, "127.0.0.1:0"))
    service_loop.run(server.start(LoadedDrafter(ModelDrafter(tiny_draft.model), tiny_draft)))
    yield server
    service_loop.run(server.stop(0))


@pytest.fixture(scope="module")
def tls_verify_server(service_loop, tiny_target, certs, tls_draft_server):
    from verify_service.server import VerifyServer

    # One tls section: the server side (cert, key, CA for client certs) and the client side towards the draft.
    config = SpecdecConfig(
        tls={**certs, "require_client_auth": True},
        # Drafting every round (the tiny pair would start in plain steps: the load-aware policy has its own tests).
        verify_service={"draft_endpoint": f"localhost:{tls_draft_server.port}", "max_sessions": 4, "load_aware_speculation": False},
    )
    server = service_loop.run(_construct(VerifyServer, config, "127.0.0.1:0"))
    service_loop.run(server.start(tiny_target))
    yield server
    service_loop.run(server.stop(0))


def _client_tls(certs, with_client_cert: bool = True) -> TlsSection:
    if with_client_cert:
        return TlsSection(ca_file=certs["ca_file"], client_cert_file=certs["client_cert_file"], client_key_file=certs["client_key_file"])
    return TlsSection(ca_file=certs["ca_file"])


def test_mtls_client_generates_with_the_draft_over_mtls(tls_verify_server, certs, tiny_target):
    prompt = tiny_target.tokenizer("Once upon a time")["input_ids"]
    with VerifyClient(f"localhost:{tls_verify_server.port}", tls=_client_tls(certs)) as client:
        completion = client.generate(prompt, timeout=TIMEOUT, max_tokens=8, temperature=0.0, ignore_eos=True)
    assert len(completion.token_ids) == 8 and completion.finish_reason == "length"
    assert completion.summary.enabled and completion.summary.rounds > 0 and completion.summary.draft_tokens > 0
    assert not completion.summary.fallback
    assert not any(round_.fallback for round_ in completion.rounds)


def test_client_without_a_certificate_is_refused(tls_verify_server, certs):
    with VerifyClient(f"localhost:{tls_verify_server.port}", tls=_client_tls(certs, with_client_cert=False)) as client:
        with pytest.raises(grpc.RpcError) as caught:
            client.status(timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_plaintext_client_is_refused(tls_verify_server):
    with VerifyClient(f"127.0.0.1:{tls_verify_server.port}") as client:
        with pytest.raises(grpc.RpcError) as caught:
            client.status(timeout=10)
        assert not client.is_serving(timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_draft_refuses_a_client_without_a_certificate(tls_draft_server, certs):
    from specdec.serving.rpc.server import channel_credentials
    from specdec.v1 import common_pb2, draft_pb2_grpc

    for tls, reachable in ((_client_tls(certs), True), (_client_tls(certs, with_client_cert=False), False)):
        with grpc.secure_channel(f"localhost:{tls_draft_server.port}", channel_credentials(tls)) as channel:
            stub = draft_pb2_grpc.DraftServiceStub(channel)
            if reachable:
                assert stub.Status(common_pb2.ServerStatusRequest(), timeout=10).service == "draft"
            else:
                with pytest.raises(grpc.RpcError) as caught:
                    stub.Status(common_pb2.ServerStatusRequest(), timeout=10)
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("with_client_cert", [True, False])
def test_gateway_reaches_verify_over_mtls_and_is_refused_without_its_certificate(tls_verify_server, certs, with_client_cert):
    import httpx
    from conftest import GatewayThread

    client_side = _client_tls(certs, with_client_cert).model_dump()
    config = SpecdecConfig(
        serving={"verify_endpoint": f"localhost:{tls_verify_server.port}", "served_model_name": "target", "upstream_connect_timeout_s": 2},
        tls=client_side,
    )
    gateway = GatewayThread(config)
    try:
        body = {"model": "target", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        reply = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=TIMEOUT)
        ready = httpx.get(f"{gateway.url}/ready", timeout=TIMEOUT)
    finally:
        gateway.stop()
    if with_client_cert:
        assert reply.status_code == 200 and ready.status_code == 200, reply.text
        assert not reply.json()["speculative"]["fallback"]  # and verify drafted over mTLS too
    else:
        assert reply.status_code == 503 and ready.status_code == 503, reply.text
        assert set(reply.json()["error"]) == {"message", "type", "param", "code"}


# --- `specdec healthcheck` (the container probe) against TLS services --------------------------------------


def _healthcheck(role: str, port: int, tls: dict, tmp_path: Path, *flags: str) -> int:
    """The probe as a container runs it: the service's own settings from its config file."""
    import yaml

    from specdec.cli.main import main

    config = tmp_path / f"{role}-probe.yaml"
    config.write_text(yaml.safe_dump({"tls": tls}), encoding="utf-8")
    return main(["healthcheck", role, "--address", f"localhost:{port}", "--timeout", "5", "--config", str(config), *flags])


def test_healthcheck_passes_against_an_mtls_verify_service_with_its_settings(tls_verify_server, certs, tmp_path, capsys):
    assert _healthcheck("verify", tls_verify_server.port, {**certs, "require_client_auth": True}, tmp_path) == 0
    assert "SERVING" in capsys.readouterr().out


def test_healthcheck_without_the_tls_settings_fails(tls_verify_server, tmp_path, capsys):
    assert _healthcheck("verify", tls_verify_server.port, {}, tmp_path) == 1  # plaintext, refused
    assert "unreachable" in capsys.readouterr().err


def test_healthcheck_checks_the_certificate_name(tls_verify_server, certs, tmp_path):
    tls = {**certs, "require_client_auth": True}
    assert _healthcheck("verify", tls_verify_server.port, tls, tmp_path, "--tls-server-name", "localhost") == 0
    assert _healthcheck("verify", tls_verify_server.port, tls, tmp_path, "--tls-server-name", "draft.example") == 1


def test_healthcheck_refuses_a_server_only_certificate_as_its_mtls_identity(tls_draft_server, certs, tmp_path):
    # The module's server certificate has only the serverAuth usage: the draft (mTLS) refuses it from a client.
    tls = {key: certs[key] for key in ("cert_file", "key_file", "ca_file")}
    assert _healthcheck("draft", tls_draft_server.port, {**tls, "require_client_auth": True}, tmp_path) == 1
    with_client = {**tls, "client_cert_file": certs["client_cert_file"], "client_key_file": certs["client_key_file"]}
    assert _healthcheck("draft", tls_draft_server.port, with_client, tmp_path) == 0


def test_healthcheck_takes_the_services_tls_flags(tls_verify_server, certs, tmp_path):
    client_only = {key: certs[key] for key in ("client_cert_file", "client_key_file")}
    flags = ["--tls-cert", certs["cert_file"], "--tls-key", certs["key_file"], "--tls-ca", certs["ca_file"]]
    assert _healthcheck("verify", tls_verify_server.port, client_only, tmp_path, *flags) == 0


def test_healthcheck_fails_once_the_tls_service_has_stopped(service_loop, tiny_target, certs, tmp_path, capsys):
    from verify_service.server import VerifyServer

    tls = {key: certs[key] for key in ("cert_file", "key_file", "ca_file")}
    config = SpecdecConfig(tls=tls, verify_service={"draft_endpoint": "", "max_sessions": 2})
    server = service_loop.run(_construct(VerifyServer, config, "127.0.0.1:0"))
    service_loop.run(server.start(tiny_target))
    try:
        assert _healthcheck("verify", server.port, tls, tmp_path) == 0
    finally:
        service_loop.run(server.stop(0))
    assert _healthcheck("verify", server.port, tls, tmp_path) == 1
    assert "unreachable (UNAVAILABLE, TLS)" in capsys.readouterr().err


def test_healthcheck_presents_the_services_own_certificate_without_a_client_one(service_loop, tiny_draft, tmp_path):
    """A draft under mTLS has no client certificate of its own: the probe presents the server's, which then
    carries both usages (as cert-manager's `usages: [server auth, client auth]` gives)."""
    from draft_service.server import DraftServer
    from draft_service.servicer import LoadedDrafter
    from specdec.drafters import ModelDrafter

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("probe CA", ca_key, "probe CA", ca_key, [(x509.BasicConstraints(ca=True, path_length=None), True)])
    both = _certificate(
        "localhost",
        key,
        "probe CA",
        ca_key,
        [
            (x509.SubjectAlternativeName([x509.DNSName("localhost")]), False),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), False),
        ],
    )
    (tmp_path / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file, key_file = _write(tmp_path, "draft", key, both)
    tls = {"cert_file": cert_file, "key_file": key_file, "ca_file": str(tmp_path / "ca.crt"), "require_client_auth": True}
    server = service_loop.run(_construct(DraftServer, SpecdecConfig(tls=tls, draft_service={"max_sessions": 2}), "127.0.0.1:0"))
    service_loop.run(server.start(LoadedDrafter(ModelDrafter(tiny_draft.model), tiny_draft)))
    try:
        assert _healthcheck("draft", server.port, tls, tmp_path) == 0
    finally:
        service_loop.run(server.stop(0))


def test_healthcheck_loads_without_torch():
    """Container probes start a fresh process every interval, on a host busy loading models: importing torch
    (seconds) there had pushed `specdec healthcheck` past the health check's timeout."""
    import subprocess
    import sys

    code = (
        "import sys; from specdec.cli.main import main; "
        "rc = main(['healthcheck', 'draft', '--address', '127.0.0.1:1', '--timeout', '1']); "
        "print(rc, sorted(name for name in ('torch', 'transformers') if name in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split("\n")[-2] == "1 []", result.stdout + result.stderr
