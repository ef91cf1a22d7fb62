"""OpenAI request and response models (chat completions, completions, models, errors)."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from gateway.tool_protocol import FunctionTool, ToolCall, ToolChoice, check_tool_choice, check_tools
from specdec.errors import InvalidRequestError
from specdec.fields import (
    ACCEPTANCE,
    SPECULATION_POLICY,
    FrequencyPenalty,
    MaxTokens,
    MinP,
    MinTokens,
    NumDraftTokens,
    PresencePenalty,
    RepetitionPenalty,
    Seed,
    Temperature,
    TokenId,
    TopK,
    TopLogprobs,
    TopP,
)
from specdec.limits import CHAT_ROLES, INT32_MAX, MAX_STOP_CHARS, MAX_STOP_SEQUENCES, MAX_TOOLS


def _encodable(value):
    """`value` (a string, a list of strings or of text parts, or None), refused if it holds a lone
    surrogate: JSON can carry "\\ud800", no UTF-8 encoder accepts it, and failing later while
    encoding the gRPC request or the response would be a 500 instead of a 400 naming the field."""
    texts = value if isinstance(value, list) else [value]
    for text in texts:
        text = text.text if isinstance(text, TextPart) else text
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("must be valid Unicode text (it holds a lone surrogate)") from None
    return value


class _Request(BaseModel):
    # Nothing is silently ignored: a field this server does not know is a 400 naming it, as OpenAI's own
    # API answers; fields it does not honour are accepted only with the value that asks for nothing
    # (NO_OP_VALUES). Harmless no-ops (user, store, metadata, ...) are declared and listed in the README.
    model_config = ConfigDict(extra="forbid")


# Fields accepted only with these values (what this server does anyway); anything else is a 400 naming the field.
NO_OP_VALUES: dict[str, tuple] = {
    "functions": (None, []),
    "function_call": (None, "none"),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "reasoning_effort": (None,),
    "verbosity": (None,),
    "web_search_options": (None,),
    "suffix": (None, ""),
    "refusal": (None,),
    "annotations": (None, []),
}


def _only_no_op(value, info):
    allowed = NO_OP_VALUES[info.field_name]
    if value not in allowed:
        shown = " or ".join(json.dumps(item) for item in allowed)
        raise ValueError(f"{info.field_name} is not supported by this server (accepted only as {shown})")
    return value


class SpeculativeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None
    num_draft_tokens: NumDraftTokens | None = None
    acceptance: Literal[ACCEPTANCE.choices] | None = None
    # always: draft every round whatever the server's load-aware policy says (fallback still applies)
    policy: Literal[SPECULATION_POLICY.choices] | None = None
    provenance: bool = Field(
        False, description="each choice says where its tokens came from (draft, lookup, prediction, target) and their round"
    )


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False
    continuous_usage_stats: bool = Field(False, description="extension (as vLLM): every chunk carries usage, the counts so far")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal[CHAT_ROLES]
    content: str | list[TextPart] | None = None
    name: str | None = None  # accepted; rendered for tool results only
    tool_calls: list[ToolCall] | None = Field(None, description="role assistant: the calls a response made")
    tool_call_id: str | None = Field(None, validate_default=True, description="role tool: the call this result answers")
    # What an assistant message of a response carries back when resent: accepted empty only.
    refusal: Any = None
    function_call: Any = None
    audio: Any = None
    annotations: Any = None

    _valid_text = field_validator("content", "name", "tool_call_id")(_encodable)
    _not_honoured = field_validator("refusal", "function_call", "audio", "annotations")(_only_no_op)

    @field_validator("tool_calls")
    @classmethod
    def _assistant_calls(cls, value: list[ToolCall] | None, info) -> list[ToolCall] | None:
        if value and info.data.get("role") != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        return value

    @field_validator("tool_call_id")
    @classmethod
    def _tool_result(cls, value: str | None, info) -> str | None:
        if info.data.get("role") == "tool" and not value:
            raise ValueError("a tool message needs the id of the call it answers")
        return value

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class JsonSchemaFormat(BaseModel):
    name: str = Field(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    schema_: Any = Field(default_factory=dict, alias="schema")
    strict: bool | None = None  # the schema is always enforced in full (what the engine cannot enforce is refused)


class ResponseFormat(BaseModel):
    """OpenAI's response_format (text, json_object, json_schema); regex, choice and grammar (Lark) are extensions."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text", "json_object", "json_schema", "regex", "choice", "grammar"]
    json_schema: JsonSchemaFormat | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None

    def as_dict(self) -> dict:
        return self.model_dump(by_alias=True, exclude_none=True)


class PredictionContent(BaseModel):
    """OpenAI predicted outputs: text the output is expected to mostly repeat (drafted from first)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["content"]
    content: str | list[TextPart]

    _valid_text = field_validator("content")(_encodable)

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


_TOKEN_ID_KEY = re.compile(r"[0-9]{1,10}")  # ASCII digits only: str.isdigit() takes "٣", int() takes " 5"


def _logit_bias(value: dict[str, float] | None) -> dict[int, float] | None:
    """JSON keys are strings: each must be a token id in decimal digits; each bias in [-100, 100]."""
    if value is None:
        return None
    bias = {}
    for key, amount in value.items():
        if not _TOKEN_ID_KEY.fullmatch(key) or int(key) > INT32_MAX:
            raise ValueError(f"keys must be token ids (non-negative integers), got {key!r}")
        if not -100.0 <= amount <= 100.0:
            raise ValueError(f"the bias of token {key} is {amount}; it must be in [-100, 100]")
        bias[int(key)] = amount
    return bias


class _SamplingRequest(_Request):
    model: str
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = Field(None, description="extension: 0 = off")
    min_p: MinP | None = Field(None, description="extension")
    seed: Seed | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1)
    speculative: SpeculativeOptions | None = None
    frequency_penalty: FrequencyPenalty | None = None
    presence_penalty: PresencePenalty | None = None
    repetition_penalty: RepetitionPenalty | None = None
    # strict: a JSON number (an integer too), never "10" or true
    logit_bias: dict[str, Annotated[float, Field(strict=True, allow_inf_nan=False)]] | None = None
    # vLLM's extensions (load tools such as guidellm and aiperf send them); both lossless under speculation.
    ignore_eos: bool = Field(False, description="extension (as vLLM): EOS does not end the output; max_tokens or a stop string does")
    min_tokens: MinTokens = Field(
        0,
        description="extension (as vLLM): EOS is banned and stop strings are not looked for "
        "until this many tokens are generated; at most max_tokens",
    )
    # Harmless no-ops, accepted and listed in the README: nothing is stored, nothing is billed.
    user: str | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    response_format: ResponseFormat | None = None  # structured outputs (docs/structured-outputs.md); an extension on completions
    # The grammar built from response_format (specdec.constraints), set by the gateway off the event loop.
    _grammar: str | None = PrivateAttr(None)
    _draft_scope: str = PrivateAttr("")  # the caller's API key id: whose earlier outputs may draft (suffix decoding)

    _valid_text = field_validator("model", "user", "stop")(_encodable)
    _valid_bias = field_validator("logit_bias")(_logit_bias)

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str]:
        stops = [] if value is None else [value] if isinstance(value, str) else value
        if len(stops) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
        if any(len(stop) > MAX_STOP_CHARS for stop in stops):
            raise ValueError(f"each stop sequence has at most {MAX_STOP_CHARS} characters")
        return stops

    @model_validator(mode="after")
    def _min_tokens_fit(self) -> _SamplingRequest:
        limit = self.requested_max_tokens
        if limit is not None and self.min_tokens > limit:
            # InvalidRequestError, not ValueError: pydantic would name the whole request, not the field
            raise InvalidRequestError("min_tokens", f"min_tokens ({self.min_tokens}) must be at most max_tokens ({limit})")
        return self

    @property
    def grammar(self) -> str | None:
        return self._grammar


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: MaxTokens | None = Field(None, description="unset: to the end of the context")
    max_completion_tokens: MaxTokens | None = None
    logprobs: bool = False
    top_logprobs: TopLogprobs | None = None
    prediction: PredictionContent | None = None
    tools: list[FunctionTool] | None = Field(None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice | None = Field(None, description='default "auto" with tools, else "none"')
    parallel_tool_calls: bool = Field(True, description="false: at most one call per choice")
    _tools_json: str | None = PrivateAttr(None)  # gateway/upstream.py tools_json, computed once
    # Not honoured: accepted only as NO_OP_VALUES says.
    functions: Any = None
    function_call: Any = None
    modalities: Any = None
    audio: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    web_search_options: Any = None

    _not_honoured = field_validator(
        "functions", "function_call", "modalities", "audio", "reasoning_effort", "verbosity", "web_search_options"
    )(_only_no_op)
    _unique_tools = field_validator("tools")(check_tools)

    @field_validator("tool_choice")
    @classmethod
    def _known_function(cls, value: ToolChoice | None, info) -> ToolChoice | None:
        return check_tool_choice(value, info.data.get("tools"))

    @model_validator(mode="after")
    def _results_answer_calls(self) -> ChatCompletionRequest:
        """As OpenAI: a tool message answers a call an earlier assistant message made."""
        made: set[str] = set()
        for index, message in enumerate(self.messages):
            made.update(call.id for call in message.tool_calls or [])
            if message.role == "tool" and message.tool_call_id not in made:
                # InvalidRequestError, not ValueError: pydantic would name the whole request, not the field
                raise InvalidRequestError(
                    f"messages.{index}.tool_call_id", f"{message.tool_call_id!r} answers no tool call of an earlier assistant message"
                )
        return self

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def active_tools(self) -> list[FunctionTool]:
        """The tools rendered into the prompt and parsed out of the output: none with tool_choice "none"."""
        return [] if self.tool_choice == "none" else list(self.tools or [])


class CompletionRequest(_SamplingRequest):
    prompt: str | list[str] | list[TokenId]
    max_tokens: MaxTokens | None = 16
    logprobs: TopLogprobs | None = None
    echo: bool = False
    best_of: int | None = Field(None, ge=1)
    suffix: Any = None

    _valid_prompt = field_validator("prompt")(_encodable)
    _not_honoured = field_validator("suffix")(_only_no_op)

    @field_validator("best_of")
    @classmethod
    def _best_of_is_n(cls, value: int | None, info) -> int | None:
        if value is not None and value != info.data.get("n", 1):
            raise ValueError("best_of is not supported by this server (accepted only equal to n: every choice generated is returned)")
        return value

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value):
        if isinstance(value, list) and value and isinstance(value[0], str):
            if len(value) != 1:
                raise ValueError("send one prompt per request (a list of strings must have exactly one)")
            return value[0]
        if isinstance(value, list) and not value:
            raise ValueError("must not be empty")
        return value

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, value: bool) -> bool:
        if value:
            raise ValueError("echo is not supported")
        return value

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_tokens


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now)
    owned_by: str = "specdec"
    max_model_len: int | None = Field(None, description="extension (as vLLM): the model's context in tokens, prompt included")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
