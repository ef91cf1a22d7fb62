from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AcceptanceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACCEPTANCE_MODE_UNSPECIFIED: _ClassVar[AcceptanceMode]
    ACCEPTANCE_MODE_REJECTION: _ClassVar[AcceptanceMode]
    ACCEPTANCE_MODE_COUPLED: _ClassVar[AcceptanceMode]
    ACCEPTANCE_MODE_GREEDY: _ClassVar[AcceptanceMode]

class TokenSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOKEN_SOURCE_UNSPECIFIED: _ClassVar[TokenSource]
    TOKEN_SOURCE_TARGET: _ClassVar[TokenSource]
    TOKEN_SOURCE_DRAFT: _ClassVar[TokenSource]
    TOKEN_SOURCE_LOOKUP: _ClassVar[TokenSource]
    TOKEN_SOURCE_PREDICTION: _ClassVar[TokenSource]
    TOKEN_SOURCE_SUFFIX: _ClassVar[TokenSource]
ACCEPTANCE_MODE_UNSPECIFIED: AcceptanceMode
ACCEPTANCE_MODE_REJECTION: AcceptanceMode
ACCEPTANCE_MODE_COUPLED: AcceptanceMode
ACCEPTANCE_MODE_GREEDY: AcceptanceMode
TOKEN_SOURCE_UNSPECIFIED: TokenSource
TOKEN_SOURCE_TARGET: TokenSource
TOKEN_SOURCE_DRAFT: TokenSource
TOKEN_SOURCE_LOOKUP: TokenSource
TOKEN_SOURCE_PREDICTION: TokenSource
TOKEN_SOURCE_SUFFIX: TokenSource

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "min_p")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ...) -> None: ...

class Penalties(_message.Message):
    __slots__ = ("presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias")
    class LogitBiasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    LOGIT_BIAS_FIELD_NUMBER: _ClassVar[int]
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    logit_bias: _containers.ScalarMap[int, float]
    def __init__(self, presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., logit_bias: _Optional[_Mapping[int, float]] = ...) -> None: ...

class SparseDistribution(_message.Message):
    __slots__ = ("token_ids", "probs")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PROBS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    probs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., probs: _Optional[_Iterable[float]] = ...) -> None: ...

class CandidateBlock(_message.Message):
    __slots__ = ("token_ids", "draft_probs", "parent_indices", "sources")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_PROBS_FIELD_NUMBER: _ClassVar[int]
    PARENT_INDICES_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    draft_probs: _containers.RepeatedCompositeFieldContainer[SparseDistribution]
    parent_indices: _containers.RepeatedScalarFieldContainer[int]
    sources: _containers.RepeatedScalarFieldContainer[TokenSource]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., draft_probs: _Optional[_Iterable[_Union[SparseDistribution, _Mapping]]] = ..., parent_indices: _Optional[_Iterable[int]] = ..., sources: _Optional[_Iterable[_Union[TokenSource, str]]] = ...) -> None: ...

class ServerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServerStatus(_message.Message):
    __slots__ = ("service", "model", "drafter", "active_sessions", "max_sessions", "vocab_size", "vocab_fingerprint", "device", "max_context", "max_prompt_chars", "draft_step_ms")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DRAFTER_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    VOCAB_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MAX_PROMPT_CHARS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_STEP_MS_FIELD_NUMBER: _ClassVar[int]
    service: str
    model: str
    drafter: str
    active_sessions: int
    max_sessions: int
    vocab_size: int
    vocab_fingerprint: str
    device: str
    max_context: int
    max_prompt_chars: int
    draft_step_ms: float
    def __init__(self, service: _Optional[str] = ..., model: _Optional[str] = ..., drafter: _Optional[str] = ..., active_sessions: _Optional[int] = ..., max_sessions: _Optional[int] = ..., vocab_size: _Optional[int] = ..., vocab_fingerprint: _Optional[str] = ..., device: _Optional[str] = ..., max_context: _Optional[int] = ..., max_prompt_chars: _Optional[int] = ..., draft_step_ms: _Optional[float] = ...) -> None: ...
