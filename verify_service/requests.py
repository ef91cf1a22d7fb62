"""GenerateRequest / VerifyOpen -> the core's GenerationRequest (tokenising text and chats here)."""

from __future__ import annotations

import json
import re

from pydantic import ValidationError

from specdec.acceptance_modes import effective_acceptance, refusal, requested_acceptance
from specdec.constraints.grammars import check_grammar_size
from specdec.constraints.matcher import GrammarConstraint
from specdec.engines.base import TargetModel
from specdec.errors import InvalidRequestError, check_token_ids, field_path
from specdec.limits import CHAT_ROLES, MAX_DRAFT_TOKENS, MAX_STOP_CHARS, MAX_STOP_SEQUENCES, MAX_TOOLS, TOOL_NAME_PATTERN
from specdec.model_services.blocks import penalties_from_proto, sampling_from_proto
from specdec.prompts import encode_chat, encode_text
from specdec.request import GenerationRequest
from specdec.serving.config import SpecdecConfig
from specdec.serving.rpc.convert import acceptance_from_proto, policy_from_proto
from specdec.serving.tool_prompt import ChatTurn, ToolCallText, render_input, template_renders_tools
from specdec.v1 import verify_pb2

VERIFY_MAX_CANDIDATES = MAX_DRAFT_TOKENS  # a client-drafted block, as a draft service's


def check_request_limits(options: verify_pb2.GenerationOptions) -> None:
    """The gateway's limits on what costs work before the first token (grammar size, stop strings),
    enforced on direct gRPC callers too; O(fields), cheap on the event loop, before any grammar work."""
    check_grammar_size(options.grammar, "options.grammar")
    if len(options.stop) > MAX_STOP_SEQUENCES:
        raise InvalidRequestError("options.stop", f"at most {MAX_STOP_SEQUENCES} stop sequences, got {len(options.stop)}")
    if any(len(stop) > MAX_STOP_CHARS for stop in options.stop):
        raise InvalidRequestError("options.stop", f"each stop sequence has at most {MAX_STOP_CHARS} characters")


def check_prompt_size(options: verify_pb2.GenerationOptions, max_context: int, max_chars: int) -> int:
    """Refuse a prompt that cannot fit in the context from its length alone, before tokenizing it
    (`max_chars`: specdec.prompts.max_prompt_chars); O(number of messages), cheap on the event loop.
    Returns the characters there are to tokenize."""
    kind = options.WhichOneof("prompt")
    if kind == "token_ids":
        size, limit, unit, field = len(options.token_ids.ids), max_context, "tokens", "options.token_ids"
    elif kind == "chat":
        messages = options.chat.messages
        if len(messages) > max_context:  # each message renders to at least one token
            raise InvalidRequestError(
                "options.chat.messages", f"{len(messages)} messages cannot fit in the model's context of {max_context} tokens"
            )
        size, limit, unit, field = _chat_chars(options.chat), max_chars, "characters", "options.chat.messages"
    else:
        size, limit, unit, field = len(options.text), max_chars, "characters", "options.text"
    if size > limit:
        raise InvalidRequestError(
            field, f"{size} {unit} cannot fit in the model's context of {max_context} tokens (at most {limit} {unit}); shorten the prompt"
        )
    return size if unit == "characters" else 0


def _chat_chars(chat: verify_pb2.ChatMessages) -> int:
    """The characters the chat's messages, calls and tools add to the rendered prompt."""
    calls = sum(len(call.name) + len(call.arguments) for message in chat.messages for call in message.tool_calls)
    return sum(len(message.content) for message in chat.messages) + calls + len(chat.tools_json)


def check_prediction_size(prediction: str, max_context: int, max_chars: int) -> int:
    """A prediction longer than any output the context can hold is refused before tokenizing it, as
    prompts are (check_prompt_size). Returns its characters."""
    if len(prediction) > max_chars:
        raise InvalidRequestError(
            "prediction",
            f"{len(prediction)} characters cannot fit in the model's context of {max_context} tokens (at most {max_chars} characters)",
        )
    return len(prediction)


def prompt_ids_from_options(options: verify_pb2.GenerationOptions, target: TargetModel) -> list[int]:
    kind = options.WhichOneof("prompt")
    if kind == "text":
        return encode_text(target.tokenizer, options.text, "options.text")
    if kind == "chat":
        if not options.chat.messages:
            raise InvalidRequestError("options.chat.messages", "needs at least one message")
        native = template_renders_tools(target.tokenizer.chat_template)
        rendered = render_input(chat_turns(options.chat), chat_tools(options.chat), native)
        return encode_chat(target.tokenizer, rendered.messages, "options.chat.messages", rendered.tools)
    if kind == "token_ids":
        token_ids = list(options.token_ids.ids)
        if not token_ids:
            raise InvalidRequestError("options.token_ids", "needs at least one token")
        check_token_ids(token_ids, target.vocab_size, "options.token_ids")
        return token_ids
    raise InvalidRequestError("options.prompt", "set one of text, chat or token_ids")


def chat_turns(chat: verify_pb2.ChatMessages) -> list[ChatTurn]:
    for index, message in enumerate(chat.messages):
        if message.role not in CHAT_ROLES:
            raise InvalidRequestError(
                f"options.chat.messages[{index}].role", f"must be one of {', '.join(CHAT_ROLES)}, got {message.role!r}"
            )
    return [
        ChatTurn(m.role, m.content, tuple(ToolCallText(c.id, c.name, c.arguments) for c in m.tool_calls), m.tool_call_id, m.name)
        for m in chat.messages
    ]


def chat_tools(chat: verify_pb2.ChatMessages) -> list[dict]:
    """The OpenAI `tools` array the gateway checked, as objects."""
    if not chat.tools_json:
        return []
    try:
        tools = json.loads(chat.tools_json)
    except ValueError as error:
        raise InvalidRequestError("options.chat.tools_json", f"is not JSON: {error}") from error
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS or not all(map(_is_function_tool, tools)):
        raise InvalidRequestError(
            "options.chat.tools_json",
            f"must be a JSON array of at most {MAX_TOOLS} tools, each "
            '{"type": "function", "function": {"name": ..., "parameters": {...}}}',
        )
    return tools


def _is_function_tool(tool) -> bool:
    """The shape the gateway's FunctionTool checks, as far as rendering the prompt relies on it."""
    function = tool.get("function") if isinstance(tool, dict) else None
    return (
        isinstance(function, dict)
        and tool.get("type") == "function"
        and isinstance(function.get("name"), str)
        and re.fullmatch(TOOL_NAME_PATTERN, function["name"]) is not None
        and isinstance(function.get("parameters", {}), dict)
        and isinstance(function.get("description", ""), str)
    )


def generation_request(
    options: verify_pb2.GenerationOptions, target: TargetModel, config: SpecdecConfig, prediction: str = "", **overrides
) -> GenerationRequest:
    """Build and validate; every problem is an InvalidRequestError naming its field. `prediction`:
    the text of OpenAI predicted outputs (Generate's), tokenized here like the prompt."""
    fields = {
        "prompt_ids": prompt_ids_from_options(options, target),
        "sampling": sampling_from_proto(options.sampling, "options.sampling"),
        "penalties": penalties_from_proto(options.penalties, "options.penalties"),
        "stop": list(options.stop),
        "ignore_eos": options.ignore_eos,
        "min_tokens": options.min_tokens,
        # The request's mode, else the config's, else coupled for a seeded request (its text is the seed's, whatever the draft proposed).
        "acceptance": requested_acceptance(
            acceptance_from_proto(options.acceptance, "options.acceptance") or config.speculative.acceptance,
            seeded=options.HasField("seed"),
        ),
        "num_draft_tokens": config.speculative.draft_tokens,
        "adaptive_k": config.speculative.adaptive_k,
        "min_draft_tokens": config.speculative.min_draft_tokens,
        "draft_top_k": config.speculative.draft_top_k,
        "prediction_draft_tokens": config.speculative.prediction_draft_tokens,
        "prediction_ids": target.tokenizer(prediction, add_special_tokens=False)["input_ids"] if prediction else [],
        **config.speculative.tree_request_fields(),
        "speculative": config.speculative.enabled,
        "grammar": options.grammar or None,
        **({"seed": options.seed} if options.HasField("seed") else {}),
        **overrides,
    }
    fields["penalties"].check_vocab(target.vocab_size, "options.penalties.logit_bias")
    fields["max_tokens"] = options.max_tokens or default_max_tokens(len(fields["prompt_ids"]), target, config)
    # The draft is told the mode rounds run: at temperature 0 that is greedy whatever was asked.
    fields["acceptance"] = effective_acceptance(fields["acceptance"], fields["sampling"].is_greedy)
    problem = refusal(fields["acceptance"], fields["sampling"].is_greedy, tree=bool(fields.get("tree_branching") and fields["speculative"]))
    if problem:
        raise InvalidRequestError("options.acceptance", problem)
    try:
        request = GenerationRequest(**fields)
    except ValidationError as error:
        item = error.errors()[0]
        field = field_path(item["loc"]) or "options"
        raise InvalidRequestError(field, item["msg"]) from error
    # Compiled and probed here (refused: a 400 before any output); the session copies the cached matcher.
    GrammarConstraint.for_model(request.grammar, len(request.prompt_ids), target, target.vocab_size, "options.grammar")
    return request


def default_max_tokens(prompt_tokens: int, target: TargetModel, config: SpecdecConfig) -> int:
    """max_tokens when the request sets none: the configured default, else to the end of the context."""
    room = max(1, target.max_context - prompt_tokens)  # NOTE: a prompt that fills the context is refused later, naming it
    configured = config.verify_service.default_max_tokens
    return room if configured is None else min(configured, room)


def generate_overrides(request: verify_pb2.GenerateRequest) -> dict:
    overrides = {
        "logprobs": request.logprobs,
        "top_logprobs": request.top_logprobs,
        "prediction": request.prediction,
        "draft_scope": request.draft_scope,
    }
    if request.HasField("speculative"):
        overrides["speculative"] = request.speculative
    if request.HasField("num_draft_tokens"):
        overrides["num_draft_tokens"] = request.num_draft_tokens
    overrides["speculation_policy"] = policy_from_proto(request.speculation_policy)
    return overrides
