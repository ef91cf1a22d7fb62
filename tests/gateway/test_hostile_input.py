"""Hostile bodies: huge numbers, deep nesting, invalid UTF-8, NUL bytes, lone surrogates. Each is
a 4xx in the OpenAI error shape naming the field where there is one; none is a 5xx or a hang."""

from __future__ import annotations

import json

import httpx
import pytest
from service_support import CHAT, assert_openai_error, declared_body_reply

from gateway.body_limit import largest_useful_body

HELLO = [{"role": "user", "content": "hello there"}]
BASE = {"model": "target", "messages": HELLO, "max_tokens": 4}
COMPLETIONS = "/v1/completions"


@pytest.fixture
def client(gateway_url):
    with httpx.Client(base_url=gateway_url, timeout=30) as http:
        yield http


@pytest.mark.parametrize(
    ("route", "fields", "param"),
    [
        (COMPLETIONS, {"prompt": [5, 2**31]}, "prompt"),  # found by the schema fuzzer: int32 overflow was a 500
        (COMPLETIONS, {"prompt": [-1]}, "prompt"),
        (CHAT, {"n": 10**6}, "n"),
        (CHAT, {"n": 10**40}, "n"),
        (CHAT, {"n": 0}, "n"),
        (CHAT, {"max_tokens": 10**40}, "max_tokens"),
        (CHAT, {"max_completion_tokens": 2**63}, "max_completion_tokens"),
        (CHAT, {"logprobs": True, "top_logprobs": 10**9}, "top_logprobs"),
        (COMPLETIONS, {"logprobs": 10**9}, "logprobs"),
        (CHAT, {"seed": 2**64}, "seed"),
        (CHAT, {"seed": -1}, "seed"),
        (CHAT, {"stop": ["x"] * 1000}, "stop"),
        (CHAT, {"speculative": {"num_draft_tokens": 10**9}}, "speculative.num_draft_tokens"),
        (CHAT, {"speculative": {"policy": "sometimes"}}, "speculative.policy"),
        (CHAT, {"messages": [{"role": "user", "content": [[[[["deep"]]]]]}]}, "messages.0.content.str"),
    ],
)
def test_huge_and_out_of_range_numbers_are_400_naming_the_field(client, route, fields, param):
    body = {**BASE, **fields} if route == CHAT else {"model": "target", "prompt": "hi", "max_tokens": 4, **fields}
    error = assert_openai_error(client.post(route, json=body), 400)
    assert error["param"].startswith(param), error  # prompt.list[...].1 names the union member and the index


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_floats_are_400_naming_the_field(client, literal):
    raw = json.dumps(BASE)[:-1] + f', "temperature": {literal}}}'
    assert_openai_error(client.post(CHAT, content=raw, headers={"content-type": "application/json"}), 400, param="temperature")


def _nested(depth: int) -> bytes:
    return b'{"model": "target", "messages": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_json_is_400(client, depth):
    assert_openai_error(client.post(CHAT, content=_nested(depth), headers={"content-type": "application/json"}), 400)


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "target", "messages": [{"role": "user", "content": "\xff\xfe\xfd"}]}',  # not UTF-8
        b'{"model": "target", "messages": [{"role": "user", "content": "a\x00b"}]}',  # raw NUL in a string
        b"\x00" * 64,
        b"",
        b"[]",
        b'"just a string"',
        b"null",
    ],
)
def test_undecodable_or_non_object_bodies_are_400(client, body):
    assert_openai_error(client.post(CHAT, content=body, headers={"content-type": "application/json"}), 400)


def test_escaped_nul_in_content_is_just_a_character(client):
    reply = client.post(CHAT, json={**BASE, "messages": [{"role": "user", "content": "a\u0000b\u0000"}]})
    assert reply.status_code == 200, reply.text


def test_nul_in_the_model_name_is_404_model_not_found(client):
    assert_openai_error(client.post(CHAT, json={**BASE, "model": "target\u0000"}), 404, param="model", code="model_not_found")


@pytest.mark.parametrize(
    ("route", "fields", "param"),
    [
        (CHAT, {"messages": [{"role": "user", "content": "a\ud800b"}]}, "messages"),
        (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]}, "messages"),
        (CHAT, {"stop": ["\ud800"]}, "stop"),
        (COMPLETIONS, {"prompt": "x\udc00"}, "prompt"),
        (CHAT, {"model": "\ud800"}, "model"),
        (CHAT, {"user": "\ud800"}, "user"),
    ],
)
def test_lone_surrogates_are_400_naming_the_field(client, route, fields, param):
    body = {**BASE, **fields} if route == CHAT else {"model": "target", "max_tokens": 4, **fields}
    # json.dumps escapes the surrogate as \\ud800: valid JSON text that decodes to a string no UTF-8 can hold
    raw = json.dumps(body)
    error = assert_openai_error(client.post(route, content=raw, headers={"content-type": "application/json"}), 400)
    assert error["param"].startswith(param), error  # e.g. messages.0.content.str: the union member it failed as


def test_the_gateway_still_serves_after_hostile_input(client):
    assert client.post(CHAT, json=BASE).status_code == 200


@pytest.mark.parametrize(
    ("route", "fields", "param", "what"),
    [
        (CHAT, {"messages": [{"role": "user", "content": "a" * 7000}]}, "messages", "7000 characters"),
        (CHAT, {"messages": HELLO * 513}, "messages", "513 messages"),
        (COMPLETIONS, {"prompt": "a" * 7000}, "prompt", "7000 characters"),
        (COMPLETIONS, {"prompt": [5] * 513}, "prompt", "513 tokens"),
        (CHAT, {"prediction": {"type": "content", "content": "a" * 7000}}, "prediction", "7000 characters"),
    ],
    ids=["chat", "messages", "text", "token-ids", "prediction"],
)
def test_a_prompt_that_cannot_fit_is_refused_by_the_gateway_without_asking_verify(client, verify_server, route, fields, param, what):
    """The bound verify reports (its context times its longest token, 512 x 13 characters for the tiny
    pair): such a prompt costs its parsing, not a gRPC request of megabytes."""
    refused_by_verify = (
        verify_server.servicer.metrics.registry.get_sample_value("specdec_requests_total", {"code": "INVALID_ARGUMENT"}) or 0
    )
    body = {**BASE, **fields} if route == CHAT else {"model": "target", "max_tokens": 4, **fields}
    error = assert_openai_error(client.post(route, json=body), 400, param=param)
    assert error["message"].startswith(f"{param}: {what}") and "512 tokens" in error["message"], error
    assert (
        verify_server.servicer.metrics.registry.get_sample_value("specdec_requests_total", {"code": "INVALID_ARGUMENT"}) or 0
    ) == refused_by_verify


def test_a_body_no_fitting_prompt_needs_is_refused_from_its_length_before_it_is_read(client, gateway_url):
    """Tiny pair: 512 x 13 characters fit, so no request that can be served has more than
    largest_useful_body(6656) bytes; a longer declared body gets 413 from its headers alone (the
    client here never sends the rest), while one just under the bound is read and served."""
    useful = largest_useful_body(512 * 13)
    assert useful < 4 * 1024 * 1024  # under serving.max_body_bytes: this bound, not that one, refuses it
    client.get("/v1/models").raise_for_status()  # the gateway learns verify's bound
    reply = declared_body_reply(gateway_url, useful + 1, b'{"model": "target"')
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"request_too_large" in reply and b"shorten the prompt" in reply
    # A client that sends the whole body still reads the answer (not a reset connection).
    huge = json.dumps({**BASE, "messages": [{"role": "user", "content": "hello " * 650_000}]}).encode()
    for _ in range(3):
        assert_openai_error(client.post(CHAT, content=huge, headers={"Content-Type": "application/json"}), 413)
    padded = json.dumps(BASE).encode() + b" " * (useful - len(json.dumps(BASE)))
    assert len(padded) == useful
    assert client.post(CHAT, content=padded, headers={"Content-Type": "application/json"}).status_code == 200


@pytest.mark.parametrize(
    "bias",
    [
        {" 5": 1},
        {"5 ": 1},
        {"٣": 1},
        {"+5": 1},
        {"1_0": 1},
        {"0x5": 1},
        {"": 1},
        {"9" * 5000: 1},  # keys: decimal token ids only
        {"5": "10"},
        {"5": True},
        {"5": None},
        {"5": [1]},  # biases: JSON numbers only, never coerced
    ],
)
def test_logit_bias_is_parsed_strictly(client, bias):
    error = assert_openai_error(client.post(CHAT, json={**BASE, "logit_bias": bias}), 400)
    assert error["param"].startswith("logit_bias"), error


def test_logit_bias_takes_integer_and_float_biases(client):
    assert client.post(CHAT, json={**BASE, "logit_bias": {"5": 10, "7": -2.5, "0": 0}}).status_code == 200


def test_an_unenforceable_forced_tool_is_a_short_400_that_does_not_echo_the_schemas(client):
    """The forced call's grammar holds every tool's schema; llguidance quotes its failing line."""
    properties = {f"field_{index}": {"type": "string", "pattern": "^(?=a)a$"} for index in range(100)}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": properties}}}
    body = {**BASE, "tools": [tool], "tool_choice": "required"}
    error = assert_openai_error(client.post(CHAT, json=body), 400, param="tool_choice")
    assert "look-around" in error["message"] and "field_1" not in error["message"] and len(error["message"]) < 400, error
