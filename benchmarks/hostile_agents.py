"""Hostile agent clients for hostile_load.py --hostile agent: each loops until `deadline` over the
requests that used to break a constraint or stall a service, counting what it got in `tally`.

- HTTP, through the gateway: pathological response formats (a lexer blow-up, a nested-repeat
  pattern, a self-referencing schema, 5,000 properties), and big tool lists (128 tools of 300
  properties: 1.07 MB, refused by size before any schema check; 128 tools of 15 properties, under
  the size cap, checked against the meta-schema and forced). Expected: 400 (413 for a body larger than
  any request the model's context fits), or 429 while full.
- gRPC, straight to the services: a 3.6 MB Lark grammar to verify's Generate and a 5,000-property
  schema to the draft's Propose. Expected: INVALID_ARGUMENT (or RESOURCE_EXHAUSTED while full).
"""

from __future__ import annotations

import collections
import itertools
import json
import time

import grpc
import httpx

from specdec.cli.client import generation_options
from specdec.constraints.grammars import json_schema_grammar
from specdec.v1 import draft_pb2, draft_pb2_grpc, verify_pb2, verify_pb2_grpc

PROMPT = [{"role": "user", "content": "Answer in JSON."}]
GRPC_CASES = ("grpc_verify_3mb_lark", "grpc_draft_5000_properties")


def _tool(index: int, properties: int) -> dict:
    schema = {"type": "object", "properties": {f"field_{i}": {"type": "string", "description": "a value"} for i in range(properties)}}
    return {"type": "function", "function": {"name": f"tool_{index}", "parameters": schema}}


def _schema_format(schema: dict) -> dict:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


def agent_bodies() -> dict[str, dict]:
    """The hostile HTTP requests by name (chat bodies, max_tokens 8); GRPC_CASES are the other ones."""
    cases = {
        "regex_blowup": {"response_format": {"type": "regex", "regex": "a{1000000}"}},
        "pattern_blowup": _schema_format(
            {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a{1000}){1000}$"}}, "required": ["code"]}
        ),
        "self_ref": _schema_format({"$ref": "#"}),
        "5000_properties": _schema_format({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}),
        "128_big_tools": {"tools": [_tool(i, 300) for i in range(128)], "tool_choice": "required"},
        "128_tools_forced": {"tools": [_tool(i, 15) for i in range(128)], "tool_choice": "required"},
    }
    return {name: {"model": "target", "messages": PROMPT, "max_tokens": 8, **fields} for name, fields in cases.items()}


async def agent_requests(url: str, deadline: float, tally: collections.Counter, cases: frozenset[str]) -> None:
    bodies = [(name, json.dumps(body).encode()) for name, body in agent_bodies().items() if name in cases]
    if not bodies:
        return
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for name, body in itertools.cycle(bodies):
            if time.monotonic() >= deadline:
                return
            started = time.perf_counter()
            reply = await client.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
            tally["agent_seconds"] += time.perf_counter() - started
            param = reply.json().get("error", {}).get("param") if reply.status_code != 200 else None
            tally[f"agent_{name}_{reply.status_code}_{param}"] += 1


def _big_lark() -> str:
    return "start: " + " | ".join(json.dumps(f"word{i}") for i in range(300_000))  # ~3.6 MB


def grpc_grammars(verify_address: str, draft_address: str, deadline: float, tally: collections.Counter, cases: frozenset[str]) -> None:
    """Big grammars straight to verify and the draft, alternately (blocking: run it in a thread)."""
    options = generation_options("Hello", max_tokens=4)
    options.grammar = _big_lark()
    generate = verify_pb2.GenerateRequest(options=options)
    schema = json_schema_grammar({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}, "schema")
    opening = draft_pb2.ProposeRequest(open=draft_pb2.ProposeOpen(prompt_ids=[1, 2, 3], vocab_size=512, num_draft_tokens=2, grammar=schema))
    with grpc.insecure_channel(verify_address) as verify, grpc.insecure_channel(draft_address) as draft:
        calls = {
            "grpc_verify_3mb_lark": lambda: list(verify_pb2_grpc.VerifyServiceStub(verify).Generate(generate, timeout=60)),
            "grpc_draft_5000_properties": lambda: list(draft_pb2_grpc.DraftServiceStub(draft).Propose(iter([opening]), timeout=60)),
        }
        calls = {name: call for name, call in calls.items() if name in cases}
        for name, call in itertools.cycle(calls.items()) if calls else ():
            if time.monotonic() >= deadline:
                return
            started = time.perf_counter()
            try:
                call()
                tally[f"{name}_OK"] += 1
            except grpc.RpcError as error:
                tally[f"{name}_{error.code().name}"] += 1
            tally["grpc_seconds"] += time.perf_counter() - started


def agent_failures(tally: collections.Counter) -> list[str]:
    """What in `tally` is not an explicit refusal: a 200 to a request that cannot be served, a 5xx, an unexpected status."""
    bad = []
    for outcome, count in tally.items():
        if outcome.endswith("_seconds"):
            continue
        refused = outcome.startswith("agent_") and any(f"_{status}_" in outcome for status in (400, 413, 429))
        refused_grpc = outcome.startswith("grpc_") and outcome.endswith(("_INVALID_ARGUMENT", "_RESOURCE_EXHAUSTED"))
        forced_ok = outcome.startswith("agent_128_tools_forced_200")  # a valid request: served
        if not (refused or refused_grpc or forced_ok):
            bad.append(f"{count:g} x {outcome}")
    return bad
