"""The gateway fuzzed from its own OpenAPI schema (schemathesis): valid and invalid bodies for every
operation. No 5xx, no hang, and every error is an OpenAI error body."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from gateway.app import create_app
from specdec.drafters import ModelDrafter

SCHEMA = schemathesis.openapi.from_dict(create_app().openapi())
OPERATIONS = [(result.ok().path, result.ok().method.upper()) for result in SCHEMA.get_all_operations()]
# Bounded for CI: the whole module runs in well under a minute on 2 cores.
EXAMPLES = {"POST": 40, "GET": 5}


def _fuzzable(path: str, method: str, mode: GenerationMode) -> bool:
    # An operation with no body and no parameters has no invalid input to generate.
    operation = SCHEMA[path][method]
    return mode is GenerationMode.POSITIVE or bool(operation.body or operation.query or operation.path_parameters or operation.headers)


CASES = [(path, method, mode) for path, method in OPERATIONS for mode in GenerationMode if _fuzzable(path, method, mode)]


@pytest.fixture(scope="module")
def short_verify(service_loop, tiny_target, tiny_draft):
    """Generations of at most 8 tokens, so fuzzed requests that are valid finish quickly."""
    from conftest import start_draft_server, start_verify_server

    draft = start_draft_server(service_loop, ModelDrafter(tiny_draft.model), tiny_draft)
    verify = start_verify_server(service_loop, tiny_target, f"127.0.0.1:{draft.port}", default_max_tokens=8)
    yield verify
    for server in (verify, draft):
        service_loop.run(server.stop(0))


def assert_openai_shaped(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code < 400:
        return
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


@pytest.mark.parametrize(("path", "method", "mode"), CASES, ids=[f"{m} {p} {mode.value}" for p, m, mode in CASES])
def test_fuzzed_requests_get_no_5xx_and_openai_shaped_errors(make_gateway, short_verify, path, method, mode):
    gateway = make_gateway(verify_endpoint=f"127.0.0.1:{short_verify.port}", max_tokens_limit=8, max_n=2, served_model_name="target")
    strategy = SCHEMA[path][method].as_strategy(generation_mode=mode)

    @settings(max_examples=EXAMPLES[method], deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(case=strategy, served_model=st.booleans())
    def check(case, served_model):
        if served_model and isinstance(case.body, dict):
            case.body["model"] = "target"  # past the model check, into verify
        kwargs = case.as_transport_kwargs(base_url=gateway.url)
        with httpx.Client(timeout=30) as client:  # a hang fails as a timeout
            response = client.request(
                kwargs["method"], kwargs["url"], headers=kwargs.get("headers"), params=kwargs.get("params"), **_body(kwargs)
            )
        assert_openai_shaped(response)

    check()


def _body(kwargs: dict) -> dict:
    if "json" in kwargs:
        return {"json": kwargs["json"]}
    if "data" in kwargs or "content" in kwargs:
        return {"content": kwargs.get("content", kwargs.get("data"))}
    return {}
