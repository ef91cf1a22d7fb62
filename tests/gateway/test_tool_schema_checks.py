"""Large tool schemas cost the event loop nothing: their total size is capped before any meta-schema
check, and the meta-schema checks run on the gateway's bounded check workers. Meanwhile /health
answers at once (issue 28: 128 tools of 300 properties held /health for 16-19 s)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from service_support import CHAT, assert_openai_error

from gateway.tool_protocol import MAX_TOOL_SCHEMA_CHARS
from specdec.limits import MAX_TOOLS

# NOTE: a bound on the loop's stall, not a speed goal: the checks hold the GIL in their workers, and on CI's loaded
# 2 cores /health once took 0.6 s; the bug this guards against held it for 16-19 s.
HEALTH_WITHIN_S = 2.0
ASK = [{"role": "user", "content": "hi"}]


def tool(index: int, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": f"t{index}", "parameters": parameters}}


def over_the_cap() -> list[dict]:
    """128 tools of 300 string properties: about 1 MB of schemas."""
    properties = {f"p{number}": {"type": "string"} for number in range(300)}
    return [tool(index, {"type": "object", "properties": properties}) for index in range(MAX_TOOLS)]


def slow_to_check_under_the_cap() -> list[dict]:
    """Just under the cap, in the shape the meta-schema check is slowest on (seconds on its own),
    with the last tool's last property invalid: every schema is checked before the refusal."""
    per_tool = MAX_TOOL_SCHEMA_CHARS // MAX_TOOLS - 60
    count = per_tool // len(json.dumps({"p000": {"items": {"items": {}}}}))
    properties = {f"p{number}": {"items": {"items": {}}} for number in range(count)}
    tools = [tool(index, {"type": "object", "properties": properties}) for index in range(MAX_TOOLS)]
    tools[-1]["function"]["parameters"] = {"type": "object", "properties": {**properties, "bad": {"type": "strin"}}}
    assert MAX_TOOL_SCHEMA_CHARS * 0.9 < sum(len(json.dumps(t["function"]["parameters"])) for t in tools) <= MAX_TOOL_SCHEMA_CHARS
    return tools


# With tool_choice "none" the tools are not rendered into the prompt (so the tiny pair's context does not
# refuse them from their length first), and their schemas are still checked.
@pytest.mark.parametrize(
    ("tools", "choice", "param"),
    [
        (over_the_cap, "auto", "tools"),
        (slow_to_check_under_the_cap, "none", f"tools.{MAX_TOOLS - 1}.function.parameters"),
        (slow_to_check_under_the_cap, "auto", "tools"),
    ],
    ids=["over-the-cap", "checked-under-the-cap", "too-long-for-the-context"],
)
def test_health_answers_while_large_tool_schemas_are_refused(gateway_url, tools, choice, param):
    body = {"model": "target", "messages": ASK, "max_tokens": 2, "tools": tools(), "tool_choice": choice}
    answer: dict[str, httpx.Response] = {}

    def send() -> None:
        answer["big"] = httpx.post(f"{gateway_url}{CHAT}", json=body, timeout=120)

    sender = threading.Thread(target=send)
    sender.start()
    slowest = 0.0
    with httpx.Client(base_url=gateway_url, timeout=120) as client:
        while sender.is_alive():
            started = time.perf_counter()
            assert client.get("/health").status_code == 200
            slowest = max(slowest, time.perf_counter() - started)
            time.sleep(0.02)
    sender.join()
    assert slowest < HEALTH_WITHIN_S, f"/health took {slowest:.2f}s while the tools were checked"
    error = assert_openai_error(answer["big"], 400, param=param)
    assert len(error["message"]) < 1000  # names the problem; does not echo the schemas


def test_a_bad_tool_schema_is_still_a_400_naming_it_after_good_ones(gateway_url):
    good = {"type": "object", "properties": {"a": {"type": "string"}}}
    tools = [tool(0, good), tool(1, good), tool(2, good), tool(3, {"type": "object", "properties": {"a": {"minLength": -1}}})]
    response = httpx.post(f"{gateway_url}{CHAT}", json={"model": "target", "messages": ASK, "max_tokens": 2, "tools": tools}, timeout=30)
    error = assert_openai_error(response, 400, param="tools.3.function.parameters")
    assert "properties/a/minLength" in error["message"]
