"""Prompt text or chat messages -> token ids, with the tokenizer's own chat template."""

from __future__ import annotations

import jinja2
from transformers import PreTrainedTokenizerBase

from specdec.errors import InvalidRequestError


def encode_chat(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict], field: str = "messages", tools: list[dict] | None = None
) -> list[int]:
    """`messages` (and `tools`, for a template that renders them: specdec.serving.tool_prompt) -> token ids."""
    if not tokenizer.chat_template:
        raise InvalidRequestError(field, "this model's tokenizer has no chat template; send a plain prompt instead")
    try:
        text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    except jinja2.TemplateError as error:  # a template's raise_exception(), e.g. roles out of order
        raise InvalidRequestError(field, f"the model's chat template refused these messages: {error}") from error
    return _require_tokens(tokenizer(text, add_special_tokens=False)["input_ids"], field)


def encode_text(tokenizer: PreTrainedTokenizerBase, text: str, field: str = "prompt") -> list[int]:
    return _require_tokens(tokenizer(text)["input_ids"], field)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str, chat: bool) -> list[int]:
    """A user's prompt as one chat turn when the model has a template (and `chat`), else raw text."""
    if chat and tokenizer.chat_template:
        return encode_chat(tokenizer, [{"role": "user", "content": text}])
    return encode_text(tokenizer, text)


def _require_tokens(token_ids: list[int], field: str) -> list[int]:
    if not token_ids:
        raise InvalidRequestError(field, "encodes to no tokens; give at least one character")
    return list(token_ids)


def max_prompt_chars(tokenizer: PreTrainedTokenizerBase, max_context: int) -> int:
    """The most characters a prompt that fits in `max_context` tokens can have.

    NOTE: no token stands for more characters than its vocabulary entry has (byte-level BPE writes
    each byte as one character, SentencePiece a space as one '▁', byte-fallback tokens as '<0x..>'),
    so a longer prompt has more than max_context tokens, and is refused without tokenizing it.
    """
    return max_context * max(map(len, tokenizer.get_vocab()))
