"""One chat request through real gateway, verify and draft processes is one trace, exported over
OTLP/gRPC to a test receiver (opentelemetry-proto's TraceService on loopback)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from specdec.cli.client import VerifyClient
from specdec.cli.processes import free_port
from specdec.serving.telemetry import JsonFormatter


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[dict] = []
        self.lock = threading.Lock()

    def Export(self, request, context):
        with self.lock:
            for resource_spans in request.resource_spans:
                service = next(a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name")
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        attributes = {a.key: _value(a.value) for a in span.attributes}
                        self.spans.append(
                            {
                                "service": service,
                                "name": span.name,
                                "trace": span.trace_id.hex(),
                                "id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(),
                                "attributes": attributes,
                                "events": [event.name for event in span.events],
                            }
                        )
        return trace_service_pb2.ExportTraceServiceResponse()


def _value(value):
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


@pytest.fixture(scope="module")
def receiver():
    servicer = _Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(0)


@pytest.fixture(scope="module")
def traced_stack(receiver, tiny_pair_paths, tmp_path_factory):
    _, otlp_port = receiver
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "HF_HUB_OFFLINE": "1",
        "TQDM_DISABLE": "1",
        "OMP_NUM_THREADS": "1",
        # A generous round deadline: on a loaded host one slow block made the request fall back, and the trace lacked the draft's spans.
        "SPECDEC_VERIFY_SERVICE__DRAFT_ROUND_TIMEOUT_MS": "20000",
        # Drafting every round: the tiny pair's draft costs what its target does, so the load-aware policy may start
        # plain at one session (its own tests), and the trace would lack the draft's spans.
        "SPECDEC_VERIFY_SERVICE__LOAD_AWARE_SPECULATION": "false",
    }
    ports = {name: free_port() for name in ("draft", "verify", "gateway")}
    logs = tmp_path_factory.mktemp("traced")
    commands = {
        "draft": ["draft", "--draft", str(tiny_pair_paths.draft), "--port", str(ports["draft"]), "--metrics-port", "0"],
        "verify": [
            "verify",
            "--target",
            str(tiny_pair_paths.target),
            "--port",
            str(ports["verify"]),
            "--metrics-port",
            "0",
            "--draft-endpoint",
            f"127.0.0.1:{ports['draft']}",
        ],
        "gateway": ["gateway", "--port", str(ports["gateway"]), "--verify-endpoint", f"127.0.0.1:{ports['verify']}"],
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "specdec.cli", "serve", *args, "--host", "127.0.0.1"],
            env=env,
            stdout=(logs / f"{name}.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        for name, args in commands.items()
    ]
    url = f"http://127.0.0.1:{ports['gateway']}"
    try:
        deadline = time.monotonic() + 90
        with VerifyClient(f"127.0.0.1:{ports['draft']}") as draft_health:  # its health stub speaks to any service
            while not (_gateway_ready(url) and draft_health.is_serving(timeout=1)):
                assert time.monotonic() < deadline, "the traced stack did not become ready"
                time.sleep(0.3)
        # NOTE: until verify's channel has reached the draft (it may have started first) requests fall
        # back, and a cold draft answers its first block late: warm up until a request has drafted.
        while _traced_chat(receiver[0], url, "Warm up.", max_tokens=8)[0]["speculative"]["fallback"]:
            assert time.monotonic() < deadline, "verify did not reach the draft"
        yield url, logs
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)


def _traced_chat(receiver: _Receiver, url: str, content: str, max_tokens: int) -> tuple[dict, list[dict]]:
    """A greedy chat's reply and its trace, once every span of it has arrived."""
    with receiver.lock:
        since = len(receiver.spans)
    body = {"model": "target", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    response.raise_for_status()
    reply = response.json()

    def complete(spans: list[dict]) -> bool:
        # Each service exports in its own batches: wait for every drafted round, and the draft's span of each.
        proposes = sum(span["name"] == "draft.propose" for span in spans)
        drafted = reply["speculative"]["rounds"]
        return _drafted_rounds(spans) == drafted <= proposes

    return reply, _wait_for_trace(receiver, since, lambda span: span["name"] == "generate", complete)


def _gateway_ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_one_request_is_one_trace_across_gateway_verify_and_draft(receiver, traced_stack):
    spans_received, _ = receiver
    url, _ = traced_stack
    reply, spans = _traced_chat(spans_received, url, "Tell me about the river.", max_tokens=24)
    services = {"specdec-gateway", "specdec-verify", "specdec-draft"}
    by_id = {span["id"]: span for span in spans}
    assert {span["service"] for span in spans} == services
    roots = [span for span in spans if not span["parent"]]
    assert len(roots) == 1 and roots[0]["service"] == "specdec-gateway"
    assert all(not span["parent"] or span["parent"] in by_id for span in spans), "a span's parent is missing from the trace"
    generate = next(span for span in spans if span["name"] == "generate")
    assert by_id[generate["parent"]]["service"] == "specdec-verify"  # the Generate server span
    rounds = [span for span in spans if span["name"] == "speculative.round"]
    assert rounds and all(span["parent"] == generate["id"] for span in rounds)
    assert sum(span["attributes"]["specdec.accepted"] for span in rounds) == reply["speculative"]["accepted_tokens"]
    assert {
        "specdec.round",
        "specdec.k",
        "specdec.drafted",
        "specdec.draft_ms",
        "specdec.target_ms",
        "specdec.transport_ms",
        "specdec.fallback",
    } <= set(rounds[0]["attributes"])
    proposes = [span for span in spans if span["name"] == "draft.propose"]
    assert reply["speculative"]["rounds"] > 0 and len(proposes) >= reply["speculative"]["rounds"]
    for propose in proposes:  # draft.propose -> draft server span -> verify's Propose client span
        server_span = by_id[propose["parent"]]
        assert server_span["service"] == "specdec-draft" and by_id[server_span["parent"]]["service"] == "specdec-verify"


def _drafted_rounds(spans: list[dict]) -> int:
    return sum(span["name"] == "speculative.round" and span["attributes"]["specdec.drafted"] > 0 for span in spans)


def _wait_for_trace(receiver: _Receiver, since: int, marker, complete, timeout: float = 20.0) -> list[dict]:
    """The trace of the first span after `since` that `marker` picks, once `complete`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with receiver.lock:
            marked = [span for span in receiver.spans[since:] if marker(span)]
            if marked:
                trace_id = marked[0]["trace"]
                spans = [span for span in receiver.spans if span["trace"] == trace_id]
                ids = {span["id"] for span in spans}
                # Complete once every parent has arrived too (parents end, and export, after children).
                if (
                    any(not span["parent"] for span in spans)
                    and all(not span["parent"] or span["parent"] in ids for span in spans)
                    and complete(spans)
                ):
                    return spans
        time.sleep(0.2)
    raise AssertionError(f"no complete trace received; got {[(s['service'], s['name'], s['parent']) for s in receiver.spans]}")


def test_service_logs_are_json_lines_with_trace_ids_and_an_audit_line_without_content(traced_stack):
    import json

    url, logs = traced_stack
    secret_prompt = "my secret prompt text"
    httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "target", "messages": [{"role": "user", "content": secret_prompt}], "max_tokens": 4},
        timeout=30,
    ).raise_for_status()
    time.sleep(0.5)
    lines = [line for line in (logs / "gateway.log").read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object, uvicorn's access log included
    assert any(record["logger"] == "uvicorn.access" for record in records)
    audits = [r for r in records if r.get("audit")]
    assert audits and {"key_id", "client", "model", "prompt_tokens", "completion_tokens", "status", "duration_ms"} <= set(audits[-1])
    assert audits[-1]["status"] == 200 and audits[-1]["trace_id"]
    assert all(secret_prompt not in line for line in (logs / "gateway.log").read_text().splitlines())
    verify_records = [json.loads(line) for line in (logs / "verify.log").read_text().splitlines() if line.strip()]
    assert verify_records and all({"time", "level", "logger", "message"} <= set(r) for r in verify_records)


def test_json_formatter_is_one_object_per_line():
    record = logging.LogRecord("specdec.test", logging.WARNING, __file__, 1, "hello %s", ("world",), None)
    record.fields = {"request_id": "abc"}
    import json

    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "hello world" and entry["level"] == "warning" and entry["request_id"] == "abc"


def test_access_lines_keep_the_path_and_drop_the_query_string():
    from specdec.serving.telemetry import PathsOnly

    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/v1/models?api_key=sk-secret&x=1", "1.1", 401),
        None,
    )
    assert PathsOnly().filter(record)
    assert record.getMessage() == '127.0.0.1:5000 - "GET /v1/models HTTP/1.1" 401'


def test_otlp_export_errors_are_logged_at_most_once_a_minute_with_a_hint():
    from specdec.serving.telemetry import OTLP_EXPORTER_LOGGER, ExportErrorsOncePerInterval

    now = [0.0]
    quiet = ExportErrorsOncePerInterval("http://localhost:4317", clock=lambda: now[0])
    exporter_log = logging.getLogger(OTLP_EXPORTER_LOGGER)
    records: list[logging.LogRecord] = []
    capture = logging.Handler()
    capture.emit = records.append
    exporter_log.addHandler(capture)
    exporter_log.addFilter(quiet)
    try:
        for second in range(0, 130, 5):  # a failed batch every 5 s for 130 s, the collector down
            now[0] = float(second)
            exporter_log.error("Failed to export %s to %s, error code: %s", "traces", "localhost:4317", "UNAVAILABLE")
    finally:
        exporter_log.removeFilter(quiet)
        exporter_log.removeHandler(capture)
    assert len(records) == 3  # at 0, 60 and 120 s: was 26
    assert "Failed to export traces to localhost:4317" in records[0].getMessage()
    assert "OTLP collector at http://localhost:4317" in records[0].getMessage() and "11 left out" in records[1].getMessage()
