"""Real processes (`specdec serve draft|verify`): a draft that dies, stalls, is absent or is
incompatible never fails a request; verify decodes with the target alone and says `fallback`."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from service_support import free_port, spawn_service, wait_until

from specdec.cli.client import VerifyClient
from specdec.drafters import ModelDrafter
from specdec.drafters.base import DraftRequest
from specdec.drafters.ngram import point_mass_block
from specdec.engines.hf import LoadedModel
from specdec.enums import AcceptanceMode
from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


def _spawn(log: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    # NOTE: to a file, not a pipe: nothing reads a pipe while the process serves, and a process that fills one
    # blocks in its next log write (a draft stalled that way misses its round deadline: a fallback).
    return spawn_service(*args, "--metrics-port", "0", env=env, log=log)


def _wait_serving(client: VerifyClient, process: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text(errors="replace")
        if client.is_serving(timeout=1.0):
            return
        time.sleep(0.2)
    raise AssertionError("service did not become SERVING")


def _wait_drafting(client: VerifyClient, logs: Path, timeout: float = 30.0) -> None:
    """Until a request drafts. NOTE: verify may be SERVING before the draft has bound its port (both start at
    once); its channel then retries with a backoff of up to grpc.max_reconnect_backoff_ms (2 s), and requests in
    that window fall back by design (CI: the warm-up and the next two requests did). A fresh draft's first block
    (lazy initialisation) can also be late on a loaded host."""

    def drafted() -> bool:
        summary = client.generate(PROMPT, max_tokens=8, temperature=0, ignore_eos=True).summary
        return summary.rounds > 0 and not summary.fallback

    try:
        wait_until(drafted, timeout, "a request drafted", interval=0.2)
    except AssertionError as error:
        log = (logs / "verify.log").read_text(errors="replace")
        raise AssertionError(f"{error}; verify log:\n{log[-4000:]}") from error


@pytest.fixture(scope="module")
def processes(tiny_pair_paths, tmp_path_factory):
    draft_port, verify_port = free_port(), free_port()
    logs = tmp_path_factory.mktemp("fallback-services")
    draft = _spawn(logs / "draft.log", "draft", "--draft", str(tiny_pair_paths.draft), "--port", str(draft_port))
    # NOTE: a generous round deadline: on the suite's loaded 2 cores one slow block made a whole request fall
    # back (by design: test_a_draft_slower_than_its_deadline_falls_back tests that); these tests are about processes.
    verify = _spawn(
        logs / "verify.log",
        "verify",
        "--target",
        str(tiny_pair_paths.target),
        "--port",
        str(verify_port),
        "--draft-endpoint",
        f"127.0.0.1:{draft_port}",
        env={"SPECDEC_VERIFY_SERVICE__DRAFT_ROUND_TIMEOUT_MS": "20000"},
    )
    client = VerifyClient(f"127.0.0.1:{verify_port}")
    try:
        _wait_serving(VerifyClient(f"127.0.0.1:{draft_port}"), draft, logs / "draft.log")
        _wait_serving(client, verify, logs / "verify.log")
        _wait_drafting(client, logs)
        yield {"draft": draft, "verify": verify, "client": client}
    finally:
        client.close()
        for process in (draft, verify):
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def greedy_reference(tiny_target):
    ids = tiny_target.tokenizer(PROMPT)["input_ids"]
    request = GenerationRequest(prompt_ids=ids, max_tokens=300, sampling=SamplingParams(temperature=0), speculative=False, ignore_eos=True)
    return SpeculativeGenerator(tiny_target).generate(request).token_ids


def test_two_processes_serve_a_completion(processes, greedy_reference):
    completion = processes["client"].generate(PROMPT, max_tokens=40, temperature=0, ignore_eos=True)
    assert completion.token_ids == greedy_reference[:40]
    assert completion.summary.rounds > 0 and completion.summary.draft_tokens > 0 and not completion.summary.fallback


def test_killing_the_draft_mid_generation_falls_back_and_finishes(processes, greedy_reference):
    stream = processes["client"].generate_stream(PROMPT, max_tokens=300, temperature=0, ignore_eos=True)
    responses = [next(stream), next(stream)]
    assert not responses[-1].round.fallback
    processes["draft"].send_signal(signal.SIGKILL)
    responses.extend(stream)
    token_ids = [token for response in responses for token in response.token_ids]
    assert token_ids == greedy_reference
    final = responses[-1]
    assert final.finish_reason == "length" and final.summary.fallback
    assert any(response.round.fallback for response in responses)


def test_graceful_shutdown_on_sigterm(processes):
    verify = processes["verify"]
    verify.send_signal(signal.SIGTERM)
    assert verify.wait(timeout=30) == 0


def test_a_draft_slower_than_its_deadline_falls_back(make_verify_server, tiny_target, draft_server, greedy_reference):
    server = make_verify_server(tiny_target, f"127.0.0.1:{draft_server.port}", draft_round_timeout_ms=0.01)
    with VerifyClient(f"127.0.0.1:{server.port}") as client:
        completion = client.generate(PROMPT, max_tokens=40, temperature=0, ignore_eos=True)
    assert completion.token_ids == greedy_reference[:40] and completion.summary.fallback


class _SlowDraft:
    """A draft whose first block waits until `prefilled` is set (a long prompt's prefill on a slow draft), and that
    takes `backlog_s` to take in its first run of more than 16 tokens it did not draft (a prediction's)."""

    def __init__(self, inner, prefilled: threading.Event | None = None, backlog_s: float = 0.0) -> None:
        self.inner, self.prefilled, self.backlog_s, self.name = inner, prefilled, backlog_s, "slow"

    def batched(self, options):
        return _SlowDraft(self.inner.batched(options), self.prefilled, self.backlog_s)

    def open(self, request):
        return _SlowDraftSession(self.inner.open(request), self.prefilled, self.backlog_s)


class _SlowDraftSession:
    def __init__(self, session, prefilled: threading.Event | None, backlog_s: float) -> None:
        self.session, self.prefilled, self.backlog_s = session, prefilled, backlog_s

    def __getattr__(self, name):
        return getattr(self.session, name)

    def propose(self, num_tokens: int):
        if num_tokens and self.prefilled is not None:
            self.prefilled.wait(timeout=30)
            self.prefilled = None
        return self.session.propose(num_tokens)

    def feedback(self, num_accepted, appended_ids, accepted_nodes=None):
        if len(appended_ids) > 16 and self.backlog_s:
            time.sleep(self.backlog_s)
            self.backlog_s = 0
        return self.session.feedback(num_accepted, appended_ids, accepted_nodes)


def test_a_draft_still_prefilling_is_not_waited_for_and_drafts_once_caught_up(
    make_draft_server, make_verify_server, tiny_target, tiny_draft, greedy_reference
):
    # Its first block comes only after two rounds have streamed, past the 0.3 s per-round deadline: those rounds
    # are plain. NOTE: released by the test, not after a fixed sleep: a fast host decoded all 300 tokens before a
    # 0.6 s sleep ended (CI), and then nothing was left to draft.
    prefilled = threading.Event()
    draft = make_draft_server(_SlowDraft(ModelDrafter(tiny_draft.model), prefilled=prefilled), tiny_draft)
    server = make_verify_server(tiny_target, f"127.0.0.1:{draft.port}", draft_round_timeout_ms=300)
    with VerifyClient(f"127.0.0.1:{server.port}") as client:
        stream = client.generate_stream(PROMPT, max_tokens=300, temperature=0, ignore_eos=True)
        responses = [next(stream), next(stream), next(stream)]
        prefilled.set()
        responses.extend(stream)
    assert [token for response in responses for token in response.token_ids] == greedy_reference
    summary = responses[-1].summary
    assert not summary.fallback and summary.draft_tokens > 0
    candidates = [response.round.num_candidates for response in responses if response.HasField("round")]
    assert candidates[1] == 0 and max(candidates) > 0  # plain while it caught up, drafted after


def test_a_draft_catching_up_on_a_run_it_did_not_draft_is_not_waited_for(
    make_draft_server, make_verify_server, tiny_target, tiny_draft, greedy_reference
):
    # After 40 tokens drafted beside it (a prediction's, as drafters/prediction.py records them), the draft
    # takes 0.6 s, past the 0.3 s per-round deadline, to take them in. Before: a missed deadline, and the
    # draft dropped for the rest of the request.
    draft = make_draft_server(_SlowDraft(ModelDrafter(tiny_draft.model), backlog_s=0.6), tiny_draft)
    server = make_verify_server(tiny_target, f"127.0.0.1:{draft.port}", draft_round_timeout_ms=300)
    request = DraftRequest(
        prompt_ids=tiny_target.tokenizer(PROMPT)["input_ids"],
        sampling=SamplingParams(temperature=0),
        acceptance=AcceptanceMode.GREEDY,
        seed=0,
        vocab_size=tiny_target.vocab_size,
    )
    session = server.servicer.drafter.open(request)
    try:
        assert len(session.propose(4)) > 0  # the draft has prefilled and answered
        session.feedback(0, greedy_reference[:1])
        session.committed.record_block(point_mass_block(greedy_reference[1:41]))
        session.feedback(40, greedy_reference[41:42])
        started = time.monotonic()
        assert len(session.propose(4)) == 0 and time.monotonic() - started < 0.3  # a plain round, not a wait
        blocks, position = [], 42
        while not any(blocks) and time.monotonic() - started < 5:
            session.feedback(0, greedy_reference[position : position + 1])
            position += 1
            time.sleep(0.05)  # a plain target step
            blocks.append(len(session.propose(4)))
        assert blocks[-1] > 0 and blocks[0] == 0  # plain while it caught up, drafted after
    finally:
        session.close()


def test_an_unreachable_draft_falls_back_quickly(make_verify_server, tiny_target, greedy_reference):
    server = make_verify_server(tiny_target, f"127.0.0.1:{free_port()}")
    with VerifyClient(f"127.0.0.1:{server.port}") as client:
        started = time.monotonic()
        completion = client.generate(PROMPT, max_tokens=40, temperature=0, ignore_eos=True)
        assert time.monotonic() - started < 5
    assert completion.token_ids == greedy_reference[:40] and completion.summary.fallback


def test_a_draft_with_another_vocabulary_is_refused_and_falls_back(
    make_draft_server, make_verify_server, tiny_target, tiny_draft, foreign_tokenizer, greedy_reference
):
    foreign = LoadedModel(model=tiny_draft.model, tokenizer=foreign_tokenizer, source="foreign")
    draft = make_draft_server(ModelDrafter(foreign.model), foreign)
    server = make_verify_server(tiny_target, f"127.0.0.1:{draft.port}")
    with VerifyClient(f"127.0.0.1:{server.port}") as client:
        completion = client.generate(PROMPT, max_tokens=20, temperature=0, ignore_eos=True)
    assert completion.token_ids == greedy_reference[:20] and completion.summary.fallback
    assert completion.summary.draft_tokens == 0


def test_propose_streams_round_robin_over_draft_replicas(make_draft_server, make_verify_server, tiny_target, tiny_draft, greedy_reference):
    replicas = [make_draft_server(ModelDrafter(tiny_draft.model), tiny_draft) for _ in range(2)]
    addresses = ",".join(f"127.0.0.1:{replica.port}" for replica in replicas)
    server = make_verify_server(tiny_target, f"ipv4:{addresses}")  # like dns:///name resolving to two hosts
    with VerifyClient(f"127.0.0.1:{server.port}") as client:
        for _ in range(6):
            completion = client.generate(PROMPT, max_tokens=20, temperature=0, ignore_eos=True)
            assert completion.token_ids == greedy_reference[:20] and not completion.summary.fallback
            assert completion.summary.rounds > 0 and completion.summary.draft_tokens > 0
    served = [
        replica.servicer.metrics.registry.get_sample_value("specdec_draft_requests_total", {"code": "ok"}) or 0 for replica in replicas
    ]
    assert all(count >= 2 for count in served), served


def test_sigterm_with_a_stream_in_flight_flips_health_first_and_finishes_the_stream(tiny_pair_paths, greedy_reference, tmp_path):
    port = free_port()
    verify = _spawn(tmp_path / "verify.log", "verify", "--target", str(tiny_pair_paths.target), "--port", str(port), "--no-draft")
    client = VerifyClient(f"127.0.0.1:{port}")
    try:
        _wait_serving(client, verify, tmp_path / "verify.log")
        stream = client.generate_stream(PROMPT, max_tokens=300, temperature=0, ignore_eos=True, speculative=False)
        responses = [next(stream)]
        verify.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while client.is_serving(timeout=0.5):
            assert time.monotonic() < deadline, "health never turned NOT_SERVING"
            time.sleep(0.02)
        responses.extend(stream)  # the in-flight stream still completes
        assert [t for r in responses for t in r.token_ids] == greedy_reference and responses[-1].finish_reason == "length"
        assert verify.wait(timeout=30) == 0
    finally:
        client.close()
        if verify.poll() is None:
            verify.kill()
