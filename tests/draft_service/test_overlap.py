"""Overlapped drafting through real gRPC services (verify + draft on loopback): the same outputs as
without it, pre-drafted blocks used when the guess holds and discarded when not, metrics and spans,
and a cancelled stream leaves no session, cache or pre-draft behind."""

from __future__ import annotations

import time

import pytest
from conftest import start_draft_server, start_verify_server
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from specdec.cli.client import VerifyClient
from specdec.drafters import ModelDrafter

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


class RecordingDrafter:
    """A ModelDrafter that keeps its sessions, to check what close left behind."""

    name = "model"

    def __init__(self, model) -> None:
        self.drafter = ModelDrafter(model)
        self.sessions = []

    def open(self, request):
        self.sessions.append(self.drafter.open(request))
        return self.sessions[-1]

    def batched(self, options):
        self.drafter = self.drafter.batched(options)
        return self


class Stack:
    def __init__(self, service_loop, target, draft_model, loaded, overlap: bool) -> None:
        self.drafter = RecordingDrafter(draft_model)
        self.draft = start_draft_server(service_loop, self.drafter, loaded, overlap=overlap)
        self.verify = start_verify_server(service_loop, target, f"127.0.0.1:{self.draft.port}")
        self.client = VerifyClient(f"127.0.0.1:{self.verify.port}")

    def blocks(self, outcome: str) -> float:
        value = self.draft.servicer.metrics.registry.get_sample_value("specdec_draft_predrafted_blocks_total", {"outcome": outcome})
        return value or 0.0

    def stop(self, service_loop) -> None:
        self.client.close()
        service_loop.run(self.verify.stop(0))
        service_loop.run(self.draft.stop(0))


@pytest.fixture(scope="module")
def stacks(service_loop, tiny_target, tiny_draft):
    made = {overlap: Stack(service_loop, tiny_target, tiny_draft.model, tiny_draft, overlap) for overlap in (False, True)}
    yield made
    for stack in made.values():
        stack.stop(service_loop)


@pytest.fixture(scope="module")
def self_draft_stack(service_loop, tiny_target):
    """Draft == target: under greedy decoding every guess holds."""
    stack = Stack(service_loop, tiny_target, tiny_target.model, tiny_target, overlap=True)
    yield stack
    stack.stop(service_loop)


@pytest.mark.parametrize(
    "settings",
    [
        {"temperature": 0},
        {"temperature": 0.8, "seed": 3, "acceptance": "coupled"},
        {"temperature": 0.8, "seed": 5, "acceptance": "rejection"},
    ],
    ids=["greedy", "coupled", "rejection"],
)
def test_outputs_are_identical_with_and_without_overlap(stacks, settings):
    completions = {
        overlap: stack.client.generate(PROMPT, max_tokens=48, ignore_eos=True, num_draft_tokens=4, **settings)
        for overlap, stack in stacks.items()
    }
    assert completions[True].token_ids == completions[False].token_ids and len(completions[True].token_ids) == 48
    assert [r.num_accepted for r in completions[True].rounds] == [r.num_accepted for r in completions[False].rounds]
    assert not completions[True].summary.fallback


def test_a_wrong_guess_is_discarded_and_no_block_is_drafted_ahead_without_overlap(stacks):
    discarded = stacks[True].blocks("discarded")
    stacks[True].client.generate(PROMPT, max_tokens=40, temperature=0, ignore_eos=True, num_draft_tokens=4)
    assert stacks[True].blocks("discarded") > discarded  # the random tiny draft often misses
    assert stacks[False].blocks("used") == stacks[False].blocks("discarded") == 0


def test_held_guesses_send_the_pre_drafted_block_and_save_draft_time(self_draft_stack):
    metrics = self_draft_stack.draft.servicer.metrics
    used = self_draft_stack.blocks("used")
    proposed = metrics.registry.get_sample_value("specdec_draft_proposed_tokens_total")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    from draft_service import servicer

    original, servicer.tracer = servicer.tracer, provider.get_tracer("test")
    try:
        completion = self_draft_stack.client.generate(PROMPT, max_tokens=40, temperature=0, ignore_eos=True, num_draft_tokens=4)
    finally:
        servicer.tracer = original
    rounds = [r for r in completion.rounds if r.num_candidates]
    assert self_draft_stack.blocks("used") - used >= len(rounds) - 3  # all but the first (and a rare float near-tie)
    assert metrics.registry.get_sample_value("specdec_draft_predraft_saved_seconds_total") > 0
    # the draft's own count (verify's specdec_spec_decode_num_draft_tokens counts the candidates it verified)
    assert metrics.registry.get_sample_value("specdec_draft_proposed_tokens_total") - proposed >= sum(r.num_candidates for r in rounds)
    flags = [span.attributes["specdec.predrafted"] for span in exporter.get_finished_spans() if span.name == "draft.propose"]
    assert flags[0] is False and flags.count(True) >= len(rounds) - 3


def test_cancel_mid_pre_draft_frees_the_session_and_its_cache(stacks, self_draft_stack):
    stack = self_draft_stack
    opened = len(stack.drafter.sessions)
    stream = stack.client.generate_stream(PROMPT, max_tokens=400, temperature=0, ignore_eos=True, num_draft_tokens=8)
    next(stream)
    next(stream)
    stream.cancel()
    deadline = time.monotonic() + 10
    while stack.draft.servicer.sessions.active and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stack.draft.servicer.sessions.active == 0
    (session,) = stack.drafter.sessions[opened:]
    assert session.lm.cached_ids == []  # closed after its last forward pass, pre-draft included
    assert stack.draft.servicer.executor._work_queue.empty()  # nothing left queued for it
