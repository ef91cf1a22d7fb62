"""The token-provenance extension through the official `openai` client, against real draft, verify
and gateway processes (tiny pair): opt-in, per chunk, consistent with the text and the rounds."""

from __future__ import annotations

import pytest
from openai import OpenAI

# The tiny target answers this with repetitions, so lookup, the draft model and the target all show;
# greedy, so the text is the same with and without provenance.
MESSAGES = [{"role": "user", "content": "Hello! How are you today?"}]
GREEDY = {"model": "target", "messages": MESSAGES, "max_tokens": 64, "temperature": 0}
PROVENANCE = {"speculative": {"provenance": True, "num_draft_tokens": 4}}
SOURCES = {"draft", "lookup", "prediction", "target"}


@pytest.fixture(scope="module")
def client(process_stack):
    return OpenAI(base_url=f"{process_stack.url}/v1", api_key="unused", max_retries=0)


def _check_round(provenance: dict, text: str, finished: bool) -> list[dict]:
    """One chunk's provenance: one round, its tokens' texts joining to the chunk's text, the round's
    accepted candidates first and the target's own token last (unless stopping cut the round)."""
    tokens, (round_,) = provenance["tokens"], provenance["rounds"]
    assert set(round_) == {"round", "drafted", "accepted"} and 0 <= round_["accepted"] <= round_["drafted"]
    assert all(set(token) == {"text", "source", "round"} and token["source"] in SOURCES for token in tokens)
    assert all(token["round"] == round_["round"] for token in tokens)
    assert "".join(token["text"] for token in tokens) == text
    sources = [token["source"] for token in tokens]
    if not finished:
        assert sources == [*sources[: round_["accepted"]], "target"] and "target" not in sources[: round_["accepted"]]
    return tokens


def test_streamed_chunks_carry_each_tokens_source_and_round(client):
    chunks = list(client.chat.completions.create(**GREEDY, stream=True, extra_body=PROVENANCE))
    tokens, rounds = [], []
    for chunk in chunks:
        if not chunk.choices or chunk.choices[0].delta.role:  # the role chunk and the closing stats chunk
            assert not chunk.choices or "provenance" not in chunk.choices[0].model_extra
            continue
        choice = chunk.choices[0]
        provenance = choice.model_extra["provenance"]
        tokens += _check_round(provenance, choice.delta.content or "", choice.finish_reason is not None)
        rounds += provenance["rounds"]
    assert [r["round"] for r in rounds] == list(range(1, len(rounds) + 1))  # one chunk per round, numbered from 1
    summary = chunks[-1].model_extra["speculative"]
    assert len(tokens) == 64 or chunks[-2].choices[0].finish_reason == "stop"
    assert sum(r["accepted"] for r in rounds) == summary["accepted_tokens"]
    last = rounds[-1]["round"]  # the one round stopping may cut short
    assert sum(r["accepted"] for r in rounds[:-1]) == sum(t["source"] != "target" for t in tokens if t["round"] != last)
    assert sum(r["drafted"] for r in rounds) == summary["draft_tokens"]
    assert {"draft", "lookup", "target"} <= {t["source"] for t in tokens}, [t["source"] for t in tokens]


def test_without_the_opt_in_chunks_are_plain_openai_and_the_text_is_the_same(client):
    plain = list(client.chat.completions.create(**GREEDY, stream=True))
    traced = list(client.chat.completions.create(**GREEDY, stream=True, extra_body=PROVENANCE))
    assert all("provenance" not in chunk.choices[0].model_extra for chunk in plain if chunk.choices)

    def text(chunks):
        return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)

    assert text(plain) == text(traced)
    assert text(traced) == "".join(
        t["text"]
        for c in traced
        if c.choices and "provenance" in c.choices[0].model_extra
        for t in c.choices[0].model_extra["provenance"]["tokens"]
    )


def test_a_non_streamed_reply_carries_the_whole_provenance(client):
    reply = client.chat.completions.create(**GREEDY, extra_body=PROVENANCE)
    provenance = reply.choices[0].model_extra["provenance"]
    assert "".join(token["text"] for token in provenance["tokens"]) == reply.choices[0].message.content
    assert len(provenance["tokens"]) == reply.usage.completion_tokens
    assert [r["round"] for r in provenance["rounds"]] == list(range(1, len(provenance["rounds"]) + 1))
    assert sum(r["accepted"] for r in provenance["rounds"]) == reply.model_extra["speculative"]["accepted_tokens"]
    assert "provenance" not in client.chat.completions.create(**GREEDY).choices[0].model_extra


def test_completions_stream_and_each_choice_of_n_carry_their_own(client):
    stream = client.completions.create(
        model="target",
        prompt="Once upon a time, once upon a time",
        max_tokens=24,
        temperature=0.8,
        seed=3,
        n=2,
        stream=True,
        extra_body=PROVENANCE,
    )
    texts, traced = {0: "", 1: ""}, {0: "", 1: ""}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            traced[choice.index] += "".join(t["text"] for t in choice.model_extra["provenance"]["tokens"])
    assert texts == traced and texts[0] != texts[1]


def test_target_only_tokens_are_all_the_targets(client):
    chunks = client.chat.completions.create(**GREEDY, stream=True, extra_body={"speculative": {"provenance": True, "enabled": False}})
    sources = [
        t["source"]
        for c in chunks
        if c.choices and "provenance" in c.choices[0].model_extra
        for t in c.choices[0].model_extra["provenance"]["tokens"]
    ]
    assert sources and set(sources) == {"target"}
