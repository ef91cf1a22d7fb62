"""API keys (environment and a rotating keys file), the client allow-list, and keeping secrets out of logs."""

from __future__ import annotations

import logging
import os

import httpx
import pytest

import gateway.auth
from gateway.auth import ApiKeys
from gateway.errors import OpenAIError

CHAT = "/v1/chat/completions"


def chat_body(content: str = "hello there") -> dict:
    return {"model": "target", "messages": [{"role": "user", "content": content}], "max_tokens": 2}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "authentication_error"
    assert error["code"] == "invalid_api_key"
    assert response.headers["WWW-Authenticate"].startswith('Bearer realm="specdec"')  # RFC 6750's challenge


@pytest.fixture
def keyed(make_gateway, monkeypatch):
    monkeypatch.setenv("SPECDEC_API_KEYS", "k1,k2")
    gateway = make_gateway()
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        yield client


# --- environment keys ------------------------------------------------------------------------


def test_missing_key_is_401(keyed):
    assert_unauthorized(keyed.get("/v1/models"))
    assert_unauthorized(keyed.post(CHAT, json=chat_body()))


def test_wrong_key_is_401(keyed):
    assert_unauthorized(keyed.get("/v1/models", headers=bearer("k3")))
    assert_unauthorized(keyed.post(CHAT, json=chat_body(), headers=bearer("k1k2")))
    assert_unauthorized(keyed.get("/v1/models", headers={"Authorization": "k1"}))  # no scheme


def test_valid_key_is_served(keyed):
    models = keyed.get("/v1/models", headers=bearer("k2"))
    assert models.status_code == 200, models.text
    assert [card["id"] for card in models.json()["data"]] == ["target"]
    chat = keyed.post(CHAT, json=chat_body(), headers=bearer("k2"))
    assert chat.status_code == 200, chat.text
    assert chat.json()["object"] == "chat.completion"
    assert keyed.get("/v1/models", headers=bearer("k1")).status_code == 200


def test_operational_routes_need_no_key(keyed):
    assert keyed.get("/health").status_code == 200
    assert keyed.get("/ready").status_code == 200
    metrics = keyed.get("/metrics")
    assert metrics.status_code == 200
    assert "# TYPE " in metrics.text  # the Prometheus exposition, not an error body


# --- keys file and rotation ------------------------------------------------------------------


def test_keys_file_rotates_without_restart(make_gateway, monkeypatch, tmp_path):
    monkeypatch.delenv("SPECDEC_API_KEYS", raising=False)
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("# team keys\nfile-key-one\n  file-key-two  \n\n", encoding="utf-8")
    gateway = make_gateway(api_keys_file=str(keys_file))
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        assert client.get("/v1/models", headers=bearer("file-key-one")).status_code == 200
        assert client.get("/v1/models", headers=bearer("file-key-two")).status_code == 200
        assert_unauthorized(client.get("/v1/models", headers=bearer("# team keys")))
        assert_unauthorized(client.get("/v1/models"))

        before = keys_file.stat()
        keys_file.write_text("# rotated\nfile-key-three-rotated\nfile-key-two\n", encoding="utf-8")
        os.utime(keys_file, ns=(before.st_atime_ns, before.st_mtime_ns + 2_000_000_000))

        assert client.get("/v1/models", headers=bearer("file-key-three-rotated")).status_code == 200
        assert client.get("/v1/models", headers=bearer("file-key-two")).status_code == 200
        assert_unauthorized(client.get("/v1/models", headers=bearer("file-key-one")))
        assert client.post(CHAT, json=chat_body(), headers=bearer("file-key-three-rotated")).status_code == 200


# --- allow-list ------------------------------------------------------------------------------


def test_client_outside_the_allow_list_is_403(make_gateway):
    gateway = make_gateway(allowed_cidrs=["10.0.0.0/8"])
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for response in (client.get("/v1/models"), client.post(CHAT, json=chat_body())):
            assert response.status_code == 403, response.text
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["type"] == "permission_error"


def test_client_inside_the_allow_list_is_served(make_gateway):
    gateway = make_gateway(allowed_cidrs=["127.0.0.0/8"])
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        assert client.get("/v1/models").status_code == 200
        assert client.post(CHAT, json=chat_body()).status_code == 200


# --- secrets stay out of the logs ------------------------------------------------------------


def test_keys_and_prompts_are_never_logged(make_gateway, monkeypatch, caplog, tmp_path):
    secret_key = "sk-live-SECRET-4f9a7c"
    file_key = "sk-file-SECRET-88d1e0"
    prompt = "confidential prompt text zebra-quokka-17"
    monkeypatch.setenv("SPECDEC_API_KEYS", f"other,{secret_key}")
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"{file_key}\n", encoding="utf-8")
    gateway = make_gateway(api_keys_file=str(keys_file))

    # uvicorn configures its loggers when the server is built, so take them over afterwards;
    # "uvicorn" and "uvicorn.access" do not propagate to the root logger caplog listens on.
    names = ["gateway", "specdec", "verify_service", "draft_service", "uvicorn", "uvicorn.error", "uvicorn.access"]
    for name in names:
        caplog.set_level(logging.DEBUG, logger=name)
    non_propagating = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.access")]
    for logger in non_propagating:
        logger.addHandler(caplog.handler)
    try:
        with httpx.Client(base_url=gateway.url, timeout=30) as client:
            assert client.post(CHAT, json=chat_body(prompt), headers=bearer(secret_key)).status_code == 200
            assert client.post(CHAT, json=chat_body(prompt), headers=bearer(file_key)).status_code == 200
            assert_unauthorized(client.post(CHAT, json=chat_body(prompt), headers=bearer(secret_key + "x")))
            with client.stream("POST", CHAT, json={**chat_body(prompt), "stream": True}, headers=bearer(secret_key)) as stream:
                assert stream.status_code == 200
                stream.read()
    finally:
        for logger in non_propagating:
            logger.removeHandler(caplog.handler)

    messages = [record.getMessage() for record in caplog.records]
    assert any(CHAT in message for message in messages), "the access log was not captured"
    # the formatted lines and every record's attributes (structured `extra` fields included)
    captured = "\n".join(messages) + caplog.text + "\n".join(str(vars(record)) for record in caplog.records)
    for secret in (secret_key, file_key, prompt, "zebra-quokka"):
        assert secret not in captured


# --- constant-time comparison ----------------------------------------------------------------


def test_authenticate_compares_against_every_key(monkeypatch):
    real = gateway.auth.hmac.compare_digest
    calls = []

    def counting(a, b):
        calls.append(b)
        return real(a, b)

    monkeypatch.setattr(gateway.auth.hmac, "compare_digest", counting)
    keys = ApiKeys("alpha-key,beta-key,gamma-key", None)
    first = next(iter(keys.current()))  # the first key the loop meets

    assert keys.authenticate(f"Bearer {first}") == first
    assert len(calls) == 3
    assert sorted(calls) == [b"alpha-key", b"beta-key", b"gamma-key"]

    for key in ("alpha-key", "beta-key", "gamma-key"):
        calls.clear()
        assert keys.authenticate(f"Bearer {key}") == key
        assert len(calls) == 3

    calls.clear()
    with pytest.raises(OpenAIError) as refused:
        keys.authenticate("Bearer delta-key")
    assert refused.value.status == 401
    assert len(calls) == 3


def test_authenticate_refuses_missing_or_malformed_headers():
    keys = ApiKeys("alpha-key", None)
    for header in (None, "", "Bearer", "Bearer   ", "Basic alpha-key", "alpha-key"):
        with pytest.raises(OpenAIError) as refused:
            keys.authenticate(header)
        assert refused.value.status == 401
        assert refused.value.code == "invalid_api_key"
    assert keys.authenticate("bearer alpha-key") == "alpha-key"


def test_prompt_and_output_text_are_logged_only_when_log_content_is_enabled(make_gateway, caplog):
    secret = "a prompt that only the content flag may log"
    for log_content in (False, True):
        gateway = make_gateway(observability={"log_content": log_content})
        with caplog.at_level(logging.INFO, logger="specdec.audit"):
            caplog.clear()
            body = {"model": "target", "messages": [{"role": "user", "content": secret}], "max_tokens": 3}
            httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30).raise_for_status()
        audits = [record for record in caplog.records if record.name == "specdec.audit"]
        assert audits and (secret in str(audits[-1].fields)) is log_content
        assert ("output" in audits[-1].fields) is log_content


# --- audit key ids ---------------------------------------------------------------------------


def test_audit_key_ids_are_keyed_by_the_deployment_secret(monkeypatch, tmp_path):
    import hashlib

    from gateway.auth import AuditKeyIds

    monkeypatch.setenv("SPECDEC_AUDIT_SECRET", "secret-a")
    ids_a = AuditKeyIds.from_environment(None)
    assert ids_a.of("letmein") == ids_a.of("letmein") != ids_a.of("letmein2")
    assert hashlib.sha256(b"letmein").hexdigest()[:12] not in ids_a.of("letmein")  # not the unkeyed hash
    secret_file = tmp_path / "audit-secret"
    secret_file.write_text("secret-b\n")
    assert AuditKeyIds.from_environment(str(secret_file)).of("letmein") == ids_a.of("letmein")  # the environment wins
    monkeypatch.delenv("SPECDEC_AUDIT_SECRET")
    ids_b = AuditKeyIds.from_environment(str(secret_file))
    assert ids_b.of("letmein") == AuditKeyIds(b"secret-b").of("letmein") != ids_a.of("letmein")
    # no secret anywhere: random per process, so two gateways disagree
    assert AuditKeyIds.from_environment(None).of("letmein") != AuditKeyIds.from_environment(None).of("letmein")
