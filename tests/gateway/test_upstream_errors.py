"""An unexpected verify failure is a 502 that names no code: neither verify's INTERNAL answer nor
gRPC's own for an unhandled servicer exception puts a Python exception's name or text in the body.
What verify logged is found by the reference the body quotes."""

from __future__ import annotations

import logging
import re

import grpc
import httpx
import pytest
from conftest import GatewayThread
from service_support import CHAT, assert_openai_error

from specdec.serving.config import SpecdecConfig
from specdec.serving.rpc.server import abort_for
from specdec.v1 import common_pb2, verify_pb2_grpc

SECRET = "tensor of shape (3, 7) in verify_service/batching.py"


class FailingVerify(verify_pb2_grpc.VerifyServiceServicer):
    """A verify service whose generations fail with a bug: answered by abort_for, or left to gRPC."""

    def __init__(self, through_abort_for: bool) -> None:
        self.through_abort_for = through_abort_for

    async def Status(self, request, context):
        return common_pb2.ServerStatus(model="target")

    async def Generate(self, request, context):
        error = IndexError(SECRET)
        if self.through_abort_for:
            await abort_for(context, error)
        raise error
        yield  # a server-streaming method


@pytest.fixture(params=[True, False], ids=["abort_for", "unhandled"])
def failing_gateway(request, service_loop):
    async def start():
        server = grpc.aio.server()
        verify_pb2_grpc.add_VerifyServiceServicer_to_server(FailingVerify(request.param), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = service_loop.run(start())
    gateway = GatewayThread(SpecdecConfig(serving={"verify_endpoint": f"127.0.0.1:{port}"}))
    yield gateway, request.param
    gateway.stop()
    service_loop.run(server.stop(0))


def test_a_verify_bug_is_a_502_without_the_exception(failing_gateway, caplog):
    gateway, through_abort_for = failing_gateway
    with caplog.at_level(logging.WARNING):
        response = httpx.post(f"{gateway.url}{CHAT}", json={"model": "target", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    error = assert_openai_error(response, 502)
    assert error["type"] == "server_error"
    assert "IndexError" not in response.text and "tensor" not in response.text and "class" not in response.text, error
    if through_abort_for:  # the reference leads to verify's log line, traceback and all
        reference = re.search(r"reference ([0-9a-f]+)", error["message"]).group(1)
        logged = [record for record in caplog.records if reference in record.getMessage()]
        assert logged and logged[0].exc_info and SECRET in str(logged[0].exc_info[1])
    else:  # gRPC's details ("Unexpected <class 'IndexError'>: ...") stay in the gateway's log
        assert any(SECRET in record.getMessage() for record in caplog.records if record.name == "gateway.upstream")
