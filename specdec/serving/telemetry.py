"""OpenTelemetry tracing, configured only by the standard OTEL_* variables, and JSON logs.

Tracing is off, and silent, unless OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is set;
then spans go over OTLP/gRPC. OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER(_ARG), OTEL_RESOURCE_ATTRIBUTES
and the exporter's OTEL_EXPORTER_OTLP_* settings are honoured by the SDK itself.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import time

from opentelemetry import trace

_configured: list[object] = []  # the provider, once set up (a list: no module-level rebinding)


def tracing_enabled() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def setup_tracing(default_service_name: str) -> bool:
    """Install an OTLP exporter when the environment asks for one; returns whether it did."""
    if _configured or not tracing_enabled():
        return bool(_configured)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: default_service_name}
    provider = TracerProvider(resource=Resource.create(attributes))  # reads OTEL_TRACES_SAMPLER itself
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    quiet = ExportErrorsOncePerInterval(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"])
    logging.getLogger(OTLP_EXPORTER_LOGGER).addFilter(quiet)
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)  # flush the last spans on exit
    _configured.append(provider)
    return True


OTLP_EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.grpc.exporter"
EXPORT_ERROR_INTERVAL_S = 60.0


class ExportErrorsOncePerInterval(logging.Filter):
    """The OTLP exporter logs a failure per batch while its collector is down (144 lines in a short run):
    let one through per `interval_s`, with a hint and the count left out since the last one."""

    def __init__(self, endpoint: str, interval_s: float = EXPORT_ERROR_INTERVAL_S, clock=time.monotonic) -> None:
        super().__init__()
        self.endpoint, self.interval_s, self.clock = endpoint, interval_s, clock
        self.last_shown: float | None = None
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        now = self.clock()
        if self.last_shown is not None and now - self.last_shown < self.interval_s:
            self.suppressed += 1
            return False
        hint = (
            f" (traces cannot reach the OTLP collector at {self.endpoint}: start it, or unset OTEL_EXPORTER_OTLP_ENDPOINT "
            f"to turn tracing off; export errors are logged at most once every {self.interval_s:.0f} s"
            + (f", {self.suppressed} left out since the last)" if self.suppressed else ")")
        )
        record.msg, record.args, record.exc_info, record.exc_text = record.getMessage() + hint, (), None, None
        self.last_shown, self.suppressed = now, 0
        return True


def grpc_server_interceptors() -> list:
    if not _configured:
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return [aio_server_interceptor()]


def grpc_client_interceptors() -> list:
    if not _configured:
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    return list(aio_client_interceptors())


def instrument_fastapi(app) -> None:
    if _configured:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(app, excluded_urls="health,ready,metrics")


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the current trace and span ids when there are any."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            entry["trace_id"], entry["span_id"] = f"{context.trace_id:032x}", f"{context.span_id:016x}"
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class PathsOnly(logging.Filter):
    """uvicorn's access lines carry the request's full path: keep it, without the query string, where
    a client may have put a secret (`?api_key=...`) that would otherwise be written verbatim."""

    def filter(self, record: logging.LogRecord) -> bool:
        # uvicorn.access: '%s - "%s %s HTTP/%s" %d' % (client, method, path with query, version, status)
        if isinstance(record.args, tuple) and len(record.args) == 5 and isinstance(record.args[2], str):
            record.args = (*record.args[:2], record.args[2].split("?", 1)[0], *record.args[3:])
        return True


def configure_logging(level: str, json_lines: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(existing, PathsOnly) for existing in access.filters):
        access.addFilter(PathsOnly())
