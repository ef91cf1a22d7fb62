"""A seed reproduces under load (issue 29): in the default configuration the same seeded request at
temperature 1.0, sent 20 times while unseeded requests are in flight, gives one text, with
speculation on and off, and the two are the same text. Real draft, verify and gateway processes.

With rejection acceptance (the default before: still the default without a seed) the draws follow
what the draft proposed, which depends on timing, so the texts could differ under load, and they
differ from speculation off (a seeded target-only decode samples with the coupled noise)."""

from __future__ import annotations

import concurrent.futures
import threading

import httpx
import pytest
from service_support import CHAT, LoopbackStack, sse_events, streamed_speculative, streamed_text

RUNS = 20
PROMPT = [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]
SEEDED = {"model": "target", "messages": PROMPT, "max_tokens": 48, "temperature": 1.0, "seed": 42}
LOAD = {"model": "target", "messages": [{"role": "user", "content": "Write a poem about rain."}], "temperature": 1.0}


@pytest.fixture(scope="module")
def default_stack(tiny_pair_paths, tmp_path_factory):
    """A stack whose verify service keeps its default load-aware policy (the shared one drafts every
    round): under this load it stops drafting for some rounds, and rejection's text then changed
    (3 texts in 20 runs before seeded requests used coupled acceptance)."""
    stack = LoopbackStack(tiny_pair_paths, tmp_path_factory.mktemp("seeded-stack"), max_sessions=16)
    stack.verify.env = {"SPECDEC_VERIFY_SERVICE__LOAD_AWARE_SPECULATION": "true"}  # the default, which SERVICE_ENV turns off
    try:
        stack.heal()
        yield stack
    finally:
        stack.stop()


def _complete(client: httpx.Client, body: dict) -> tuple[str, dict]:
    """(text, speculative stats) of one chat completion, streamed or not."""
    if not body.get("stream"):
        reply = client.post(CHAT, json=body)
        assert reply.status_code == 200, reply.text
        answer = reply.json()
        return answer["choices"][0]["message"]["content"], answer["speculative"]
    with client.stream("POST", CHAT, json=body) as reply:
        assert reply.status_code == 200, reply.read()
        payloads = list(sse_events(reply.iter_lines()))
    return streamed_text(payloads), streamed_speculative(payloads)


def test_a_seeded_request_gives_one_text_under_load_with_speculation_on_and_off(default_stack):
    _check_one_text_under_load(default_stack)


def test_a_seeded_request_gives_one_text_under_load_drafting_every_round(stack):
    _check_one_text_under_load(stack)


def _check_one_text_under_load(stack: LoopbackStack) -> None:
    stop, load_done, load_errors = threading.Event(), [0], []

    def load(index: int) -> None:  # unseeded requests, streamed and not, of several lengths, until the seeded ones are done
        with httpx.Client(base_url=stack.url, timeout=120) as client:
            while not stop.is_set():
                body = {**LOAD, "max_tokens": 16 + 8 * (load_done[0] % 5), "stream": bool(index % 2)}
                try:
                    _complete(client, body)
                    load_done[0] += 1
                except AssertionError as error:  # reported below: the seeded checks must not hang on it
                    load_errors.append(error)
                    return

    def seeded(index: int) -> tuple[bool, str, dict]:
        # Speculation on and off alternate; half the "on" requests draft every round ("always"), the others follow
        # the load-aware policy (which, under this load, may keep them in plain steps), streamed and not.
        enabled, always = index % 2 == 0, index % 8 >= 4
        speculative = {"enabled": enabled, **({"policy": "always"} if enabled and always else {})}
        body = {**SEEDED, "stream": index % 4 < 2, "speculative": speculative}
        with httpx.Client(base_url=stack.url, timeout=120) as client:
            text, stats = _complete(client, body)
        return enabled, text, {**stats, "always": enabled and always}

    loaders = [threading.Thread(target=load, args=(index,), daemon=True) for index in range(4)]
    for thread in loaders:
        thread.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:  # seeded requests overlap each other too
            results = list(pool.map(seeded, range(2 * RUNS)))
    finally:
        stop.set()
        for thread in loaders:
            thread.join(timeout=120)
    assert not load_errors, load_errors[0]
    assert load_done[0] >= 4, "the unseeded load did not run alongside"
    texts = {enabled: [text for on, text, _ in results if on is enabled] for enabled in (True, False)}
    assert len(texts[True]) == len(texts[False]) == RUNS
    assert len(set(texts[False])) == 1, f"speculation off gave {len(set(texts[False]))} texts: {sorted(set(texts[False]))}"
    assert len(set(texts[True])) == 1, f"speculation on gave {len(set(texts[True]))} texts: {sorted(set(texts[True]))}"
    assert texts[True][0] == texts[False][0] != ""
    on_stats = [stats for on, _, stats in results if on]
    always = [stats for stats in on_stats if stats["always"]]
    assert len(always) == RUNS // 2 and all(stats["draft_tokens"] > 0 for stats in always)
    assert not any(stats["fallback"] for stats in on_stats)
    assert all(stats["rounds"] == 0 for on, _, stats in results if not on)
