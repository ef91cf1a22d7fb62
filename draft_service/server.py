"""Run the draft service: bind, report NOT_SERVING, load the drafter, then SERVING."""

from __future__ import annotations

import asyncio
import logging
import time

from draft_service.servicer import DraftServicer, LoadedDrafter
from specdec.assembly import load_draft_side
from specdec.batching.service import service_batching
from specdec.memory_plan import ensure_fits
from specdec.serving.config import SpecdecConfig
from specdec.serving.metrics import DraftMetrics
from specdec.serving.rpc.server import create_server as create_grpc_server
from specdec.serving.rpc.server import run_until_signalled, set_serving
from specdec.v1 import draft_pb2, draft_pb2_grpc

log = logging.getLogger(__name__)
SERVICE_NAMES = [draft_pb2.DESCRIPTOR.services_by_name["DraftService"].full_name]


class DraftServer:
    """The draft service's gRPC server; `start()` binds and loads, `stop(grace)` drains."""

    def __init__(self, config: SpecdecConfig, address: str | None = None) -> None:
        settings = config.draft_service
        self.config = config
        self.service_names = SERVICE_NAMES
        metrics = DraftMetrics()
        self.servicer = DraftServicer(
            settings.max_sessions,
            metrics,
            overlap=settings.overlap,
            batching=service_batching(config.draft_service, config.serving.max_batch_size, metrics.registry),
            open_timeout_s=settings.stream_idle_timeout_s,
        )
        self.server, self.port, self.health = create_grpc_server(
            address or f"{settings.host}:{settings.port}", SERVICE_NAMES, config.tls, owner="draft service"
        )
        draft_pb2_grpc.add_DraftServiceServicer_to_server(self.servicer, self.server)

    async def start(self, loaded: LoadedDrafter | None = None) -> None:
        await set_serving(self.health, SERVICE_NAMES, False)
        await self.server.start()
        log.info("draft service listening on port %d (NOT_SERVING while the drafter loads)", self.port)
        if loaded is None:
            loaded = await asyncio.get_running_loop().run_in_executor(None, _load, self.config)
        self.servicer.set_drafter(loaded)
        await self.servicer.time_draft_step()
        await set_serving(self.health, SERVICE_NAMES, True)
        log.info("draft service SERVING on port %d with drafter %s", self.port, loaded.drafter.name)

    async def stop(self, grace: float = 5.0) -> None:
        await set_serving(self.health, SERVICE_NAMES, False)
        await self.server.stop(grace)
        for executor in (self.servicer.executor, self.servicer.grammar_prep):
            executor.shutdown(wait=False, cancel_futures=True)


def _load(config: SpecdecConfig) -> LoadedDrafter:
    ensure_fits(config, "draft")
    started = time.perf_counter()
    side = load_draft_side(config)
    memory = side.model.describe_memory() if side.model is not None else "no weights"
    log.info("loaded %s drafter in %.1fs (%s)", side.drafter.name, time.perf_counter() - started, memory)
    return LoadedDrafter(side.drafter, side.model)


def create_server(address: str, config: SpecdecConfig | None = None) -> tuple[DraftServer, int]:
    """A draft server bound to `address` (port 0 picks one); call `await server.start()` next."""
    server = DraftServer(config or SpecdecConfig(), address)
    return server, server.port


async def serve(config: SpecdecConfig) -> None:
    """Run until SIGINT/SIGTERM, then drain in-flight streams for up to grace_seconds."""
    server = DraftServer(config)
    settings = config.draft_service
    # /metrics on the gRPC port's interface: `specdec up` keeps both on loopback.
    server.servicer.metrics.serve(settings.metrics_port, settings.host)
    if settings.metrics_port:
        log.info("draft service metrics on %s:%d/metrics", settings.host, settings.metrics_port)
    await run_until_signalled(server, config.draft_service.grace_seconds, "draft service")
