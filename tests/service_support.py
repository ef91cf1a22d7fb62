"""Helpers for tests that run real service processes on loopback (`specdec serve ...`) and check
what clients see: free ports, process handles that can be killed and restarted on the same port,
Prometheus scraping, and the OpenAI error-body assertion."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from specdec.cli.processes import free_port, grpc_serving, http_ok, spawn

# One core per service: on a 2-core host they stand in for separate hosts, and idle OpenMP
# workers spinning after a forward pass would otherwise steal the other services' core.
# Verify drafts every round: these tests assert on drafting around faults, and with the tiny pair the
# load-aware policy would rightly stop drafting (it has its own tests).
SERVICE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TQDM_DISABLE": "1",
    "OMP_NUM_THREADS": "1",
    "SPECDEC_VERIFY_SERVICE__LOAD_AWARE_SPECULATION": "false",
}
CHAT = "/v1/chat/completions"
# Greedy and long enough that a fault can land mid-stream (the tiny model's context is 512 tokens).
LONG_GREEDY = {
    "model": "target",
    "messages": [{"role": "user", "content": "Tell me a long story about the sea."}],
    "max_tokens": 400,
    "temperature": 0,
}


def spawn_service(service: str, *args: str, env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    """`specdec serve SERVICE ARGS --host 127.0.0.1`; output to `log`, or a pipe when none."""
    output = log.open("ab") if log is not None else subprocess.PIPE
    return spawn(
        ["serve", service, *args, "--host", "127.0.0.1"],
        env={**os.environ, **SERVICE_ENV, **(env or {})},
        stdout=output,
        stderr=subprocess.STDOUT,
    )


def wait_until(probe, timeout: float, what: str, interval: float = 0.05):
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = probe()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"{what} within {timeout:g}s")


class ServiceProcess:
    """One `specdec serve` process with a fixed port, so it can be killed and started again there."""

    def __init__(self, service: str, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.service, self.args, self.log, self.env = service, args, log, env
        self.process: subprocess.Popen | None = None

    def start(self) -> ServiceProcess:
        self.process = spawn_service(self.service, *self.args, env=self.env, log=self.log)
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers: the fixture's cleanup, never part of a check."""
        if self.alive():
            self.signal(signal.SIGTERM)
            try:
                self.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.wait(timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


START_TIMEOUT_S = 120  # three processes importing torch on 2 busy cores


class LoopbackStack:
    """`specdec serve` draft, verify and gateway processes on free loopback ports, as deployed."""

    def __init__(self, pair, directory, max_sessions: int = 64) -> None:
        self.ports = {name: free_port() for name in ("draft", "verify", "gateway", "draft_metrics", "verify_metrics")}
        ports = self.ports
        self.max_sessions = max_sessions  # verify's sessions, and as many generations admitted by the gateway
        self.draft = ServiceProcess(
            "draft",
            ["--draft", str(pair.draft), "--port", str(ports["draft"]), "--metrics-port", str(ports["draft_metrics"])],
            directory / "draft.log",
        )
        self.verify = ServiceProcess(
            "verify",
            [
                "--target",
                str(pair.target),
                "--port",
                str(ports["verify"]),
                "--metrics-port",
                str(ports["verify_metrics"]),
                "--draft-endpoint",
                f"127.0.0.1:{ports['draft']}",
                "--max-sessions",
                str(max_sessions),
            ],
            directory / "verify.log",
        )
        # connect timeout 1 s: "verify is gone" must be a fast 503, not a 2 s wait per request
        self.gateway = ServiceProcess(
            "gateway",
            ["--port", str(ports["gateway"]), "--verify-endpoint", f"127.0.0.1:{ports['verify']}"],
            directory / "gateway.log",
            env={"SPECDEC_SERVING__UPSTREAM_CONNECT_TIMEOUT_S": "1", "SPECDEC_SERVING__MAX_CONCURRENT_REQUESTS": str(max_sessions)},
        )
        self.url = f"http://127.0.0.1:{ports['gateway']}"

    @property
    def processes(self) -> dict[str, ServiceProcess]:
        return {"draft": self.draft, "verify": self.verify, "gateway": self.gateway}

    def heal(self) -> None:
        """Start whatever is not running, in start order, and wait until each serves."""
        for name, process in self.processes.items():
            if not process.alive():
                process.start()
            wait_until(lambda name=name: self.serving(name), START_TIMEOUT_S, f"{name} did not serve", interval=0.2)

    def serving(self, name: str) -> bool:
        assert self.processes[name].alive(), f"{name} exited:\n{self.processes[name].output()[-3000:]}"
        return http_ok(f"{self.url}/ready") if name == "gateway" else grpc_serving(self.ports[name])

    def sessions(self) -> dict[str, float]:
        """Live sessions per service: verify's `specdec_requests_running` gauge, the draft's
        `specdec_draft_requests_running` and the gateway's `specdec_gateway_requests_running` (each its
        own name: no metric is exported by two services)."""
        urls = {
            "draft": (f"http://127.0.0.1:{self.ports['draft_metrics']}/metrics", "specdec_draft_requests_running"),
            "verify": (f"http://127.0.0.1:{self.ports['verify_metrics']}/metrics", "specdec_requests_running"),
            "gateway": (f"{self.url}/metrics", "specdec_gateway_requests_running"),
        }
        return {name: scrape(url, metric_name) for name, (url, metric_name) in urls.items()}

    def stop(self) -> None:
        for process in reversed(self.processes.values()):
            process.stop()

    @classmethod
    @contextlib.contextmanager
    def running(cls, pair, directory, **options) -> Iterator[LoopbackStack]:
        """A healthy stack for the `with` block; every process is stopped after it."""
        stack = cls(pair, directory, **options)
        try:
            stack.heal()
            yield stack
        finally:
            stack.stop()


def declared_body_reply(gateway_url: str, declared: int, sent: bytes) -> bytes:
    """Send headers declaring `declared` bytes and only `sent` of them; what comes back within 10 s."""
    url = httpx.URL(gateway_url)
    with socket.create_connection((url.host, url.port), timeout=10) as connection:
        connection.sendall(
            f"POST {CHAT} HTTP/1.1\r\nHost: {url.host}\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n".encode()
            + sent
        )
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply.partition(b"\r\n\r\n")[2]) < _content_length(reply):
            chunk = connection.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply


def _content_length(reply: bytes) -> int:
    headers = reply.partition(b"\r\n\r\n")[0].lower()
    return int(headers.partition(b"content-length: ")[2].split(b"\r\n")[0] or 0)


def metric(text: str, name: str, labels: str = "") -> float | None:
    """The value of one sample in a Prometheus exposition, e.g. metric(text, "specdec_requests_running")."""
    pattern = rf"^{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''} (\S+)$"
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else None


def scrape(url: str, name: str, labels: str = "") -> float | None:
    return metric(httpx.get(url, timeout=5).text, name, labels)


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None, code: str | None = None) -> dict:
    """`response` has `status` and the body {"error": {"message", "type", "param", "code"}}."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    return error


def sse_events(lines):
    """The JSON payloads of an SSE stream's `data:` lines, up to and without the final [DONE];
    fails if the stream ends without [DONE] (a request lost silently)."""
    count = 0
    for line in lines:
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            return
        count += 1
        yield json.loads(line[len("data: ") :])
    raise AssertionError(f"the stream ended without [DONE] after {count} events")


def streamed_text(payloads: list) -> str:
    return "".join(choice.get("delta", {}).get("content") or choice.get("text") or "" for p in payloads for choice in p["choices"])


def streamed_speculative(payloads: list) -> dict:
    """The speculative statistics of a stream (its last chunk that has them)."""
    return next(p["speculative"] for p in reversed(payloads) if p.get("speculative"))


def sampling_params_strategy():
    """Hypothesis: SamplingParams messages with any value proto allows (NaN, inf, negatives, unset)."""
    from hypothesis import strategies as st

    from specdec.v1 import common_pb2

    # unset and in-range values are as likely as hostile ones, so generation is reached too
    floats = st.one_of(st.none(), st.none(), st.floats(0.05, 1), st.floats(allow_nan=True, allow_infinity=True))
    fields = {
        "temperature": floats,
        "top_p": floats,
        "min_p": st.one_of(st.none(), st.none(), floats),
        "top_k": st.one_of(st.none(), st.integers(0, 64), st.integers(-(2**31), 2**31 - 1)),
    }
    return st.fixed_dictionaries(fields).map(lambda values: common_pb2.SamplingParams(**{k: v for k, v in values.items() if v is not None}))


# A status detail that names its field first, e.g. "options.sampling.top_p: must be > 0".
FIELD_FIRST = re.compile(r"^[\w.\[\]]+: \S")


def whole_word_bias(tokenizer) -> dict[int, float]:
    """logit_bias +100 on the whole-word tokens (" river", " the", ...): a tiny random model then writes
    text that re-tokenizes to the very same ids, so a `prediction` given as that text aligns token for token."""
    return {token_id: 100.0 for token, token_id in tokenizer.get_vocab().items() if re.fullmatch(r"Ġ[a-z]{2,}", token)}
