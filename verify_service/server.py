"""Run the verify service: bind, NOT_SERVING while the target loads, connect the draft, SERVING."""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from specdec.engines import TargetModel, check_tree_support, load_engine, target_sessions
from specdec.errors import SpecdecError
from specdec.memory_plan import ensure_fits
from specdec.serving.config import SpecdecConfig
from specdec.serving.rpc.server import aio_channel, run_until_signalled, set_serving
from specdec.serving.rpc.server import create_server as create_grpc_server
from specdec.v1 import common_pb2, draft_pb2_grpc, verify_pb2, verify_pb2_grpc
from verify_service.remote_drafter import RemoteDrafter
from verify_service.servicer import VerifyServicer

log = logging.getLogger(__name__)
SERVICE_NAMES = [verify_pb2.DESCRIPTOR.services_by_name["VerifyService"].full_name]


class VerifyServer:
    """The verify service's gRPC server; `start()` binds and loads, `stop(grace)` drains."""

    def __init__(self, config: SpecdecConfig, address: str | None = None) -> None:
        settings = config.verify_service
        self.config = config
        self.service_names = SERVICE_NAMES
        self.servicer = VerifyServicer(config)
        self.server, self.port, self.health = create_grpc_server(
            address or f"{settings.host}:{settings.port}", SERVICE_NAMES, config.tls, owner="verify service"
        )
        verify_pb2_grpc.add_VerifyServiceServicer_to_server(self.servicer, self.server)
        self.draft_channel: grpc.aio.Channel | None = None

    async def start(self, target: TargetModel | None = None) -> None:
        await set_serving(self.health, SERVICE_NAMES, False)
        await self.server.start()
        log.info("verify service listening on port %d (NOT_SERVING while the target loads)", self.port)
        if target is None:
            target = await asyncio.get_running_loop().run_in_executor(None, _load_target, self.config)
        drafter = self._connect_draft()
        self.servicer.set_target(target, drafter)
        if drafter is not None:
            await self.servicer.bound_drafting(await self._check_draft(drafter))
        await set_serving(self.health, SERVICE_NAMES, True)
        log.info("verify service SERVING on port %d (draft: %s)", self.port, self.config.verify_service.draft_endpoint or "none")

    def _connect_draft(self) -> RemoteDrafter | None:
        settings = self.config.verify_service
        if not settings.draft_endpoint or not self.config.speculative.enabled:
            return None
        self.draft_channel = aio_channel(settings.draft_endpoint, self.config.tls)
        return RemoteDrafter(
            draft_pb2_grpc.DraftServiceStub(self.draft_channel),
            asyncio.get_running_loop(),
            settings.draft_round_timeout_ms / 1000,
            vocab_fingerprint="",
        )

    async def _check_draft(self, drafter: RemoteDrafter) -> float:
        """Warn early about an unreachable or incompatible draft; requests fall back either way. Returns the ms of a
        draft token that the draft service measured at load (0: unknown)."""
        drafter.vocab_fingerprint = self.servicer.fingerprint
        try:
            status = await drafter.stub.Status(common_pb2.ServerStatusRequest(), timeout=2.0)
        except grpc.aio.AioRpcError as error:
            log.warning(
                "draft service %s not reachable yet (%s); generating with the target alone until it is",
                self.config.verify_service.draft_endpoint,
                error.code().name,
            )
            return 0.0
        if status.vocab_fingerprint and status.vocab_fingerprint != drafter.vocab_fingerprint:
            log.error(
                "draft service %s has a different vocabulary from the target: it will be refused and every "
                "request will decode with the target alone",
                self.config.verify_service.draft_endpoint,
            )
        return status.draft_step_ms

    async def stop(self, grace: float = 5.0) -> None:
        await set_serving(self.health, SERVICE_NAMES, False)
        await self.server.stop(grace)
        if self.draft_channel is not None:
            await self.draft_channel.close()
        for executor in (self.servicer.executor, self.servicer.prep, self.servicer.heavy_prep):
            executor.shutdown(wait=False, cancel_futures=True)


def _load_target(config: SpecdecConfig) -> TargetModel:
    models = config.model
    if not models.target_path:
        raise SpecdecError("no target model: set model.target_path or pass --target")
    ensure_fits(config, "target")
    started = time.perf_counter()
    settings = config.verify_service
    target = load_engine(models, threads=settings.cpu_threads, max_sequences=target_sessions(config))
    check_tree_support(config, target, "model.target_path")
    log.info("loaded target %s in %.1fs (%s)", models.target_path, time.perf_counter() - started, target.describe_memory())
    return target


def create_server(address: str, config: SpecdecConfig | None = None) -> tuple[VerifyServer, int]:
    """A verify server bound to `address` (port 0 picks one); call `await server.start()` next."""
    server = VerifyServer(config or SpecdecConfig(), address)
    return server, server.port


async def serve(config: SpecdecConfig) -> None:
    """Run until SIGINT/SIGTERM, then drain in-flight streams for up to grace_seconds."""
    server = VerifyServer(config)
    settings = config.verify_service
    # /metrics on the gRPC port's interface: `specdec up` keeps both on loopback.
    server.servicer.metrics.serve(settings.metrics_port, settings.host)
    if settings.metrics_port:
        log.info("verify service metrics on %s:%d/metrics", settings.host, settings.metrics_port)
    await run_until_signalled(server, config.verify_service.grace_seconds, "verify service")
