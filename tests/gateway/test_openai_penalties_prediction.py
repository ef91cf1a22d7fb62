"""Penalties, logit_bias, predicted outputs and unhonoured fields through the real stack with the
official `openai` client (tiny pair: gateway -> verify -> draft)."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai import OpenAI
from service_support import CHAT, assert_openai_error, whole_word_bias

MESSAGES = [{"role": "user", "content": "Tell me a story about the river and the market."}]
PENALTIES = {"presence_penalty": 1.1, "frequency_penalty": 0.7, "logit_bias": {"7": 4.0, "9": -100.0}}


@pytest.fixture(scope="module")
def client(gateway_url):
    return OpenAI(base_url=f"{gateway_url}/v1", api_key="unused", max_retries=0)


def _text(client, speculative: dict, **fields) -> str:
    return (
        client.chat.completions.create(model="target", messages=MESSAGES, extra_body={"speculative": speculative}, **fields)
        .choices[0]
        .message.content
    )


def test_penalties_change_the_greedy_text_and_speculation_reproduces_it(client):
    common = {"max_tokens": 40, "temperature": 0}
    plain = _text(client, {"enabled": False}, **common)
    off = _text(client, {"enabled": False}, **common, **PENALTIES)
    on = client.chat.completions.create(
        model="target", messages=MESSAGES, **common, **PENALTIES, extra_body={"speculative": {"enabled": True}, "repetition_penalty": 1.0}
    )
    assert off != plain and on.choices[0].message.content == off
    assert on.model_extra["speculative"]["draft_tokens"] > 0


def test_coupled_sampling_under_penalties_matches_speculation_off(client):
    common = {"max_tokens": 30, "temperature": 0.9, "seed": 77, **PENALTIES}
    off = (
        client.chat.completions.create(
            model="target", messages=MESSAGES, **common, extra_body={"repetition_penalty": 1.5, "speculative": {"enabled": False}}
        )
        .choices[0]
        .message.content
    )
    coupled = client.chat.completions.create(
        model="target", messages=MESSAGES, **common, extra_body={"repetition_penalty": 1.5, "speculative": {"acceptance": "coupled"}}
    )
    assert coupled.choices[0].message.content == off and coupled.model_extra["speculative"]["draft_tokens"] > 0


def test_completions_honour_penalties_and_the_repetition_penalty_extension(client):
    common = {
        "model": "target",
        "prompt": "The quick brown fox jumps over the lazy dog. The quick brown fox",
        "max_tokens": 24,
        "temperature": 0,
    }
    plain = client.completions.create(**common).choices[0].text
    for fields in ({"frequency_penalty": 2.0, "presence_penalty": 2.0}, {"repetition_penalty": 1.8}):
        off = client.completions.create(**common, extra_body={**fields, "speculative": {"enabled": False}}).choices[0].text
        on = client.completions.create(**common, extra_body=fields).choices[0].text
        assert off != plain and on == off, fields


@pytest.fixture(scope="module")
def words(tiny_target):
    """Greedy settings whose output re-tokenizes to itself, so a prediction of it aligns token for token."""
    return {
        "max_tokens": 60,
        "temperature": 0,
        "logit_bias": {str(token): bias for token, bias in whole_word_bias(tiny_target.tokenizer).items()},
    }


@pytest.fixture(scope="module")
def reference(client, words):
    return _text(client, {"enabled": False}, **words)


def test_a_prediction_is_lossless_and_reported_in_usage(client, reference, words):
    edited = reference.replace(reference.split()[10], "river", 1)  # a small edit
    response = client.chat.completions.create(model="target", messages=MESSAGES, prediction={"type": "content", "content": edited}, **words)
    assert response.choices[0].message.content == reference
    details = response.usage.completion_tokens_details
    assert details.accepted_prediction_tokens >= 40 and details.rejected_prediction_tokens > 0
    stats = response.model_extra["speculative"]
    assert details.accepted_prediction_tokens <= stats["accepted_tokens"]
    assert details.accepted_prediction_tokens + details.rejected_prediction_tokens <= stats["draft_tokens"]


def test_a_streamed_prediction_reports_usage_in_the_last_chunk(client, reference, words):
    chunks = list(
        client.chat.completions.create(
            model="target",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
            prediction={"type": "content", "content": [{"type": "text", "text": reference}]},
            **words,
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reference
    details = chunks[-1].usage.completion_tokens_details
    assert details.accepted_prediction_tokens >= 50 and details.rejected_prediction_tokens == 0


def test_without_a_prediction_the_details_are_zero(client):
    response = client.chat.completions.create(model="target", messages=MESSAGES, max_tokens=8, temperature=0)
    details = response.usage.completion_tokens_details
    assert details.accepted_prediction_tokens == 0 and details.rejected_prediction_tokens == 0


def test_models_report_max_model_len(client, tiny_target):
    assert client.models.list().data[0].model_extra["max_model_len"] == tiny_target.max_context == 512


def test_without_max_tokens_a_chat_may_run_to_the_end_of_the_context(client):
    response = client.chat.completions.create(
        model="target", messages=MESSAGES, temperature=0, logit_bias={"0": -100, "1": -100, "2": -100}
    )  # no end-of-text token: runs to the end
    usage = response.usage
    assert response.choices[0].finish_reason == "length"
    assert usage.completion_tokens > 256 and usage.prompt_tokens + usage.completion_tokens == 512


# --- bad input: each a 400 naming the field ---------------------------------------------------------


def _refused(client, param: str, **fields) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="target", messages=MESSAGES, max_tokens=4, **fields)
    assert caught.value.status_code == 400 and caught.value.param == param, caught.value.body
    return caught.value


def test_logit_bias_outside_the_vocabulary_or_range_is_400_naming_it(client, tiny_target):
    error = _refused(client, "logit_bias", logit_bias={str(tiny_target.vocab_size): 1.0})
    assert str(tiny_target.vocab_size) in error.message
    _refused(client, "logit_bias", logit_bias={"5": 101.0})
    _refused(client, "logit_bias", logit_bias={"five": 1.0})


@pytest.mark.parametrize("field,value", [("presence_penalty", 2.1), ("frequency_penalty", -3.0)])
def test_penalties_outside_their_range_are_400_naming_them(client, field, value):
    _refused(client, field, **{field: value})


def test_repetition_penalty_must_be_positive(client):
    _refused(client, "repetition_penalty", extra_body={"repetition_penalty": 0})


def test_a_prediction_of_the_wrong_type_is_400_naming_it(client):
    _refused(client, "prediction.type", prediction={"type": "text", "content": "hello"})
    _refused(client, "prediction", extra_body={"prediction": "hello"})


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"extra_body": {"reasoning_effort": "high"}}, "reasoning_effort"),
        ({"extra_body": {"frobnicate": True}}, "frobnicate"),
        ({"extra_body": {"stream_options": {"include_obfuscation": True}}}, "stream_options.include_obfuscation"),
    ],
)
def test_fields_the_server_does_not_honour_are_400_naming_them(client, fields, param):
    fields = {"messages": MESSAGES, **fields}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="target", max_tokens=4, **fields)
    assert caught.value.param == param, caught.value.body
    assert "not support" in caught.value.message


@pytest.mark.parametrize("fields,param", [({"best_of": 3}, "best_of"), ({"suffix": "the end"}, "suffix"), ({"echo": True}, "echo")])
def test_completion_fields_the_server_does_not_honour_are_400_naming_them(client, fields, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="target", prompt="hi", max_tokens=4, **fields)
    assert caught.value.param == param, caught.value.body


def test_harmless_no_ops_and_their_empty_forms_are_accepted(client):
    response = client.chat.completions.create(
        model="target",
        messages=MESSAGES,
        max_tokens=4,
        user="u-1",
        store=False,
        metadata={"ticket": "42"},
        response_format={"type": "text"},
        tools=[],
        tool_choice="none",
        extra_body={"safety_identifier": "s", "prompt_cache_key": "k"},
    )
    assert response.choices[0].finish_reason in ("length", "stop")
    completion = client.completions.create(model="target", prompt="hi", max_tokens=4, best_of=1, suffix=None, echo=False)
    assert completion.usage.completion_tokens > 0


def test_unknown_fields_are_400_over_raw_http_too(gateway_url):
    response = httpx.post(
        f"{gateway_url}{CHAT}", json={"model": "target", "messages": MESSAGES, "max_tokens": 2, "guided_json": {}}, timeout=30
    )
    error = assert_openai_error(response, 400, param="guided_json")
    assert "does not support" in error["message"]
