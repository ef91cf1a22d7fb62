"""Every integer the HTTP schema accepts fits the gRPC field that carries it to verify, so a request
the schema lets through can always be sent (never a 500 while the message is built); the ranges
come from one place, specdec/limits.py."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FieldDescriptor

from gateway.protocol import ChatCompletionRequest, CompletionRequest, SpeculativeOptions
from specdec.v1 import common_pb2, verify_pb2

WIRE_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
}
# (schema, property) -> the proto field that carries it
CARRIED = {
    (ChatCompletionRequest, "top_k"): (common_pb2.SamplingParams, "top_k"),
    (ChatCompletionRequest, "seed"): (verify_pb2.GenerationOptions, "seed"),
    (ChatCompletionRequest, "max_tokens"): (verify_pb2.GenerationOptions, "max_tokens"),
    (ChatCompletionRequest, "max_completion_tokens"): (verify_pb2.GenerationOptions, "max_tokens"),
    (ChatCompletionRequest, "top_logprobs"): (verify_pb2.GenerateRequest, "top_logprobs"),
    (ChatCompletionRequest, "min_tokens"): (verify_pb2.GenerationOptions, "min_tokens"),
    (CompletionRequest, "top_k"): (common_pb2.SamplingParams, "top_k"),
    (CompletionRequest, "seed"): (verify_pb2.GenerationOptions, "seed"),
    (CompletionRequest, "max_tokens"): (verify_pb2.GenerationOptions, "max_tokens"),
    (CompletionRequest, "logprobs"): (verify_pb2.GenerateRequest, "top_logprobs"),
    (CompletionRequest, "min_tokens"): (verify_pb2.GenerationOptions, "min_tokens"),
    (SpeculativeOptions, "num_draft_tokens"): (verify_pb2.GenerateRequest, "num_draft_tokens"),
}
NOT_CARRIED = {"n", "best_of"}  # choices: the gateway sends one request per choice (bounded by serving.max_n); best_of must equal n


def _integer_range(schema: dict, name: str) -> tuple[int | None, int | None]:
    prop = schema["properties"][name]
    options = [option for option in prop.get("anyOf", [prop]) if option.get("type") == "integer"]
    assert len(options) == 1, prop
    option = options[0]
    low = option.get("minimum", option["exclusiveMinimum"] + 1 if "exclusiveMinimum" in option else None)
    high = option.get("maximum", option["exclusiveMaximum"] - 1 if "exclusiveMaximum" in option else None)
    return low, high


@pytest.mark.parametrize(("model", "name"), list(CARRIED), ids=[f"{model.__name__}.{name}" for model, name in CARRIED])
def test_the_schema_range_fits_the_wire_type(model, name):
    message, field = CARRIED[(model, name)]
    low, high = _integer_range(model.model_json_schema(), name)
    wire_low, wire_high = WIRE_RANGES[message.DESCRIPTOR.fields_by_name[field].type]
    assert low is not None and high is not None, f"{model.__name__}.{name} needs both bounds"
    assert wire_low <= low <= high <= wire_high, (low, high, wire_low, wire_high)


def test_completion_token_ids_fit_int32():
    items = CompletionRequest.model_json_schema()["properties"]["prompt"]["anyOf"]
    integers = next(option["items"] for option in items if option.get("type") == "array" and option["items"].get("type") == "integer")
    assert (integers["minimum"], integers["maximum"]) == (0, 2**31 - 1)
    assert verify_pb2.TokenIds.DESCRIPTOR.fields_by_name["ids"].type == FieldDescriptor.TYPE_INT32


@pytest.mark.parametrize("model", [ChatCompletionRequest, CompletionRequest, SpeculativeOptions])
def test_every_integer_field_is_known_to_be_carried_or_not(model):
    """A new integer field must be added to CARRIED (with a range that fits) or NOT_CARRIED."""
    schema = model.model_json_schema()
    integers = {
        name for name, prop in schema["properties"].items() if any(option.get("type") == "integer" for option in prop.get("anyOf", [prop]))
    }
    assert integers <= {name for (owner, name) in CARRIED if owner is model} | NOT_CARRIED, integers
