from specdec.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SpeculationPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPECULATION_POLICY_UNSPECIFIED: _ClassVar[SpeculationPolicy]
    SPECULATION_POLICY_AUTO: _ClassVar[SpeculationPolicy]
    SPECULATION_POLICY_ALWAYS: _ClassVar[SpeculationPolicy]
SPECULATION_POLICY_UNSPECIFIED: SpeculationPolicy
SPECULATION_POLICY_AUTO: SpeculationPolicy
SPECULATION_POLICY_ALWAYS: SpeculationPolicy

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "tool_calls", "tool_call_id", "name")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    name: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ChatMessages(_message.Message):
    __slots__ = ("messages", "tools_json")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    tools_json: str
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., tools_json: _Optional[str] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerationOptions(_message.Message):
    __slots__ = ("text", "chat", "token_ids", "sampling", "seed", "stop", "max_tokens", "ignore_eos", "acceptance", "penalties", "grammar", "min_tokens")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTANCE_FIELD_NUMBER: _ClassVar[int]
    PENALTIES_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    text: str
    chat: ChatMessages
    token_ids: TokenIds
    sampling: _common_pb2.SamplingParams
    seed: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    max_tokens: int
    ignore_eos: bool
    acceptance: _common_pb2.AcceptanceMode
    penalties: _common_pb2.Penalties
    grammar: str
    min_tokens: int
    def __init__(self, text: _Optional[str] = ..., chat: _Optional[_Union[ChatMessages, _Mapping]] = ..., token_ids: _Optional[_Union[TokenIds, _Mapping]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., seed: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., max_tokens: _Optional[int] = ..., ignore_eos: _Optional[bool] = ..., acceptance: _Optional[_Union[_common_pb2.AcceptanceMode, str]] = ..., penalties: _Optional[_Union[_common_pb2.Penalties, _Mapping]] = ..., grammar: _Optional[str] = ..., min_tokens: _Optional[int] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("options", "speculative", "num_draft_tokens", "logprobs", "top_logprobs", "request_id", "speculation_policy", "provenance", "prediction", "draft_scope")
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SPECULATION_POLICY_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    DRAFT_SCOPE_FIELD_NUMBER: _ClassVar[int]
    options: GenerationOptions
    speculative: bool
    num_draft_tokens: int
    logprobs: bool
    top_logprobs: int
    request_id: str
    speculation_policy: SpeculationPolicy
    provenance: bool
    prediction: str
    draft_scope: str
    def __init__(self, options: _Optional[_Union[GenerationOptions, _Mapping]] = ..., speculative: _Optional[bool] = ..., num_draft_tokens: _Optional[int] = ..., logprobs: _Optional[bool] = ..., top_logprobs: _Optional[int] = ..., request_id: _Optional[str] = ..., speculation_policy: _Optional[_Union[SpeculationPolicy, str]] = ..., provenance: _Optional[bool] = ..., prediction: _Optional[str] = ..., draft_scope: _Optional[str] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ("token_id", "token", "logprob")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    token: str
    logprob: float
    def __init__(self, token_id: _Optional[int] = ..., token: _Optional[str] = ..., logprob: _Optional[float] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "token", "logprob", "top")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    token: str
    logprob: float
    top: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, token_id: _Optional[int] = ..., token: _Optional[str] = ..., logprob: _Optional[float] = ..., top: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class RoundStats(_message.Message):
    __slots__ = ("num_candidates", "num_accepted", "draft_ms", "target_ms", "transport_ms", "fallback")
    NUM_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    NUM_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DRAFT_MS_FIELD_NUMBER: _ClassVar[int]
    TARGET_MS_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_MS_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    num_candidates: int
    num_accepted: int
    draft_ms: float
    target_ms: float
    transport_ms: float
    fallback: bool
    def __init__(self, num_candidates: _Optional[int] = ..., num_accepted: _Optional[int] = ..., draft_ms: _Optional[float] = ..., target_ms: _Optional[float] = ..., transport_ms: _Optional[float] = ..., fallback: _Optional[bool] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "total_tokens", "accepted_prediction_tokens", "rejected_prediction_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_PREDICTION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_PREDICTION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    accepted_prediction_tokens: int
    rejected_prediction_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ..., accepted_prediction_tokens: _Optional[int] = ..., rejected_prediction_tokens: _Optional[int] = ...) -> None: ...

class SpeculativeSummary(_message.Message):
    __slots__ = ("enabled", "rounds", "draft_tokens", "accepted_tokens", "acceptance_rate", "fallback", "drafters")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTANCE_RATE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    DRAFTERS_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    rounds: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate: float
    fallback: bool
    drafters: _containers.RepeatedCompositeFieldContainer[DrafterSummary]
    def __init__(self, enabled: _Optional[bool] = ..., rounds: _Optional[int] = ..., draft_tokens: _Optional[int] = ..., accepted_tokens: _Optional[int] = ..., acceptance_rate: _Optional[float] = ..., fallback: _Optional[bool] = ..., drafters: _Optional[_Iterable[_Union[DrafterSummary, _Mapping]]] = ...) -> None: ...

class DrafterSummary(_message.Message):
    __slots__ = ("drafter", "blocks", "draft_tokens", "accepted_tokens")
    DRAFTER_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    drafter: _common_pb2.TokenSource
    blocks: int
    draft_tokens: int
    accepted_tokens: int
    def __init__(self, drafter: _Optional[_Union[_common_pb2.TokenSource, str]] = ..., blocks: _Optional[int] = ..., draft_tokens: _Optional[int] = ..., accepted_tokens: _Optional[int] = ...) -> None: ...

class TokenProvenance(_message.Message):
    __slots__ = ("source", "text")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    source: _common_pb2.TokenSource
    text: str
    def __init__(self, source: _Optional[_Union[_common_pb2.TokenSource, str]] = ..., text: _Optional[str] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("token_ids", "text", "logprobs", "round", "finish_reason", "usage", "summary", "seed", "tokens")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    round: RoundStats
    finish_reason: str
    usage: Usage
    summary: SpeculativeSummary
    seed: int
    tokens: _containers.RepeatedCompositeFieldContainer[TokenProvenance]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ..., round: _Optional[_Union[RoundStats, _Mapping]] = ..., finish_reason: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., summary: _Optional[_Union[SpeculativeSummary, _Mapping]] = ..., seed: _Optional[int] = ..., tokens: _Optional[_Iterable[_Union[TokenProvenance, _Mapping]]] = ...) -> None: ...

class VerifyOpen(_message.Message):
    __slots__ = ("options",)
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    options: GenerationOptions
    def __init__(self, options: _Optional[_Union[GenerationOptions, _Mapping]] = ...) -> None: ...

class VerifyRequest(_message.Message):
    __slots__ = ("open", "block")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    open: VerifyOpen
    block: _common_pb2.CandidateBlock
    def __init__(self, open: _Optional[_Union[VerifyOpen, _Mapping]] = ..., block: _Optional[_Union[_common_pb2.CandidateBlock, _Mapping]] = ...) -> None: ...

class VerifyResponse(_message.Message):
    __slots__ = ("num_accepted", "token_ids", "text", "finish_reason", "max_candidates", "prompt_ids", "seed", "usage")
    NUM_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    MAX_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    num_accepted: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    finish_reason: str
    max_candidates: int
    prompt_ids: _containers.RepeatedScalarFieldContainer[int]
    seed: int
    usage: Usage
    def __init__(self, num_accepted: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., finish_reason: _Optional[str] = ..., max_candidates: _Optional[int] = ..., prompt_ids: _Optional[_Iterable[int]] = ..., seed: _Optional[int] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...
