"""Clients that try to take verify down for everyone: maximum-size prompts in a loop, and Verify
streams that hold a session without ever sending anything. Real processes (tests/reliability)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import grpc
import httpx
import pytest
from service_support import CHAT, ServiceProcess, declared_body_reply, free_port, grpc_serving, scrape, wait_until

from specdec.cli.client import generation_options
from specdec.v1 import verify_pb2, verify_pb2_grpc

# The red team's repro: 3.9 MB of prompt (just under the gateway's 4 MiB body limit), 4 tokens asked.
HUGE_PROMPT = {"model": "target", "messages": [{"role": "user", "content": "hello " * 650_000}], "max_tokens": 4}
SMALL = {"model": "target", "messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 4, "temperature": 0}


def _flood(url: str, stop: threading.Event, answers: list) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        while not stop.is_set():
            reply = client.post(CHAT, json=HUGE_PROMPT)
            answers.append((reply.status_code, reply.json()["error"]["param"] if reply.status_code != 200 else None))


def test_two_clients_looping_maximum_size_prompts_leave_ready_and_small_requests_alone(stack, http):
    stop, answers = threading.Event(), []
    flooders = [threading.Thread(target=_flood, args=(stack.url, stop, answers)) for _ in range(2)]
    for thread in flooders:
        thread.start()
    ready, small = [], []
    try:
        wait_until(lambda: answers, 30, "no oversized prompt was answered")
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            ready.append(http.get("/ready").status_code)  # the k8s readiness probe: 1 s health check upstream
            small.append(http.post(CHAT, json=SMALL).status_code)
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in flooders:
            thread.join(timeout=120)
    assert ready and set(ready) == {200}, f"/ready answered {ready}"
    assert set(small) == {200}, small
    # 413 from its Content-Length once the gateway knows the bound, 400 naming messages before
    assert len(answers) >= 4 and set(answers) <= {(400, "messages"), (413, None)}, answers[:10]


def test_oversized_uploads_are_answered_a_few_a_second_and_small_requests_are_not(stack, http):
    """serving.body_refusals_per_s (4): nine uploads at once over the body limit get their 413s about a
    quarter second apart, their uploads paused meanwhile; a small request is not held behind them.
    Before, each refusal came at once, and a client looping them made the gateway drain megabytes per refusal."""
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        refusals = [pool.submit(_timed, declared_body_reply, stack.url, 4 * 1024 * 1024 + 1, b'{"model": "target"') for _ in range(9)]
        time.sleep(0.2)
        small = pool.submit(_timed, http.post, CHAT, json=SMALL)
        answered = [future.result() for future in refusals]
    assert all(reply.startswith(b"HTTP/1.1 413") and b"request_too_large" in reply for reply, _ in answered), answered[0][0][:200]
    times = sorted(at for _, at in answered)
    assert times[-1] - times[0] >= 1.75, times  # 8 turns of 0.25 s after the first
    assert small.result()[0].status_code == 200 and small.result()[1] < times[-1]


def _timed(function, *args, **kwargs):
    """(what `function` returned, when it returned)."""
    return function(*args, **kwargs), time.monotonic()


def test_a_prompt_longer_than_the_context_can_hold_is_refused_before_tokenizing(stack):
    """Refused from its length alone: verify names the field and the limit, and answers at once."""
    with grpc.insecure_channel(f"127.0.0.1:{stack.ports['verify']}", options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        stub = verify_pb2_grpc.VerifyServiceStub(channel)
        request = verify_pb2.GenerateRequest(options=generation_options("hello " * 650_000, max_tokens=4))
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.Generate(request, timeout=30))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith("options.text: ") and "context" in refused.value.details(), refused.value.details()


# --- idle Verify streams ---------------------------------------------------------------------


async def _idle_streams(port: int, count: int, hold_s: float, check) -> list[grpc.StatusCode | None]:
    """`count` Verify streams that send nothing; `check()` runs (in a thread) while they are open.
    Returns each stream's status code (None: still open when the test ended it)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = verify_pb2_grpc.VerifyServiceStub(channel)
        calls = [stub.Verify() for _ in range(count)]
        await asyncio.sleep(hold_s)
        await asyncio.to_thread(check)
        codes = []
        for call in calls:
            codes.append(await call.code() if call.done() else None)
            call.cancel()
        return codes


def test_streams_that_never_open_hold_no_session_and_each_peer_has_a_bound(stack, http):
    seen = {}

    def check() -> None:
        seen["verify_sessions"] = stack.sessions()["verify"]
        seen["reply"] = http.post(CHAT, json=SMALL)

    codes = asyncio.run(_idle_streams(stack.ports["verify"], stack.max_sessions + 4, 1.0, check))
    assert seen["verify_sessions"] == 0, seen
    assert seen["reply"].status_code == 200, seen["reply"].text  # was 429: 16 idle streams pinned every session
    refused = [code for code in codes if code is not None]
    # The default bound (verify_service.max_unopened_streams_per_peer = 16): the rest refused at once.
    assert refused == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 4, codes
    wait_until(lambda: stack.sessions()["verify"] == 0, 5, "verify sessions left")


@pytest.fixture
def impatient_verify(tiny_pair_paths, tmp_path):
    """A verify process (no draft) that closes streams idle for 1.5 s."""
    port, metrics_port = free_port(), free_port()
    verify = ServiceProcess(
        "verify",
        ["--target", str(tiny_pair_paths.target), "--no-draft", "--port", str(port), "--metrics-port", str(metrics_port)],
        tmp_path / "verify.log",
        env={"SPECDEC_VERIFY_SERVICE__STREAM_IDLE_TIMEOUT_S": "1.5"},
    ).start()
    try:
        wait_until(lambda: verify.alive() and grpc_serving(port), 120, f"verify did not serve:\n{verify.output()[-2000:]}", interval=0.2)
        yield port, f"http://127.0.0.1:{metrics_port}/metrics"
    finally:
        verify.stop()


def test_idle_verify_streams_are_closed_after_the_idle_timeout(impatient_verify, tiny_pair_paths):
    port, metrics_url = impatient_verify

    async def scenario():
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = verify_pb2_grpc.VerifyServiceStub(channel)
            unopened, opened = stub.Verify(), stub.Verify()
            await opened.write(verify_pb2.VerifyRequest(open=verify_pb2.VerifyOpen(options=generation_options("Once upon a time"))))
            first = await opened.read()
            assert first.max_candidates > 0 and scrape(metrics_url, "specdec_requests_running") == 1
            started = time.monotonic()
            codes = [await asyncio.wait_for(call.code(), 10) for call in (unopened, opened)]
            return codes, await opened.details(), time.monotonic() - started

    codes, details, waited = asyncio.run(scenario())
    assert codes == [grpc.StatusCode.DEADLINE_EXCEEDED] * 2, codes
    assert "stream_idle_timeout_s" in details, details
    assert waited < 5
    assert scrape(metrics_url, "specdec_requests_running") == 0
