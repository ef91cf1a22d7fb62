"""A real draft + verify + gateway process stack for the provenance and playground tests (the draft
service as `specdec serve draft` runs it by default: prompt lookup in front of the model, overlap),
more gateway processes in front of it with other settings, and a proxy that cuts streams short."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from conftest import ServerThread
from service_support import START_TIMEOUT_S, LoopbackStack, ServiceProcess, free_port, http_ok, wait_until
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


@pytest.fixture(scope="package")
def process_stack(tiny_pair_paths, tmp_path_factory):
    with LoopbackStack.running(tiny_pair_paths, tmp_path_factory.mktemp("gateway-stack")) as stack:
        yield stack


@pytest.fixture(scope="module")
def start_gateway(process_stack, tmp_path_factory):
    """start_gateway(env) -> the URL of one more gateway process in front of the stack's verify service."""
    started, directory = [], tmp_path_factory.mktemp("gateways")

    def start(env: dict[str, str]) -> str:
        port = free_port()
        process = ServiceProcess(
            "gateway",
            ["--port", str(port), "--verify-endpoint", f"127.0.0.1:{process_stack.ports['verify']}"],
            directory / f"gateway-{port}.log",
            env=env,
        ).start()
        started.append(process)
        url = f"http://127.0.0.1:{port}"

        def serving() -> bool:
            assert process.alive(), f"the gateway exited:\n{process.output()[-2000:]}"
            return http_ok(f"{url}/ready")

        wait_until(serving, START_TIMEOUT_S, "the gateway did not serve", interval=0.2)
        return url

    yield start
    for process in started:
        process.stop()


class CuttingProxy:
    """A reverse proxy in front of a gateway. Each event stream passes its first `pass_events` events,
    then is held open until the client leaves, or until the test calls `cut()`: then the connection is
    cut mid-body.

    NOTE: the test cuts only once the page shows what passed. Cutting right after the last passed
    event raced the browser: Chromium errors a fetch body's stream as soon as the connection fails,
    and a stream that errors discards the chunks it holds but the page has not read yet (CI once saw
    1 of 5 rounds)."""

    def __init__(self, upstream: str, pass_events: int) -> None:
        self.client = httpx.AsyncClient(base_url=upstream, timeout=60)
        self.pass_events = pass_events
        self.app_routes = [Route("/{path:path}", self.forward, methods=["GET", "POST"])]
        self._cut_requested = threading.Event()  # set from the test's thread; the proxy runs in a ServerThread's loop
        self.url = ""

    def cut(self) -> None:
        self._cut_requested.set()

    async def forward(self, request: Request) -> Response:
        headers = [(name, value) for name, value in request.headers.raw if name.lower() != b"host"]
        upstream = await self.client.send(
            self.client.build_request(request.method, request.url.path, headers=headers, content=await request.body()), stream=True
        )
        kept = {name: value for name, value in upstream.headers.items() if name.lower() not in ("content-length", "transfer-encoding")}
        if not upstream.headers.get("content-type", "").startswith("text/event-stream"):
            body = await upstream.aread()
            await upstream.aclose()
            return Response(body, upstream.status_code, kept)
        return StreamingResponse(self._cut(upstream), upstream.status_code, kept)

    async def _cut(self, upstream: httpx.Response):
        passed = 0
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
                passed += chunk.count(b"data: ")
                if passed >= self.pass_events:
                    break
            while not self._cut_requested.is_set():  # held; Starlette cancels this when the client goes away
                await asyncio.sleep(0.05)
            raise ConnectionAbortedError("cut by the test proxy")  # uvicorn closes the connection mid-body
        finally:
            await upstream.aclose()


@pytest.fixture
def cutting_proxy(process_stack):
    """cutting_proxy(pass_events) -> a started CuttingProxy (its `url`) in front of the stack's gateway."""
    from starlette.applications import Starlette

    started = []

    def start(pass_events: int) -> CuttingProxy:
        proxy = CuttingProxy(process_stack.url, pass_events)
        started.append(ServerThread(Starlette(routes=proxy.app_routes), name="cutting-proxy", log_level="critical"))
        proxy.url = started[-1].url
        return proxy

    yield start
    for server in started:
        server.stop()
