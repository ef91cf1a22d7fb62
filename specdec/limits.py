"""The numeric ranges of request fields: one definition for the HTTP schema (gateway/protocol.py), the
core's models (SamplingParams, GenerationRequest) and the gRPC messages that carry them between.

Every bound fits the proto field's type (int32, uint32, uint64), so a value the schema accepts can
always be put on the wire: past it, the request is a 400 naming the field, never a 500 while the
message is built (tests/gateway/test_field_ranges.py checks the schema against the protos).
Torch-free: the gateway imports it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1
MAX_TOP_LOGPROBS = 20
MAX_DRAFT_TOKENS = 64  # K per round; more only ties up a worker
# Wider than any released model's vocabulary (the largest are ~256k); a draft q is padded to the
# claimed width, so the claim must be bounded.
MAX_VOCAB_SIZE = 2**20

TopK = Annotated[int, Field(ge=0, le=INT32_MAX, description="0 disables top-k")]
TokenId = Annotated[int, Field(ge=0, le=INT32_MAX)]
Seed = Annotated[int, Field(ge=0, le=UINT64_MAX)]
MaxTokens = Annotated[int, Field(ge=1, le=UINT32_MAX)]
TopLogprobs = Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)]
NumDraftTokens = Annotated[int, Field(ge=1, le=MAX_DRAFT_TOKENS)]
