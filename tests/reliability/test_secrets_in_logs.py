"""Prompts, outputs and bearer keys never reach any service's log: served, refused and abandoned
requests through the real gateway -> verify -> draft processes, then every log line is searched."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import httpx
import pytest
from service_support import CHAT, ServiceProcess, free_port, http_ok, sse_events, wait_until

SECRET_PROMPT = "confidential-zebra-quokka-4411 my bank PIN"
SECRET_KEY = "sk-never-log-me-90ab"


def test_no_prompt_output_or_key_in_any_service_log(stack, http):
    headers = {"Authorization": f"Bearer {SECRET_KEY}"}
    body = {"model": "target", "messages": [{"role": "user", "content": SECRET_PROMPT}], "max_tokens": 12, "temperature": 0}
    served = http.post(CHAT, json=body, headers=headers)
    assert served.status_code == 200
    output = served.json()["choices"][0]["message"]["content"]
    assert http.post(CHAT, json={**body, "max_tokens": 600}, headers=headers).status_code == 400  # refused by verify
    assert http.post(CHAT, json={**body, "temperature": -1}, headers=headers).status_code == 400  # refused by the gateway
    assert (
        http.post("/v1/completions", json={"model": "target", "prompt": SECRET_PROMPT, "max_tokens": 4}, headers=headers).status_code == 200
    )
    with http.stream("POST", CHAT, json={**body, "max_tokens": 300, "stream": True}, headers=headers) as response:
        next(sse_events(response.iter_lines()))  # then the client goes away
    time.sleep(0.5)  # log lines written at the end of the abandoned stream
    logs = {name: process.output() for name, process in stack.processes.items()}
    assert all(logs.values()) and "request" in logs["gateway"]  # the logs were captured (the audit line)
    for name, text in logs.items():
        secrets = [SECRET_PROMPT, "zebra-quokka", SECRET_KEY] + ([output.strip()[:24]] if len(output.strip()) >= 12 else [])
        for secret in secrets:
            assert secret not in text, f"{secret!r} in the {name} log"


QUERY_KEY = "sk-in-the-query-string-5521"


def test_a_key_in_the_query_string_never_reaches_the_access_log(stack, http):
    offset = len(stack.gateway.output())
    small = {"model": "target", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert http.get(f"/v1/models?api_key={QUERY_KEY}").status_code == 200
    assert http.post(f"{CHAT}?api_key={QUERY_KEY}&user=me", json=small).status_code == 200
    assert http.get(f"/health?token={QUERY_KEY}").status_code == 200
    time.sleep(0.5)
    log = stack.gateway.output()[offset:]
    assert "/v1/models" in log and "/health" in log, log  # the access lines were written
    assert QUERY_KEY not in log


AUDIT_SECRET = "per-deployment-audit-secret-77"
WEAK_KEY = "letmein"


@pytest.fixture
def keyed_gateway(stack, tmp_path):
    """A second gateway in front of the shared verify, with an API key and an audit secret."""
    port = free_port()
    gateway = ServiceProcess(
        "gateway",
        ["--port", str(port), "--verify-endpoint", f"127.0.0.1:{stack.ports['verify']}"],
        tmp_path / "gateway.log",
        env={"SPECDEC_API_KEYS": WEAK_KEY, "SPECDEC_AUDIT_SECRET": AUDIT_SECRET},
    ).start()
    try:
        wait_until(
            lambda: gateway.alive() and http_ok(f"http://127.0.0.1:{port}/ready"), 60, "the keyed gateway did not start", interval=0.2
        )
        yield gateway, f"http://127.0.0.1:{port}"
    finally:
        gateway.stop()


def test_audit_key_ids_are_keyed_hashes_that_a_weak_key_cannot_be_recovered_from(keyed_gateway):
    gateway, url = keyed_gateway
    small = {"model": "target", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    reply = httpx.post(f"{url}{CHAT}", json=small, headers={"Authorization": f"Bearer {WEAK_KEY}"}, timeout=60)
    assert reply.status_code == 200, reply.text
    time.sleep(0.3)
    audits = [json.loads(line) for line in gateway.output().splitlines() if line.startswith("{") and '"audit": true' in line]
    assert audits, gateway.output()[-2000:]
    expected = "key-" + hmac.new(AUDIT_SECRET.encode(), WEAK_KEY.encode(), hashlib.sha256).hexdigest()[:16]
    assert audits[-1]["key_id"] == expected, audits[-1]
    assert hashlib.sha256(WEAK_KEY.encode()).hexdigest()[:12] not in gateway.output()  # the unsalted id of old
