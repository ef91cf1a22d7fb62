"""Structured outputs through the real stack with the official `openai` client: the tiny pair and SmolLM2.

Every output parses and validates against its schema with finish_reason "stop", streamed or not;
`chat.completions.parse` with a pydantic model; bad schemas are 400s naming the field. JSON mode is
asserted on SmolLM2 only: the tiny pair's random weights write an unbounded JSON object's first
string forever (a bounded schema is what makes them finish).
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from conftest import GatewayThread, start_draft_server, start_verify_server
from openai import BadRequestError, OpenAI
from pydantic import BaseModel, Field
from service_support import assert_openai_error

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "count", "tags"],
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "count": {"type": "integer", "minimum": 0, "maximum": 999},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    },
}
MESSAGES = [{"role": "user", "content": "Describe a fruit as JSON with a name, a count and colour tags."}]
JSON_SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "fruit", "schema": SCHEMA, "strict": True}}


class Fruit(BaseModel):
    name: str = Field(max_length=8)
    count: int = Field(ge=0, le=999)


@pytest.fixture(scope="module")
def client(gateway_url):
    return OpenAI(base_url=f"{gateway_url}/v1", api_key="unused", max_retries=0)


def _check(response_format: dict, content: str) -> dict:
    document = json.loads(content)
    if response_format["type"] == "json_schema":
        jsonschema.validate(document, response_format["json_schema"]["schema"])
    assert isinstance(document, dict)
    return document


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "seed": 5}, {"temperature": 0.8, "seed": 11}])
def test_json_schema_outputs_parse_validate_and_stop(client, sampling):
    response = client.chat.completions.create(
        model="target", messages=MESSAGES, max_tokens=200, response_format=JSON_SCHEMA_FORMAT, **sampling
    )
    choice = response.choices[0]
    _check(JSON_SCHEMA_FORMAT, choice.message.content)
    assert choice.finish_reason == "stop"
    assert response.model_extra["speculative"]["draft_tokens"] > 0  # speculation was on


def test_streamed_deltas_assemble_into_the_non_streamed_document(client):
    common = {
        "model": "target",
        "messages": MESSAGES,
        "max_tokens": 200,
        "temperature": 0.9,
        "seed": 3,
        "response_format": JSON_SCHEMA_FORMAT,
        "extra_body": {"speculative": {"acceptance": "coupled"}},
    }
    full = client.chat.completions.create(**common).choices[0].message.content
    chunks = list(client.chat.completions.create(**common, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == full
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    _check(JSON_SCHEMA_FORMAT, full)


def test_speculation_on_and_off_give_the_same_document(client):
    common = {"model": "target", "messages": MESSAGES, "max_tokens": 200, "temperature": 0, "response_format": JSON_SCHEMA_FORMAT}
    on = client.chat.completions.create(**common, extra_body={"speculative": {"enabled": True}}).choices[0].message.content
    off = client.chat.completions.create(**common, extra_body={"speculative": {"enabled": False}}).choices[0].message.content
    assert on == off


def test_parse_with_a_pydantic_model(client):
    completion = client.chat.completions.parse(model="target", messages=MESSAGES, max_tokens=200, temperature=0, response_format=Fruit)
    message = completion.choices[0].message
    assert isinstance(message.parsed, Fruit) and completion.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    "schema, reason",
    [
        ({"type": "objectx"}, "Invalid type"),
        ({"type": "string", "pattern": "(?<=a)b"}, "look-around"),
    ],
)
def test_bad_and_unenforceable_schemas_are_400s_naming_the_schema(client, schema, reason):
    response_format = {"type": "json_schema", "json_schema": {"name": "bad", "schema": schema}}
    with pytest.raises(BadRequestError) as caught:
        client.chat.completions.create(model="target", messages=MESSAGES, max_tokens=5, response_format=response_format)
    assert caught.value.param == "response_format.json_schema.schema" and reason in caught.value.message


def test_unknown_response_format_type_is_a_400(gateway_url):
    body = {"model": "target", "messages": MESSAGES, "max_tokens": 5, "response_format": {"type": "yaml"}}
    assert_openai_error(httpx.post(f"{gateway_url}/v1/chat/completions", json=body, timeout=30), 400, "response_format.type")


# --- SmolLM2-135M-Instruct with its own Q4_1 GGUF as the draft (the default pair, as `specdec up` runs it)


@pytest.fixture(scope="module")
def smollm2_client(service_loop):
    from draft_service.servicer import LoadedDrafter  # noqa: F401 -- start_draft_server wraps the drafter in it
    from specdec.default_models import default_draft_gguf, ensure_default_target, models_dir
    from specdec.drafters.gguf import GgufDrafter
    from specdec.engines.gguf_model import GgufOptions, load_gguf
    from specdec.engines.hf import load_model

    target = load_model(str(ensure_default_target(models_dir())), device="cpu", dtype="float32")
    draft_model = load_gguf(default_draft_gguf(models_dir()), GgufOptions(threads=2, context_tokens=4096, max_sequences=4, device="cpu"))
    draft = start_draft_server(service_loop, GgufDrafter(draft_model), draft_model)
    verify = start_verify_server(service_loop, target, f"127.0.0.1:{draft.port}")
    from specdec.serving.config import SpecdecConfig

    gateway = GatewayThread(SpecdecConfig(serving={"verify_endpoint": f"127.0.0.1:{verify.port}", "served_model_name": "smollm2"}))
    yield OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    gateway.stop()
    service_loop.run(verify.stop(0))
    service_loop.run(draft.stop(0))
    draft_model.close()


@pytest.mark.parametrize("response_format", [JSON_SCHEMA_FORMAT, {"type": "json_object"}], ids=["json_schema", "json_object"])
@pytest.mark.parametrize("stream", [False, True])
def test_smollm2_structured_outputs_validate_and_stop(smollm2_client, response_format, stream):
    # Coupled: the sample is the seed's, whatever the draft proposed (with rejection it follows the draft's
    # timing, and under load a sample ran past max_tokens inside a string).
    common = {
        "model": "smollm2",
        "messages": MESSAGES,
        "max_tokens": 160,
        "temperature": 0.7,
        "seed": 1,
        "response_format": response_format,
        "extra_body": {"speculative": {"acceptance": "coupled"}},
    }
    if stream:
        chunks = list(smollm2_client.chat.completions.create(**common, stream=True))
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    else:
        choice = smollm2_client.chat.completions.create(**common).choices[0]
        content, finish = choice.message.content, [choice.finish_reason]
    _check(response_format, content)
    assert finish == ["stop"]


def test_smollm2_parse_with_a_pydantic_model(smollm2_client):
    completion = smollm2_client.chat.completions.parse(
        model="smollm2", messages=MESSAGES, max_tokens=160, temperature=0, response_format=Fruit
    )
    assert isinstance(completion.choices[0].message.parsed, Fruit) and completion.choices[0].finish_reason == "stop"
