"""A service whose port another server holds refuses to start, in one line that names the address:
no second gRPC server sharing the port (SO_REUSEPORT), no OSError traceback from a busy metrics port,
no gateway left logging uvicorn's bind error."""

from __future__ import annotations

import pytest
from port_support import bare_listener, finished, grpc_occupant, http_ready_occupant
from service_support import spawn_service

from specdec.cli.processes import free_port

EXIT_TIMEOUT_S = 90  # torch's import on 2 busy cores; the refusal comes before any model loads


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "error" in line.lower()]


def _assert_refused_in_one_line(status: int, output: str, expected: str) -> None:
    assert status != 0, output
    assert "Traceback" not in output, output
    assert _error_lines(output) == [f"specdec: error: {expected}"], output


def _model_flags(service: str, tiny_pair_paths) -> list[str]:
    return ["--target", str(tiny_pair_paths.target), "--no-draft"] if service == "verify" else ["--draft", str(tiny_pair_paths.draft)]


@pytest.mark.parametrize("service", ["verify", "draft"])
def test_a_service_refuses_a_grpc_port_another_grpc_server_holds(service, tiny_pair_paths):
    port = free_port()
    # The first server sets SO_REUSEPORT (gRPC's default); a second one that also set it would bind too,
    # and the kernel would split the connections between them.
    with grpc_occupant(port):
        process = spawn_service(service, *_model_flags(service, tiny_pair_paths), "--port", str(port), "--metrics-port", "0")
        status, output = finished(process, EXIT_TIMEOUT_S)
    _assert_refused_in_one_line(status, output, f"{service} service: cannot listen on 127.0.0.1:{port}: the port is in use")


def test_a_service_refuses_a_busy_metrics_port_without_a_traceback(tiny_pair_paths):
    metrics_port = free_port()
    with bare_listener(metrics_port):
        process = spawn_service(
            "draft", *_model_flags("draft", tiny_pair_paths), "--port", str(free_port()), "--metrics-port", str(metrics_port)
        )
        status, output = finished(process, EXIT_TIMEOUT_S)
    _assert_refused_in_one_line(status, output, f"draft service metrics: cannot listen on 127.0.0.1:{metrics_port}: the port is in use")


def test_the_gateway_refuses_a_port_another_http_server_holds():
    port = free_port()
    with http_ready_occupant(port):
        process = spawn_service("gateway", "--port", str(port), "--verify-endpoint", f"127.0.0.1:{free_port()}")
        status, output = finished(process, EXIT_TIMEOUT_S)
    _assert_refused_in_one_line(status, output, f"gateway: cannot listen on 127.0.0.1:{port}: the port is in use")
