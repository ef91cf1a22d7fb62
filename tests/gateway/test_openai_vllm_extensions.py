"""vLLM's extension fields that load tools send (guidellm, aiperf): `ignore_eos`, `min_tokens` and
`stream_options.continuous_usage_stats`, through the official `openai` client's extra_body against the
real stack (tiny pair: gateway -> verify -> draft), with speculation on equal to speculation off."""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI

MESSAGES = [{"role": "user", "content": "Tell me a story about the river and the market."}]
PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"
MIN_TOKENS = 10


@pytest.fixture(scope="module")
def client(gateway_url):
    return OpenAI(base_url=f"{gateway_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def forced_eos(tiny_target) -> dict:
    """logit_bias that makes the model stop at its first token."""
    return {str(eos): 100 for eos in tiny_target.eos_token_ids}


def _chat(client, speculative: dict, **fields):
    extra = fields.pop("extra_body", {})
    return client.chat.completions.create(model="target", messages=MESSAGES, extra_body={"speculative": speculative, **extra}, **fields)


def test_ignore_eos_generates_max_tokens_where_the_model_would_stop(client, forced_eos):
    common = {"max_tokens": 8, "temperature": 0, "logit_bias": forced_eos}
    stopped = _chat(client, {"enabled": False}, **common)
    assert stopped.usage.completion_tokens == 0 and stopped.choices[0].finish_reason == "stop"
    off = _chat(client, {"enabled": False}, **common, extra_body={"ignore_eos": True})
    on = _chat(client, {"enabled": True}, **common, extra_body={"ignore_eos": True})
    for reply in (off, on):
        assert reply.usage.completion_tokens == 8 and reply.choices[0].finish_reason == "length"
    assert on.choices[0].message.content == off.choices[0].message.content
    assert on.model_extra["speculative"]["accepted_tokens"] > 0  # the draft proposes EOS too, and it is kept
    text = client.completions.create(
        model="target", prompt=PROMPT, max_tokens=6, temperature=0, logit_bias=forced_eos, extra_body={"ignore_eos": True}
    )
    assert text.usage.completion_tokens == 6 and text.choices[0].finish_reason == "length"


def test_min_tokens_holds_a_forced_eos_off_with_speculation_equal_to_off(client, forced_eos):
    common = {"max_tokens": 40, "temperature": 0, "logit_bias": forced_eos}
    unbiased = _chat(client, {"enabled": False}, max_tokens=MIN_TOKENS, temperature=0).choices[0].message.content
    off = _chat(client, {"enabled": False}, **common, extra_body={"min_tokens": MIN_TOKENS})
    on = _chat(client, {"enabled": True}, **common, extra_body={"min_tokens": MIN_TOKENS})
    for reply in (off, on):
        assert reply.usage.completion_tokens == MIN_TOKENS and reply.choices[0].finish_reason == "stop"
        assert reply.choices[0].message.content == unbiased  # EOS banned, the rest of the distribution untouched
    stats = on.model_extra["speculative"]
    # The draft bans EOS in its q as the target does: without that it would propose the forced EOS every time.
    assert stats["draft_tokens"] > 0 and stats["acceptance_rate"] > 0.5


def test_min_tokens_under_coupled_sampling_matches_speculation_off(client, forced_eos):
    common = {"max_tokens": 40, "temperature": 1.0, "seed": 4321, "logit_bias": forced_eos}
    off = _chat(client, {"enabled": False}, **common, extra_body={"min_tokens": MIN_TOKENS})
    coupled = _chat(client, {"acceptance": "coupled"}, **common, extra_body={"min_tokens": MIN_TOKENS})
    assert off.usage.completion_tokens == coupled.usage.completion_tokens == MIN_TOKENS
    assert coupled.choices[0].message.content == off.choices[0].message.content
    assert coupled.model_extra["speculative"]["draft_tokens"] > 0


def test_min_tokens_on_completions(client, forced_eos):
    common = {"model": "target", "prompt": PROMPT, "max_tokens": 30, "temperature": 0, "logit_bias": forced_eos}
    assert client.completions.create(**common).usage.completion_tokens == 0
    off = client.completions.create(**common, extra_body={"min_tokens": 7, "speculative": {"enabled": False}})
    on = client.completions.create(**common, extra_body={"min_tokens": 7})
    assert off.usage.completion_tokens == on.usage.completion_tokens == 7 and on.choices[0].text == off.choices[0].text


def _assert_running_usage(chunks: list, final_tokens: int) -> None:
    """Every chunk carries usage; completion_tokens grows to the final count, prompt_tokens stays."""
    usages = [chunk.usage for chunk in chunks]
    assert all(usage is not None for usage in usages)
    completion = [usage.completion_tokens for usage in usages]
    assert completion == sorted(completion) and completion[-1] == final_tokens and len(set(completion)) > 2
    assert len({usage.prompt_tokens for usage in usages}) == 1 and usages[0].prompt_tokens > 0
    assert all(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens for usage in usages)


def test_continuous_usage_stats_puts_the_running_usage_in_every_chunk(client):
    options = {"include_usage": True, "continuous_usage_stats": True}
    chunks = list(
        client.chat.completions.create(
            model="target",
            messages=MESSAGES,
            max_tokens=24,
            temperature=0,
            stream=True,
            stream_options=options,
            extra_body={"ignore_eos": True},
        )
    )
    _assert_running_usage(chunks, 24)
    assert chunks[0].usage.completion_tokens == 0  # the role chunk: the prompt only
    assert chunks[-1].choices == [] and chunks[-1].model_extra["speculative"]["rounds"] > 1
    text = list(
        client.completions.create(
            model="target",
            prompt=PROMPT,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"continuous_usage_stats": True},
            extra_body={"ignore_eos": True},
        )
    )
    _assert_running_usage(text, 12)


def test_without_continuous_usage_stats_only_the_last_chunk_has_usage(client):
    chunks = list(
        client.chat.completions.create(
            model="target", messages=MESSAGES, max_tokens=8, temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(chunk.usage is None for chunk in chunks[:-1]) and chunks[-1].usage is not None


# --- bad input: each a 400 naming the field ---------------------------------------------------------


GRAMMAR = {"max_tokens": 4, "response_format": {"type": "json_object"}}


@pytest.mark.parametrize(
    "fields,param,reason",
    [
        ({"max_tokens": 4, "extra_body": {"min_tokens": 5}}, "min_tokens", "at most max_tokens (4)"),
        ({"max_tokens": 4, "extra_body": {"min_tokens": -1}}, "min_tokens", "greater than or equal to 0"),
        # past the context (512) a chat without max_tokens runs to: verify refuses it
        ({"extra_body": {"min_tokens": 600}}, "min_tokens", "at most max_tokens"),
        ({**GRAMMAR, "extra_body": {"ignore_eos": True}}, "ignore_eos", "cannot be combined with a grammar"),
        ({**GRAMMAR, "extra_body": {"min_tokens": 2}}, "min_tokens", "cannot be combined with a grammar"),
        (
            {"max_tokens": 4, "stream": True, "stream_options": {"continuous_usage_stats": "often"}},
            "stream_options.continuous_usage_stats",
            "valid boolean",
        ),
    ],
    ids=["past-max-tokens", "negative", "past-the-context", "ignore-eos-with-a-grammar", "min-tokens-with-a-grammar", "not-a-bool"],
)
def test_bad_values_are_400_naming_the_field(client, fields, param, reason):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="target", messages=MESSAGES, **fields)
    assert caught.value.status_code == 400 and caught.value.param == param, caught.value.body
    assert reason in caught.value.message, caught.value.message
