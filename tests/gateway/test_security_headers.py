"""Every response carries a Content-Security-Policy allowing this origin only, and FastAPI's /docs
and /redoc (scripts from a CDN) are not served; /openapi.json is."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient
from service_support import CHAT

from gateway.app import create_app
from gateway.security_headers import CONTENT_SECURITY_POLICY

HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture
def client(gateway_url):
    with httpx.Client(base_url=gateway_url, timeout=30) as http:
        yield http


def assert_locked_down(response: httpx.Response) -> None:
    policy = response.headers.get("content-security-policy")
    assert policy == CONTENT_SECURITY_POLICY, (response.request.url, response.status_code, policy)
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["default-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    assert all(source in ("'self'", "'none'") for value in directives.values() for source in value.split()), policy  # no other origin
    assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/", None, 200),
        ("GET", "/playground/app.js", None, 200),
        ("GET", "/health", None, 200),
        ("GET", "/metrics", None, 200),
        ("GET", "/openapi.json", None, 200),
        ("GET", "/v1/models", None, 200),
        ("POST", CHAT, {"model": "target", "messages": HELLO, "max_tokens": 2}, 200),
        ("POST", CHAT, {"model": "target", "messages": HELLO, "max_tokens": 2, "stream": True}, 200),
        ("POST", CHAT, {"model": "target", "messages": "hi"}, 400),
        ("POST", CHAT, {"model": "nope", "messages": HELLO}, 404),
        ("GET", "/no/such/page", None, 404),
    ],
)
def test_every_response_has_the_content_security_policy(client, method, path, body, status):
    response = client.request(method, path, json=body)
    assert response.status_code == status, response.text
    assert_locked_down(response)


def test_an_oversized_body_refusal_has_it_too(make_gateway):
    gateway = make_gateway(max_body_bytes=2048)
    body = {"model": "target", "messages": [{"role": "user", "content": "x" * 4096}]}
    response = httpx.post(f"{gateway.url}{CHAT}", json=body, timeout=30)
    assert response.status_code == 413
    assert_locked_down(response)


def test_an_internal_error_has_it_too():
    app = create_app()

    @app.get("/boom")
    async def boom():
        raise RuntimeError("a bug")

    with TestClient(app, raise_server_exceptions=False) as test_client:
        response = test_client.get("/boom")
    assert response.status_code == 500 and response.json()["error"]["type"] == "server_error"
    assert_locked_down(response)


@pytest.mark.parametrize("path", ["/docs", "/docs/oauth2-redirect", "/redoc"])
def test_the_cdn_documentation_pages_are_not_served(client, path):
    response = client.get(path)
    assert response.status_code == 404
    assert "cdn.jsdelivr.net" not in response.text


def test_the_openapi_schema_is_still_served(client):
    schema = client.get("/openapi.json").json()
    assert "/v1/chat/completions" in schema["paths"]
