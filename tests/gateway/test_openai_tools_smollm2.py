"""Tool calls on the default pair (SmolLM2-135M-Instruct drafted by its own GGUF, behind prompt lookup)
through the gateway with the official `openai` client: forced calls validate, streamed and whole
answers agree, speculation changes nothing, and a role: tool round trip gets an answer."""

from __future__ import annotations

import json

import jsonschema
import pytest
from conftest import GatewayThread, start_draft_server, start_verify_server
from gguf_support import load_draft_gguf
from openai import OpenAI
from tool_support import streamed_choice

from specdec.bundled import bundled_model_path
from specdec.drafters.gguf import GgufDrafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.engines.hf import load_model
from specdec.serving.config import SpecdecConfig

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the current time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 40}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
GREEDY = {"model": "smollm2-135m-instruct", "max_tokens": 80, "temperature": 0, "tools": TOOLS}


@pytest.fixture(scope="module")
def client(service_loop, default_target_dir):
    gguf = load_draft_gguf(bundled_model_path("smollm2-135m-instruct"))
    draft = start_draft_server(service_loop, PromptLookupDrafter(GgufDrafter(gguf), LookupSettings(min_ngram=1)), gguf)
    target = load_model(str(default_target_dir), device="cpu", dtype="float32")
    verify = start_verify_server(service_loop, target, f"127.0.0.1:{draft.port}")
    gateway = GatewayThread(SpecdecConfig(serving={"verify_endpoint": f"127.0.0.1:{verify.port}"}))
    yield OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0, timeout=300)
    gateway.stop()
    service_loop.run(verify.stop(0))
    service_loop.run(draft.stop(0))
    gguf.close()


def calls(message) -> list[tuple[str, dict]]:
    return [(call.function.name, json.loads(call.function.arguments)) for call in message.tool_calls or []]


def validates(name: str, arguments: dict) -> bool:
    schema = next(tool["function"]["parameters"] for tool in TOOLS if tool["function"]["name"] == name)
    return jsonschema.Draft202012Validator(schema).is_valid(arguments)


@pytest.mark.parametrize(
    "tool_choice",
    ["required", {"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "function": {"name": "get_time"}}],
    ids=["required", "weather", "time"],
)
def test_forced_calls_validate_and_stream_into_the_same_call(client, tool_choice):
    whole = client.chat.completions.create(**GREEDY, messages=ASK, tool_choice=tool_choice).choices[0]
    assert whole.finish_reason == "tool_calls" and whole.message.content is None
    assert calls(whole.message) and all(validates(name, arguments) for name, arguments in calls(whole.message))
    if isinstance(tool_choice, dict):
        assert {name for name, _ in calls(whole.message)} == {tool_choice["function"]["name"]}
    streamed = streamed_choice(client, **GREEDY, messages=ASK, tool_choice=tool_choice)
    assert streamed.finish_reason == "tool_calls" and calls(streamed.message) == calls(whole.message)


def test_a_forced_call_is_the_same_with_speculation_off(client):
    on = client.chat.completions.create(**GREEDY, messages=ASK, tool_choice="required")
    off = client.chat.completions.create(**GREEDY, messages=ASK, tool_choice="required", extra_body={"speculative": {"enabled": False}})
    assert calls(on.choices[0].message) == calls(off.choices[0].message)
    # (a draft that misses its deadline on a loaded machine falls back: the output is the same either way)
    assert on.model_extra["speculative"]["enabled"] and off.model_extra["speculative"]["rounds"] == 0


def test_auto_streamed_and_whole_answers_agree(client):
    whole = client.chat.completions.create(**GREEDY, messages=ASK, tool_choice="auto").choices[0]
    streamed = streamed_choice(client, **GREEDY, messages=ASK, tool_choice="auto")
    assert streamed.message.content == whole.message.content and streamed.finish_reason == whole.finish_reason
    assert calls(streamed.message) == calls(whole.message)
    assert "<tool_call>" not in (whole.message.content or "")


def test_a_tool_result_round_trip_gets_an_answer(client):
    first = client.chat.completions.create(**GREEDY, messages=ASK, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = first.choices[0].message.tool_calls[0]
    messages = [
        *ASK,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"city": "Paris", "temperature": 21, "sky": "sunny"})},
    ]
    answer = client.chat.completions.create(**GREEDY, messages=messages, tool_choice="none").choices[0]
    assert answer.finish_reason in ("stop", "length") and answer.message.content and not answer.message.tool_calls
    assert client.chat.completions.create(**GREEDY, messages=messages).usage.prompt_tokens > first.usage.prompt_tokens
