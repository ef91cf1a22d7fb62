"""Each field of a generation request, each mode and each field's range, defined once: its type (range),
where it travels in verify's GenerateRequest, and what the OpenAI request calls it. The gateway's schema
(gateway/protocol.py) and its request builder (gateway/upstream.py), the Python client
(specdec/cli/client.py), the command line's choices, the gRPC conversion (specdec/serving/rpc/convert.py)
and the core's models (SamplingParams, Penalties, GenerationRequest, the config) read it; errors verify
names by their gRPC path are named back to HTTP clients through the same rows (http_name).

Torch-free and proto-free (the protos are named by path): the gateway and the core both import it.
docs/development.md walks through adding a field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Annotated

from pydantic import Field

from specdec.enums import AcceptanceMode, SpeculationPolicy, Verification
from specdec.limits import (
    INT32_MAX,
    MAX_DRAFT_TOKENS,
    MAX_REPETITION_PENALTY,
    MAX_TEMPERATURE,
    MAX_TOP_LOGPROBS,
    MIN_REPETITION_PENALTY,
    UINT32_MAX,
    UINT64_MAX,
)

# The ranges. Every integer bound fits the proto field that carries it (tests/gateway/test_field_ranges.py),
# so a value the schema accepts can always be put on the wire.
TopK = Annotated[int, Field(ge=0, le=INT32_MAX, description="0 disables top-k")]
TokenId = Annotated[int, Field(ge=0, le=INT32_MAX)]
Seed = Annotated[int, Field(ge=0, le=UINT64_MAX)]
MaxTokens = Annotated[int, Field(ge=1, le=UINT32_MAX)]
# vLLM's extension: stop tokens are banned until this many tokens are generated (specdec/min_tokens.py); at most max_tokens
MinTokens = Annotated[int, Field(ge=0, le=UINT32_MAX)]
TopLogprobs = Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)]
NumDraftTokens = Annotated[int, Field(ge=1, le=MAX_DRAFT_TOKENS)]
MinDraftTokens = Annotated[int, Field(ge=0, le=MAX_DRAFT_TOKENS)]  # 0 lets adaptive K stop drafting
Temperature = Annotated[float, Field(ge=0.0, le=MAX_TEMPERATURE, allow_inf_nan=False)]
TopP = Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)]
MinP = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
PresencePenalty = Annotated[float, Field(ge=-2.0, le=2.0, allow_inf_nan=False)]
FrequencyPenalty = PresencePenalty
RepetitionPenalty = Annotated[
    float,
    Field(
        ge=MIN_REPETITION_PENALTY, le=MAX_REPETITION_PENALTY, allow_inf_nan=False, description="extension (Hugging Face / CTRL); 1 = off"
    ),
]


@dataclass(frozen=True)
class Mode:
    """An enum a request names: its proto enum (values PREFIX_<MEMBER>) and what a client may ask for."""

    enum: type[Enum]
    proto_enum: str | None  # the proto enum's full name; None: not on the wire (a config setting)
    choices: tuple[str, ...]  # what the HTTP schema and the command line accept
    unspecified: Enum | None = None  # what the proto's 0 value means (None: the request names none)

    @property
    def proto_prefix(self) -> str:
        """The proto style guide's value prefix: AcceptanceMode -> ACCEPTANCE_MODE_."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", (self.proto_enum or "").rpartition(".")[2]).upper() + "_"


# greedy is not offered: it is what every mode runs at temperature 0, and is refused above it.
ACCEPTANCE = Mode(AcceptanceMode, "specdec.v1.AcceptanceMode", ("rejection", "coupled"))
SPECULATION_POLICY = Mode(SpeculationPolicy, "specdec.v1.SpeculationPolicy", ("auto", "always"), SpeculationPolicy.AUTO)
VERIFICATION = Mode(Verification, None, tuple(mode.value for mode in Verification))


@dataclass(frozen=True)
class RequestField:
    """One field: `name` is the core's (and the Python client's keyword), `proto` its path in
    GenerateRequest, `http` the OpenAI request's (dotted where nested; None: as `name`)."""

    name: str
    proto: str
    http: str | None = None
    mode: Mode | None = None

    @property
    def http_name(self) -> str:
        return self.http or self.name

    @property
    def message(self) -> str:
        """The proto message that holds it, as a path ("" for GenerateRequest itself)."""
        return self.proto.rpartition(".")[0]

    @property
    def proto_name(self) -> str:
        return self.proto.rpartition(".")[2]


def _group(path: str, *names: str) -> tuple[RequestField, ...]:
    return tuple(RequestField(name, f"{path}.{name}" if path else name) for name in names)


SAMPLING = _group("options.sampling", "temperature", "top_p", "top_k", "min_p")  # SamplingParams
PENALTIES = _group("options.penalties", "presence_penalty", "frequency_penalty", "repetition_penalty")  # Penalties
LOGIT_BIAS = RequestField("logit_bias", "options.penalties.logit_bias")  # a map: token id -> bias
OPTIONS = (
    *_group("options", "max_tokens", "seed", "stop", "ignore_eos", "min_tokens"),
    RequestField("grammar", "options.grammar", "response_format"),  # or tool_choice, for a forced call
    RequestField("acceptance", "options.acceptance", "speculative.acceptance", ACCEPTANCE),
)
SPECULATIVE = (  # the OpenAI request's `speculative` object (an extension)
    RequestField("speculative", "speculative", "speculative.enabled"),
    RequestField("num_draft_tokens", "num_draft_tokens", "speculative.num_draft_tokens"),
    RequestField("speculation_policy", "speculation_policy", "speculative.policy", SPECULATION_POLICY),
    RequestField("provenance", "provenance", "speculative.provenance"),
)
RESPONSE = _group("", "logprobs", "top_logprobs", "prediction", "request_id")
PROMPT = (  # one of three; the core calls it `prompt`, an HTTP chat `messages`
    RequestField("prompt", "options.chat.messages", "messages"),
    RequestField("text", "options.text", "prompt"),
    RequestField("token_ids", "options.token_ids", "prompt"),
    RequestField("tools_json", "options.chat.tools_json", "tools"),
)
FIELDS = (*SAMPLING, *PENALTIES, LOGIT_BIAS, *OPTIONS, *SPECULATIVE, *RESPONSE, *PROMPT)
BY_NAME = {field.name: field for field in FIELDS}

# verify's names for a field (its gRPC path, or the core's name) -> the OpenAI request's
HTTP_NAMES = {
    **{field.name: field.http_name for field in FIELDS},
    **{field.proto: field.http_name for field in FIELDS},
}


def http_name(field: str) -> str:
    """What the OpenAI request calls the field verify named (`field` itself where no row names it)."""
    return HTTP_NAMES.get(field, field)
