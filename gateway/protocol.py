"""OpenAI request and response models (chat completions, completions, models, errors)."""

from __future__ import annotations

import time
import uuid
from typing import Literal

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from specdec.limits import MaxTokens, Seed, TokenId, TopK, TopLogprobs


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
    # Unknown fields are ignored, as OpenAI-compatible servers do; unsupported known ones are refused.
    model_config = ConfigDict(extra="ignore")


class SpeculativeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None
    num_draft_tokens: int | None = Field(None, ge=1, le=64)
    acceptance: Literal["rejection", "coupled"] | None = None
    # always: draft every round whatever the server's load-aware policy says (fallback still applies)
    policy: Literal["auto", "always"] | None = None
    provenance: bool = Field(False, description="each choice says where its tokens came from (draft, lookup, prediction, target) and their round")


class StreamOptions(BaseModel):
    include_usage: bool = False


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    _valid_text = field_validator("content", "name")(_encodable)

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


class _SamplingRequest(_Request):
    model: str
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: TopK | None = Field(None, description="extension: 0 = off")
    min_p: float | None = Field(None, ge=0.0, le=1.0, description="extension")
    seed: Seed | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1)
    user: str | None = None
    speculative: SpeculativeOptions | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    response_format: ResponseFormat | None = None
    # The grammar built from response_format (specdec.constraints), set by the gateway off the event loop.
    _grammar: str | None = PrivateAttr(None)

    _valid_text = field_validator("model", "user", "stop")(_encodable)

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str]:
        stops = [] if value is None else [value] if isinstance(value, str) else value
        if len(stops) > 16:
            raise ValueError("at most 16 stop sequences")
        return stops

    @property
    def grammar(self) -> str | None:
        return self._grammar

    @field_validator("frequency_penalty", "presence_penalty", "logit_bias")
    @classmethod
    def _unsupported(cls, value, info):
        if value:  # 0 / {} / null are the OpenAI defaults and change nothing
            raise ValueError(f"{info.field_name} is not supported: it would change the target model's distribution")
        return value


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: MaxTokens | None = None
    max_completion_tokens: MaxTokens | None = None
    logprobs: bool = False
    top_logprobs: TopLogprobs | None = None

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_SamplingRequest):
    prompt: str | list[str] | list[TokenId]
    max_tokens: MaxTokens | None = 16
    logprobs: TopLogprobs | None = None
    echo: bool = False

    _valid_prompt = field_validator("prompt")(_encodable)

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


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class SpeculativeStats(BaseModel):
    enabled: bool
    rounds: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    acceptance_rate: float = 0.0
    fallback: bool = False


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
