"""Other servers holding a port, for the tests of services that must refuse a busy port: a bare listening
socket, a gRPC server (which sets SO_REUSEPORT, as a first `specdec serve` does), an HTTP server whose
/ready answers 200 (what `specdec up` probes)."""

from __future__ import annotations

import contextlib
import http.server
import socket
import subprocess
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2_grpc


@contextlib.contextmanager
def bare_listener(port: int, host: str = "127.0.0.1") -> Iterator[socket.socket]:
    with socket.socket() as sock:
        sock.bind((host, port))
        sock.listen()
        yield sock


@contextlib.contextmanager
def grpc_occupant(port: int) -> Iterator[grpc.Server]:
    """A gRPC server with gRPC's default options (SO_REUSEPORT on) and a SERVING health service."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)  # "" answers SERVING
    assert server.add_insecure_port(f"127.0.0.1:{port}") == port
    server.start()
    try:
        yield server
    finally:
        server.stop(0)


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def http_ready_occupant(port: int, host: str = "0.0.0.0") -> Iterator[http.server.ThreadingHTTPServer]:
    """An HTTP server answering 200 to every GET, /ready included."""
    server = http.server.ThreadingHTTPServer((host, port), _Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def finished(process: subprocess.Popen, timeout: float) -> tuple[int, str]:
    """(exit status, everything it wrote to stdout and stderr) once `process` exits; fails if it is still running."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(f"still running after {timeout:g}s (it did not refuse the busy port):\n{_text(output)[-3000:]}") from None
    return process.returncode, _text(output)


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""
