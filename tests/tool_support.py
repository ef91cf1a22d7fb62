"""Tool-call test helpers: a tool and a conversation that calls it, and what the official SDK's stream
assembler makes of a gateway's chunks."""

from __future__ import annotations

from collections.abc import Iterable

from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from specdec.serving.tool_prompt import ChatTurn, ToolCallText

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": CITY}}]
CONVERSATION = [
    ChatTurn("user", "Weather in Paris?"),
    ChatTurn("assistant", "", (ToolCallText("call_1", "get_weather", '{"city": "Paris"}'),)),
    ChatTurn("tool", '{"temperature": 21}', tool_call_id="call_1", name="get_weather"),
]


def assembled_choice(chunks: Iterable[ChatCompletionChunk | dict]):
    """The first choice as the SDK's stream assembler builds it from `chunks` (a cut output included,
    where its stream helpers would raise)."""
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk if isinstance(chunk, ChatCompletionChunk) else ChatCompletionChunk.model_validate(chunk))
    return state.current_completion_snapshot.choices[0]


def streamed_choice(client, **request):
    """One streamed chat completion's first choice, assembled from its chunks by the SDK."""
    return assembled_choice(client.chat.completions.create(**request, stream=True))
