"""The FastAPI application: thin routes over gateway.service.Gateway."""

from __future__ import annotations

import contextlib
import time
import uuid

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.body_limit import BodySizeLimit
from gateway.errors import install_error_handlers
from gateway.playground import install_playground
from gateway.protocol import ChatCompletionRequest, CompletionRequest, ModelList
from gateway.refusal_pacing import ClientRefusalPacing
from gateway.security_headers import SecurityHeaders
from gateway.service import Gateway
from specdec.serving.config import SpecdecConfig
from specdec.serving.telemetry import instrument_fastapi


def create_app(config: SpecdecConfig | None = None) -> FastAPI:
    config = config or SpecdecConfig()
    gateway = Gateway(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await gateway.start()
        yield
        await gateway.close()

    # No /docs or /redoc: FastAPI's pages load unpinned scripts from a CDN. /openapi.json stays.
    app = FastAPI(
        title="specdec", description="OpenAI-compatible speculative-decoding gateway", lifespan=lifespan, docs_url=None, redoc_url=None
    )
    app.state.gateway = gateway
    app.add_middleware(
        BodySizeLimit,
        max_bytes=config.serving.max_body_bytes,
        useful_bytes=gateway.useful_body_bytes,
        refusals_per_second=config.serving.body_refusals_per_s,
    )
    install_error_handlers(app)
    app.include_router(_api_routes(gateway))
    app.include_router(_operational_routes(gateway))
    install_playground(app)

    refusals = ClientRefusalPacing(config.serving.refusals_per_s_per_client)

    @app.middleware("http")
    async def audit_requests(request: Request, call_next):
        request.state.started = time.perf_counter()
        request.state.request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        response = await call_next(request)
        if request.url.path.startswith("/v1/"):
            await refusals.pace(request, response.status_code)
        response.headers["x-request-id"] = request.state.request_id
        # Streams are audited when they end; health checks and scrapes are not requests.
        if request.url.path.startswith("/v1/") and not getattr(request.state, "streaming", False):
            gateway.audit(request, response.status_code)
        return response

    instrument_fastapi(app)
    app.add_middleware(SecurityHeaders)  # added last: outermost, so every response has them (a 413, a 401, ...)
    return app


def _api_routes(gateway: Gateway) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Depends(gateway.guard)])

    @router.get("/models", response_model=ModelList)
    async def list_models() -> ModelList:
        return await gateway.models()

    @router.post("/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request, identity: str = Depends(gateway.guard)):
        return await gateway.complete(body, identity, request)

    @router.post("/completions")
    async def completions(body: CompletionRequest, request: Request, identity: str = Depends(gateway.guard)):
        return await gateway.complete(body, identity, request)

    return router


def _operational_routes(gateway: Gateway) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @router.get("/ready")
    async def ready() -> JSONResponse:
        if await gateway.upstream.ready():
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "unavailable", "reason": "the verify service is not serving"}, status_code=503)

    @router.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return router
