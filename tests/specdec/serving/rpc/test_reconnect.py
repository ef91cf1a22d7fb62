"""A peer that was down for a while is reachable again within seconds of coming back, not after
gRPC's default reconnect backoff (which grows towards 120 s): the gateway's 503s and verify's
fallbacks end when the outage does."""

from __future__ import annotations

import asyncio
import time

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from service_support import free_port

from specdec.serving.rpc.server import aio_channel

OUTAGE_S = 20  # long enough that the default backoff's next attempt is ~6 s after the peer returns


async def _reconnect_delay(port: int) -> float:
    channel = aio_channel(f"127.0.0.1:{port}")
    started = time.monotonic()
    while time.monotonic() - started < OUTAGE_S:  # a client retrying against the dead peer
        try:
            await asyncio.wait_for(channel.channel_ready(), 1)
        except asyncio.TimeoutError:
            pass
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    back = time.monotonic()
    try:
        await asyncio.wait_for(channel.channel_ready(), 30)
        return time.monotonic() - back
    finally:
        await channel.close()
        await server.stop(0)


def test_a_channel_reconnects_within_seconds_after_a_long_outage():
    delay = asyncio.run(_reconnect_delay(free_port()))
    assert delay < 3.5, f"reconnected {delay:.1f}s after the peer came back"
