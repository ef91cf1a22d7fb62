"""gRPC server scaffolding shared by the services: options, health, reflection, TLS, sessions, errors."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from pydantic import ValidationError

from specdec.errors import CapacityError, DraftUnavailableError, InvalidRequestError, SpecdecError, describe_validation_error
from specdec.serving.config import TlsSection
from specdec.serving.metrics import ServiceMetrics
from specdec.serving.ports import bind_problem, check_can_listen, listen_error, split_address
from specdec.serving.rpc.tls import channel_credentials, server_credentials
from specdec.serving.rpc.undecodable import RefuseUndecodable
from specdec.serving.telemetry import grpc_client_interceptors, grpc_server_interceptors

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Explicit keepalive: dead peers are noticed in ~40 s, and idle streams between rounds stay open.
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # A peer that comes back is used within ~2 s: gRPC's default backoff grows to 120 s, which would
    # leave callers answering 503 for tens of seconds after the peer is back.
    ("grpc.max_reconnect_backoff_ms", 2_000),
]
SERVER_OPTIONS = [
    *CHANNEL_OPTIONS,
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    # Clients re-resolve DNS only on reconnect: recycling connections every few minutes lets
    # dns:/// round-robin reach replicas added since. Streams in flight get the grace to finish.
    ("grpc.max_connection_age_ms", 300_000),
    ("grpc.max_connection_age_grace_ms", 600_000),
    # gRPC sets SO_REUSEPORT by default: a second server on a busy port would then bind too and the
    # kernel would split connections between the two. Off, a busy port is an error at start.
    ("grpc.so_reuseport", 0),
]


def create_server(
    address: str, service_names: Iterable[str], tls: TlsSection | None = None, owner: str = "gRPC server"
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    """An aio server bound to `address` with health (NOT_SERVING until `mark_serving`) and reflection.

    Returns (server, bound port, health servicer); port 0 in `address` picks a free port. An address it
    cannot listen on is a SpecdecError naming `owner`, the address and why.
    """
    host_port = split_address(address)
    if host_port is not None:
        check_can_listen(owner, *host_port)  # a clear reason: gRPC's own error does not say why
    server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=[RefuseUndecodable(), *grpc_server_interceptors()])
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME]
    reflection.enable_server_reflection(names, server)
    credentials = server_credentials(tls) if tls is not None and tls.server_enabled else None
    try:
        port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    except RuntimeError:  # taken between the check and the bind, or a form the check does not read
        port = 0
    if port == 0:
        reason = bind_problem(*host_port) if host_port is not None else None
        raise listen_error(owner, address, reason or "gRPC could not bind it")
    return server, port, health_servicer


async def set_serving(health_servicer: health.aio.HealthServicer, service_names: Iterable[str], serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ["", *service_names]:
        await health_servicer.set(name, status)


def aio_channel(target: str, tls: TlsSection | None = None, round_robin: bool = True) -> grpc.aio.Channel:
    """A channel to `target` ("host:port" or "dns:///host:port" for round-robin over replicas)."""
    options = [*CHANNEL_OPTIONS, ("grpc.lb_policy_name", "round_robin")] if round_robin else CHANNEL_OPTIONS
    interceptors = grpc_client_interceptors()  # trace context travels with every call
    if tls is not None and tls.client_enabled:
        return grpc.aio.secure_channel(target, channel_credentials(tls), options=options, interceptors=interceptors)
    return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)


class SessionLimit:
    """Counts live sessions, refuses new ones past the cap (RESOURCE_EXHAUSTED), and records each
    finished call in the service's metrics: outcome code and end-to-end latency."""

    def __init__(self, max_sessions: int, metrics: ServiceMetrics) -> None:
        self.max_sessions = max_sessions
        self.metrics = metrics
        self.active = 0
        metrics.running.set_function(lambda: self.active)

    @contextlib.asynccontextmanager
    async def hold(self, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        started, code = time.perf_counter(), "ok"
        try:
            if self.active >= self.max_sessions:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, f"{self.active} sessions are active (max_sessions={self.max_sessions}); retry later"
                )
            self.active += 1
            try:
                yield
            finally:
                self.active -= 1
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except BaseException:
            code = context.code().name if context.code() is not None else "INTERNAL"
            raise
        finally:
            self.metrics.requests.labels(code).inc()
            self.metrics.e2e_latency.observe(time.perf_counter() - started)


_STATUS_FOR_ERROR = [
    (InvalidRequestError, grpc.StatusCode.INVALID_ARGUMENT),
    (DraftUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (CapacityError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (SpecdecError, grpc.StatusCode.FAILED_PRECONDITION),
]


async def abort_for(context: grpc.aio.ServicerContext, error: Exception) -> None:
    """The one place that maps core errors to gRPC statuses; unknown errors become INTERNAL."""
    if isinstance(error, ValidationError):
        details = describe_validation_error(error.errors())
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, details)
    for error_type, code in _STATUS_FOR_ERROR:
        if isinstance(error, error_type):
            await context.abort(code, str(error))
    # The details stay in this log, under a reference the caller can quote: a status message travels to
    # clients (the gateway's 502), and an exception's name and text describe this code, not their request.
    reference = uuid.uuid4().hex[:12]
    log.error("internal error (reference %s)", reference, exc_info=error)
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error (reference {reference}); the service's log has the details")


async def run_until_signalled(server, grace_seconds: float, name: str, announce_seconds: float = 1.0) -> None:
    """`await server.start()`, serve until SIGINT/SIGTERM, then drain.

    Draining: health turns NOT_SERVING at once and stays answerable for `announce_seconds`, so
    probes and load balancers stop sending work; then new calls are refused, in-flight streams
    get `grace_seconds` to finish, and whatever is left is cancelled with an explicit status.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await server.start()
    except BaseException:
        # A model that fails to load (bad path, no memory) ends the process with its one-line error; stopping
        # the bound server here keeps the loop's teardown from adding a traceback after it.
        await server.stop(0)
        raise
    await stop.wait()
    log.info(
        "%s draining: NOT_SERVING now, refusing new calls in %.1fs, in-flight streams get %.0fs", name, announce_seconds, grace_seconds
    )
    await set_serving(server.health, server.service_names, False)
    await asyncio.sleep(min(announce_seconds, grace_seconds))
    await server.stop(grace_seconds)


async def run_in_thread(executor, function, *args):
    """run_in_executor that keeps the caller's context (trace context included) in the worker."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(context.run, function, *args))
