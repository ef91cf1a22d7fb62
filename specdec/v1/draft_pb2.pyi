from specdec.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProposeOpen(_message.Message):
    __slots__ = ("prompt_ids", "sampling", "seed", "acceptance", "num_draft_tokens", "draft_top_k", "vocab_size", "vocab_fingerprint", "tree_branching", "tree_nodes", "penalties", "grammar", "draft_ahead_tokens", "min_tokens", "stop_token_ids", "draft_scope")
    PROMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    ACCEPTANCE_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_TOP_K_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    VOCAB_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    TREE_BRANCHING_FIELD_NUMBER: _ClassVar[int]
    TREE_NODES_FIELD_NUMBER: _ClassVar[int]
    PENALTIES_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    DRAFT_AHEAD_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_SCOPE_FIELD_NUMBER: _ClassVar[int]
    prompt_ids: _containers.RepeatedScalarFieldContainer[int]
    sampling: _common_pb2.SamplingParams
    seed: int
    acceptance: _common_pb2.AcceptanceMode
    num_draft_tokens: int
    draft_top_k: int
    vocab_size: int
    vocab_fingerprint: str
    tree_branching: int
    tree_nodes: int
    penalties: _common_pb2.Penalties
    grammar: str
    draft_ahead_tokens: int
    min_tokens: int
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    draft_scope: str
    def __init__(self, prompt_ids: _Optional[_Iterable[int]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., seed: _Optional[int] = ..., acceptance: _Optional[_Union[_common_pb2.AcceptanceMode, str]] = ..., num_draft_tokens: _Optional[int] = ..., draft_top_k: _Optional[int] = ..., vocab_size: _Optional[int] = ..., vocab_fingerprint: _Optional[str] = ..., tree_branching: _Optional[int] = ..., tree_nodes: _Optional[int] = ..., penalties: _Optional[_Union[_common_pb2.Penalties, _Mapping]] = ..., grammar: _Optional[str] = ..., draft_ahead_tokens: _Optional[int] = ..., min_tokens: _Optional[int] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., draft_scope: _Optional[str] = ...) -> None: ...

class ProposeFeedback(_message.Message):
    __slots__ = ("num_accepted", "appended_ids", "num_draft_tokens", "accepted_nodes")
    NUM_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    APPENDED_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_NODES_FIELD_NUMBER: _ClassVar[int]
    num_accepted: int
    appended_ids: _containers.RepeatedScalarFieldContainer[int]
    num_draft_tokens: int
    accepted_nodes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, num_accepted: _Optional[int] = ..., appended_ids: _Optional[_Iterable[int]] = ..., num_draft_tokens: _Optional[int] = ..., accepted_nodes: _Optional[_Iterable[int]] = ...) -> None: ...

class ProposeRequest(_message.Message):
    __slots__ = ("open", "feedback")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    open: ProposeOpen
    feedback: ProposeFeedback
    def __init__(self, open: _Optional[_Union[ProposeOpen, _Mapping]] = ..., feedback: _Optional[_Union[ProposeFeedback, _Mapping]] = ...) -> None: ...

class ProposeResponse(_message.Message):
    __slots__ = ("block", "draft_ms")
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    DRAFT_MS_FIELD_NUMBER: _ClassVar[int]
    block: _common_pb2.CandidateBlock
    draft_ms: float
    def __init__(self, block: _Optional[_Union[_common_pb2.CandidateBlock, _Mapping]] = ..., draft_ms: _Optional[float] = ...) -> None: ...
