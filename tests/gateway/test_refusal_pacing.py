"""Refusals paced per client (gateway/refusal_pacing.py): a client looping requests that can only be
refused waits for its answers; another client, and served requests, are not delayed."""

from __future__ import annotations

import time

import httpx
import pytest

from gateway.app import create_app
from specdec.serving.config import SpecdecConfig

BAD = {"model": "target", "messages": [{"role": "wizard", "content": "hi"}]}  # refused by the schema: no verify needed


@pytest.fixture
def client():
    config = SpecdecConfig(serving={"refusals_per_s_per_client": 10})
    transport = httpx.ASGITransport(app=create_app(config), client=("10.0.0.1", 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://gateway")


def _refusals(client: httpx.AsyncClient, count: int, headers: dict | None = None):
    async def run():
        started = time.perf_counter()
        for _ in range(count):
            assert (await client.post("/v1/chat/completions", json=BAD, headers=headers or {})).status_code == 400
        return time.perf_counter() - started

    return run()


@pytest.mark.anyio
async def test_a_client_looping_refused_requests_gets_its_answers_at_the_configured_pace(client):
    assert await _refusals(client, 1) < 0.09  # a lone refusal is answered at once
    elapsed = await _refusals(client, 6)
    assert 0.45 <= elapsed < 1.5, elapsed  # 10 a second: the 6 after the first wait their turns


@pytest.mark.anyio
async def test_clients_are_paced_apart_and_health_is_never_paced(client):
    await _refusals(client, 4)
    started = time.perf_counter()
    assert await _refusals(client, 1, headers={"Authorization": "Bearer another-client"}) < 0.09
    assert (await client.get("/health")).status_code == 200
    assert time.perf_counter() - started < 0.2
