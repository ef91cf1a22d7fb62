"""unless_client_leaves: the work's result, or its cancellation and a 499 once the client disconnects."""

from __future__ import annotations

import asyncio

import pytest

from gateway.disconnect import unless_client_leaves
from gateway.errors import OpenAIError


class FakeHttp:
    """The ASGI receive side of a request whose body is read: it answers only when the client leaves."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()

    async def receive(self) -> dict:
        await self.gone.wait()
        return {"type": "http.disconnect"}


def test_the_result_when_the_work_finishes_first():
    async def scenario():
        http = FakeHttp()
        return await unless_client_leaves(http, asyncio.sleep(0.01, result="answer"))

    assert asyncio.run(scenario()) == "answer"


def test_the_works_own_error_is_raised_as_it_is():
    async def failing():
        raise ValueError("upstream said no")

    with pytest.raises(ValueError, match="upstream said no"):
        asyncio.run(unless_client_leaves(FakeHttp(), failing()))


def test_a_client_that_leaves_cancels_the_work_and_gets_a_499():
    cleaned_up = []

    async def work():
        try:
            await asyncio.sleep(30)
        finally:
            cleaned_up.append(True)

    async def scenario():
        http = FakeHttp()
        asyncio.get_running_loop().call_later(0.05, http.gone.set)
        await unless_client_leaves(http, work())

    with pytest.raises(OpenAIError) as raised:
        asyncio.run(asyncio.wait_for(scenario(), 5))
    assert raised.value.status == 499
    assert cleaned_up == [True], "the work's cleanup ran before the 499"


def test_a_watcher_that_fails_is_not_a_disconnect():
    class BrokenHttp:
        async def receive(self) -> dict:
            raise RuntimeError("Unexpected message received: http.request")

    assert asyncio.run(unless_client_leaves(BrokenHttp(), asyncio.sleep(0.05, result="answer"))) == "answer"


def test_a_cancelled_handler_cancels_its_work():
    started, cancelled = asyncio.Event(), []

    async def work():
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def scenario():
        handler = asyncio.ensure_future(unless_client_leaves(FakeHttp(), work()))
        await started.wait()
        handler.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handler
        await asyncio.sleep(0)  # the work's cancellation is delivered on its next step

    asyncio.run(scenario())
    assert cancelled == [True]
