"""Proto messages <-> the request fields of specdec/fields.py: where each field travels, its modes'
proto enums, the candidates' sources. Torch-free: the gateway and the Python client build their
requests with it; the conversions to the core's tensor-holding types are specdec/model_services/blocks.py.
"""

from __future__ import annotations

import hashlib
from enum import Enum
from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor_pool

from specdec.enums import AcceptanceMode, SpeculationPolicy, TokenSource
from specdec.errors import InvalidRequestError
from specdec.fields import ACCEPTANCE, PENALTIES, SAMPLING, SPECULATION_POLICY, Mode, RequestField
from specdec.v1 import common_pb2, verify_pb2  # noqa: F401 -- registers the enums mode_number looks up

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from specdec.penalties import Penalties
    from specdec.sampling import SamplingParams

_SOURCE_TO_PROTO = {
    TokenSource.TARGET: common_pb2.TOKEN_SOURCE_TARGET,
    TokenSource.DRAFT: common_pb2.TOKEN_SOURCE_DRAFT,
    TokenSource.LOOKUP: common_pb2.TOKEN_SOURCE_LOOKUP,
    TokenSource.PREDICTION: common_pb2.TOKEN_SOURCE_PREDICTION,
    TokenSource.SUFFIX: common_pb2.TOKEN_SOURCE_SUFFIX,
}


def mode_number(mode: Mode, value: Enum | str) -> int:
    """The proto enum number of `value` (a member of mode.enum, or its value)."""
    member = mode.enum(value)
    enum = descriptor_pool.Default().FindEnumTypeByName(mode.proto_enum)
    return enum.values_by_name[mode.proto_prefix + member.name].number


def mode_from_number(mode: Mode, number: int, field: str) -> Enum | None:
    """The member a proto enum number names (mode.unspecified for 0); unknown numbers are refused naming `field`."""
    enum = descriptor_pool.Default().FindEnumTypeByName(mode.proto_enum)
    value = enum.values_by_number.get(number)
    if value is None:
        raise InvalidRequestError(field, f"unknown {mode.proto_prefix.rstrip('_').replace('_', ' ').lower()} {number}")
    if number == 0:
        return mode.unspecified
    return mode.enum[value.name.removeprefix(mode.proto_prefix)]


def acceptance_from_proto(value: int, field: str = "acceptance") -> AcceptanceMode | None:
    return mode_from_number(ACCEPTANCE, value, field)


def acceptance_to_proto(mode: AcceptanceMode | str) -> int:
    return mode_number(ACCEPTANCE, mode)


def policy_from_proto(value: int, field: str = "speculation_policy") -> SpeculationPolicy:
    return mode_from_number(SPECULATION_POLICY, value, field)


def source_to_proto(source: TokenSource) -> int:
    return _SOURCE_TO_PROTO[source]


def set_field(message: Message, field: RequestField, value: Any, root: str = "") -> None:
    """Put `value` where `field` travels, below `message` (a GenerateRequest; or the message at
    `root`, e.g. "options" for GenerationOptions). A mode takes its member or value, a repeated field
    a list (a lone string too), a map a dict."""
    path = field.proto.removeprefix(f"{root}.") if root else field.proto
    *parents, name = path.split(".")
    for part in parents:
        message = getattr(message, part)
    descriptor = message.DESCRIPTOR.fields_by_name[name]
    if field.mode is not None:
        value = mode_number(field.mode, value)
    if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
        getattr(message, name).update(value)
    elif descriptor.is_repeated:
        getattr(message, name).extend([value] if isinstance(value, str) else value)
    else:
        setattr(message, name, value)


def present_values(message: Message, fields: tuple[RequestField, ...]) -> dict[str, Any]:
    """{name: value} of the fields `message` (the fields' own message) carries; unset ones are left out."""
    return {field.name: getattr(message, field.proto_name) for field in fields if message.HasField(field.proto_name)}


def sampling_to_proto(params: SamplingParams) -> common_pb2.SamplingParams:
    return common_pb2.SamplingParams(**{field.name: getattr(params, field.name) for field in SAMPLING})


def penalties_to_proto(penalties: Penalties) -> common_pb2.Penalties:
    return common_pb2.Penalties(**{field.name: getattr(penalties, field.name) for field in PENALTIES}, logit_bias=penalties.logit_bias)


def vocab_fingerprint(tokenizer) -> str:
    """Two tokenizers with the same token -> id map have the same fingerprint."""
    items = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    digest = hashlib.sha256()
    for token, token_id in items:
        digest.update(f"{token_id}\t{token}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()
