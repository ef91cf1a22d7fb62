"""Every /v1 route needs a key when keys are set: found by walking the app's route table, so a route
added later cannot escape. Only the operational routes are public. Keys are checked with
hmac.compare_digest on the serving path; unknown models are refused on every generating route."""

from __future__ import annotations

import httpx
import pytest
from fastapi import routing
from service_support import assert_openai_error

import gateway.auth

PUBLIC = {"/", "/health", "/ready", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}  # "/": the static playground
KEY = "sk-route-walk-7f3e"
# One valid body per POST route (each refuses the other's fields, as OpenAI's API does).
VALID_BODIES = {
    "/v1/chat/completions": {"model": "target", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/completions": {"model": "target", "prompt": "hi", "max_tokens": 2},
}


@pytest.fixture
def keyed_gateway(make_gateway, monkeypatch):
    monkeypatch.setenv("SPECDEC_API_KEYS", KEY)
    return make_gateway()


def _routes(app) -> list[tuple[str, str]]:
    """(path, method) of every route the app serves, included routers flattened."""
    # FastAPI >= 0.16x keeps included routers as nodes: iter_route_contexts flattens them; before,
    # app.routes already held every route with its prefix.
    flattened = routing.iter_route_contexts(app.routes) if hasattr(routing, "iter_route_contexts") else app.routes
    routes = [(route.path, method) for route in flattened for method in sorted(getattr(route, "methods", None) or ()) if method != "HEAD"]
    documented = {(path, method.upper()) for path, item in app.openapi()["paths"].items() for method in item}
    assert documented <= set(routes), documented - set(routes)  # the walk sees at least what the schema shows
    return routes


def test_only_the_operational_routes_are_outside_v1(keyed_gateway):
    paths = {path for path, _ in _routes(keyed_gateway.app)}
    assert paths - PUBLIC and all(path.startswith("/v1/") for path in paths - PUBLIC), paths


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {KEY}", f"Bearer {KEY}x", "Bearer", f"bearer{KEY}"])
def test_every_v1_route_refuses_a_missing_or_wrong_key(keyed_gateway, authorization):
    routes = [(path, method) for path, method in _routes(keyed_gateway.app) if path.startswith("/v1/")]
    headers = {"Authorization": authorization} if authorization else {}
    with httpx.Client(base_url=keyed_gateway.url, timeout=30) as client:
        for path, method in routes:
            for body in (None, VALID_BODIES.get(path)):  # refused before the body is even looked at
                response = client.request(method, path, headers=headers, json=body)
                assert_openai_error(response, 401, code="invalid_api_key")


def test_every_v1_route_serves_the_right_key_through_compare_digest(keyed_gateway, monkeypatch):
    compared = []
    real = gateway.auth.hmac.compare_digest
    monkeypatch.setattr(gateway.auth.hmac, "compare_digest", lambda a, b: compared.append(b) or real(a, b))
    routes = [(path, method) for path, method in _routes(keyed_gateway.app) if path.startswith("/v1/")]
    with httpx.Client(base_url=keyed_gateway.url, timeout=30, headers={"Authorization": f"Bearer {KEY}"}) as client:
        for path, method in routes:
            compared.clear()
            response = client.request(method, path, json=VALID_BODIES.get(path))
            assert response.status_code == 200, (path, response.text)
            assert compared == [KEY.encode()], (path, compared)  # constant-time, once per configured key


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", ["gpt-4o", "", "TARGET", "target ", "../target"])
def test_models_the_gateway_does_not_serve_are_refused(gateway_url, route, stream, model):
    response = httpx.post(f"{gateway_url}{route}", json={**VALID_BODIES[route], "model": model, "stream": stream}, timeout=30)
    assert_openai_error(response, 404, param="model", code="model_not_found")
