"""Hostile clients for the benchmarks (soak.py --hostile, hostile_load.py), each looping until `deadline`
and counting what it got in `tally` (a Counter): every outcome must be an explicit answer.

- oversized prompts: chat requests just under the gateway's 4 MiB body limit (expected: 400 `messages`,
  or 429 while the gateway is full);
- slow readers: a streamed n-choice request with 20 top logprobs per token, read through a 4 KB
  buffer: one read, a pause, then the connection is dropped (expected: 200 or 429, and the slot comes back);
- idle gRPC streams: Verify streams that never send `open`, and streams that open and then go silent
  (expected: closed by verify after its stream_idle_timeout_s, or refused past its per-peer bound).
"""

from __future__ import annotations

import asyncio
import collections
import json
import socket
import time

import grpc
import httpx

from specdec.cli.client import generation_options
from specdec.v1 import verify_pb2, verify_pb2_grpc

MAX_BODY_BYTES = 4 * 1024 * 1024
EXPLICIT_STREAM_ENDS = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.CANCELLED}


def oversized_body(body_bytes: int = MAX_BODY_BYTES - 4096) -> bytes:
    """A chat request of about `body_bytes`: 'hello ' repeated, max_tokens 4 (the red team's repro)."""
    body = {"model": "target", "messages": [{"role": "user", "content": "hello " * (body_bytes // 6)}], "max_tokens": 4}
    return json.dumps(body).encode()


async def oversized_prompts(url: str, deadline: float, tally: collections.Counter, body: bytes) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            reply = await client.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
            tally["oversized_seconds"] += time.perf_counter() - started
            param = reply.json().get("error", {}).get("param") if reply.status_code != 200 else None
            tally[f"oversized_{reply.status_code}_{param}"] += 1


async def slow_readers(port: int, deadline: float, tally: collections.Counter, choices: int = 8, pause_s: float = 3.0) -> None:
    body = json.dumps(
        {
            "model": "target",
            "messages": [{"role": "user", "content": "Tell me a long story about the sea."}],
            "max_tokens": 400,
            "n": choices,
            "logprobs": True,
            "top_logprobs": 20,
            "stream": True,
            "temperature": 0,
        }
    ).encode()
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    loop = asyncio.get_running_loop()
    while time.monotonic() < deadline:
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.setblocking(False)
        try:
            await loop.sock_connect(client, ("127.0.0.1", port))
            await loop.sock_sendall(client, request)
            first = await asyncio.wait_for(loop.sock_recv(client, 4096), 60)
            status = first.split(b" ", 2)[1].decode() if first.startswith(b"HTTP/1.1 ") else "no-response"
            tally[f"slow_reader_{status}"] += 1
            # Admitted: the server's writes back up while we wait. Refused: back off briefly, as other clients do.
            await asyncio.sleep(pause_s if status == "200" else 0.25)
        finally:
            client.close()


async def idle_verify_streams(address: str, deadline: float, tally: collections.Counter, unopened: int = 8, opened: int = 4) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = verify_pb2_grpc.VerifyServiceStub(channel)
        holders = [_hold_stream(stub, deadline, tally, send_open=False) for _ in range(unopened)]
        holders += [_hold_stream(stub, deadline, tally, send_open=True) for _ in range(opened)]
        await asyncio.gather(*holders)


async def _hold_stream(stub, deadline: float, tally: collections.Counter, send_open: bool) -> None:
    """Hold a stream that sends nothing (after `open`, if `send_open`); when verify ends it, start another."""
    kind = "opened" if send_open else "unopened"
    while time.monotonic() < deadline:
        call = stub.Verify()
        try:
            if send_open:
                await call.write(verify_pb2.VerifyRequest(open=verify_pb2.VerifyOpen(options=generation_options("Once upon a time"))))
                await call.read()
            code = await asyncio.wait_for(call.code(), max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            tally[f"idle_{kind}_held_to_the_end"] += 1
            return
        except grpc.aio.AioRpcError as error:
            code = error.code()
        finally:
            call.cancel()
        tally[f"idle_{kind}_{code.name}"] += 1
        if code not in EXPLICIT_STREAM_ENDS:
            tally["unexpected"] += 1
        await asyncio.sleep(0.05)


def hostile_failures(tally: collections.Counter) -> list[str]:
    """What in `tally` is not an explicit, expected answer."""
    expected = (
        "oversized_400_messages",
        "oversized_413",
        "oversized_429",
        "oversized_seconds",
        "slow_reader_200",
        "slow_reader_429",
        "idle_",
    )
    return [f"{count:g} x {outcome}" for outcome, count in tally.items() if not outcome.startswith(expected)]
