"""`specdec up` heals itself: a service killed under it is restarted while the others keep serving
(the target alone while the draft is down, fast 503s while verify is), and one that keeps dying
stops the stack with one line and a non-zero exit."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import httpx

from specdec.cli.processes import free_port

RESTART_TIMEOUT_S = 60  # a restarted service imports torch and loads its model on 2 busy cores
CLIENT_TIMEOUT_S = 10  # the gateway says 503 within its 2 s connect timeout; longer is a hang
# Verify drafts every round: with the tiny pair the load-aware policy would rightly stop drafting.
ENV = {"TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "SPECDEC_VERIFY_SERVICE__LOAD_AWARE_SPECULATION": "false"}


def _ports() -> dict[str, int]:
    flags = ("--gateway-port", "--draft-port", "--verify-port", "--draft-metrics-port", "--verify-metrics-port")
    return {flag: free_port() for flag in flags}


@contextlib.contextmanager
def _up(tmp_path, ports: dict[str, int], *extra: str):
    """`specdec up --tiny` until its banner; after the block it is stopped with SIGTERM (exit 0) unless it
    already exited, and no child may outlive it."""
    arguments = [arg for flag, port in ports.items() for arg in (flag, str(port))]
    log_path = tmp_path / "up.log"
    with log_path.open("w") as log:  # the children log there too: a file, so no pipe fills up
        up = subprocess.Popen(
            [sys.executable, "-m", "specdec.cli", "up", "--tiny", *extra, *arguments],
            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path), **ENV},
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
    try:
        _read_until_banner(up, log_path)
        yield up
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            assert up.wait(timeout=60) == 0, log_path.read_text()
    for service in ("draft", "verify", "gateway"):
        assert _pids(service, ports) == set(), f"{service} outlived specdec up"


def _read_until_banner(up: subprocess.Popen, log_path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = up.stdout.readline()
        if not line and up.poll() is not None:
            raise AssertionError(f"specdec up exited: {log_path.read_text()}")
        if '"max_tokens": 32' in line:  # the banner's curl line: every service is healthy
            return
    raise AssertionError("specdec up did not come up in time")


def _pids(service: str, ports: dict[str, int]) -> set[int]:
    flag = "--gateway-port" if service == "gateway" else f"--{service}-port"
    found = subprocess.run(["pgrep", "-f", f"serve {service} .*--port {ports[flag]}"], capture_output=True, text=True).stdout
    return {int(pid) for pid in found.split()}


def _only_pid(service: str, ports: dict[str, int]) -> int:
    (pid,) = _pids(service, ports)
    return pid


def _chat(ports: dict[str, int]) -> httpx.Response:
    body = {"model": "target", "messages": [{"role": "user", "content": "Hello! What can you do?"}], "max_tokens": 16, "temperature": 0}
    return httpx.post(f"http://127.0.0.1:{ports['--gateway-port']}/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT_S)


def _drafted(reply: dict) -> bool:
    return reply["speculative"]["draft_tokens"] > 0 and not reply["speculative"]["fallback"]


def _restarts_gauge(port: int, name: str) -> float:
    lines = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text.splitlines()
    return next(float(line.split()[1]) for line in lines if line.startswith(f"{name} "))


def _up_lines(tmp_path) -> list[str]:
    return [line for line in (tmp_path / "up.log").read_text().splitlines() if line.startswith(("specdec up:", "specdec: error:"))]


def test_a_killed_draft_is_restarted_and_requests_meanwhile_complete_with_the_target_alone(tmp_path):
    ports = _ports()
    with _up(tmp_path, ports):
        before = _chat(ports).json()
        assert _drafted(before), before
        old_pid = _only_pid("draft", ports)
        os.kill(old_pid, signal.SIGKILL)
        replies, deadline = [], time.monotonic() + RESTART_TIMEOUT_S
        while not replies or not _drafted(replies[-1]):
            assert time.monotonic() < deadline, "the draft was not drafting again in time"
            reply = _chat(ports)
            assert reply.status_code == 200, reply.text
            replies.append(reply.json())
            # Greedy: the target alone gives the very tokens speculation gave.
            assert replies[-1]["choices"][0]["message"]["content"] == before["choices"][0]["message"]["content"]
            time.sleep(0.2)
        assert any(reply["speculative"]["fallback"] for reply in replies)  # some ran while the draft was down
        assert _only_pid("draft", ports) != old_pid
        assert _restarts_gauge(ports["--draft-metrics-port"], "specdec_draft_process_restarts") == 1
        assert _restarts_gauge(ports["--verify-metrics-port"], "specdec_process_restarts") == 0  # verify ran on, untouched
    lines = _up_lines(tmp_path)
    assert "specdec up: draft exited with status -9 (SIGKILL); restart 1 in 0.5s (1 exits within 60s; 5 stop the stack)" in lines, lines
    assert "specdec up: draft is healthy again (restart 1)" in lines, lines


def test_a_killed_verify_means_fast_503s_with_retry_after_until_it_is_back(tmp_path):
    ports = _ports()
    with _up(tmp_path, ports):
        before = _chat(ports)
        assert before.status_code == 200, before.text
        os.kill(_only_pid("verify", ports), signal.SIGKILL)
        refused, deadline = 0, time.monotonic() + RESTART_TIMEOUT_S
        while (reply := _chat(ports)).status_code != 200:  # a hang is httpx's timeout error, failing the test
            assert reply.status_code == 503 and int(reply.headers["Retry-After"]) >= 1, (reply.status_code, reply.headers, reply.text)
            assert time.monotonic() < deadline, "verify did not serve again in time"
            refused += 1
            time.sleep(0.2)
        assert refused > 0
        assert reply.json()["choices"][0]["message"]["content"] == before.json()["choices"][0]["message"]["content"]
        assert _restarts_gauge(ports["--verify-metrics-port"], "specdec_process_restarts") == 1
    assert any(line.startswith("specdec up: verify exited with status -9 (SIGKILL); restart 1 in 0.5s") for line in _up_lines(tmp_path))


def test_a_service_that_keeps_dying_stops_the_stack_with_one_line_and_exit_1(tmp_path):
    ports = _ports()
    with _up(tmp_path, ports, "--crash-limit", "3", "--crash-window", "120") as up:
        killed: set[int] = set()
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while up.poll() is None:  # kill each draft process as soon as it appears
            assert time.monotonic() < deadline, f"specdec up did not give up: {_up_lines(tmp_path)}"
            for pid in _pids("draft", ports) - killed:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            time.sleep(0.05)
        assert up.wait() == 1
    assert len(killed) == 3
    lines = _up_lines(tmp_path)
    assert [line for line in lines if line.startswith("specdec up: draft exited")] == [
        "specdec up: draft exited with status -9 (SIGKILL); restart 1 in 0.5s (1 exits within 120s; 3 stop the stack)",
        "specdec up: draft exited with status -9 (SIGKILL); restart 2 in 1s (2 exits within 120s; 3 stop the stack)",
    ], lines
    errors = [line for line in lines if line.startswith("specdec: error:")]
    assert errors == [
        "specdec: error: draft exited 3 times within 120s (last with status -9 (SIGKILL)); gave up restarting it "
        "and stopped the others (limits: --crash-limit, --crash-window)"
    ], lines
    assert lines[-1] == errors[0]  # the last word
