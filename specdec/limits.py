"""The limits on requests, one definition each: the numbers behind the fields' ranges (specdec/fields.py)
and the caps on what a request may carry, for the HTTP schema (gateway/protocol.py), the core's models
and the gRPC services, which enforce the same limits on direct callers as the gateway does on HTTP
clients (docs/reliability.md lists each limit, where it is enforced, and what a client gets past it).

Every bound fits the proto field's type (int32, uint32, uint64), so a value the schema accepts can
always be put on the wire: past it, the request is a 400 naming the field, never a 500 while the
message is built (tests/gateway/test_field_ranges.py checks the schema against the protos).
Torch-free: the gateway imports it.
"""

from __future__ import annotations

INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1
MAX_TOP_LOGPROBS = 20
MAX_DRAFT_TOKENS = 64  # K per round; more only ties up a worker
# Wider than any released model's vocabulary (the largest are ~256k); a draft q is padded to the
# claimed width, so the claim must be bounded.
MAX_VOCAB_SIZE = 2**20

MAX_GRAMMAR_CHARS = 256 * 1024  # a grammar (or the schema it is built from) larger than this is refused
MAX_STOP_SEQUENCES = 16
MAX_STOP_CHARS = 1024  # per stop sequence; longer ones could never end an output that fits a context anyway
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_LOGIT_BIAS_ENTRIES = 1024
MAX_TOOLS = 128  # OpenAI's own limit
TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"  # OpenAI's function names
# Sampling and penalty ranges, as OpenAI's API sets them; repetition_penalty (an extension) is bounded so
# that logits / r and logits * r stay finite.
MAX_TEMPERATURE = 2.0
MIN_REPETITION_PENALTY, MAX_REPETITION_PENALTY = 0.01, 100.0
