"""gateway.admission on its own: slot accounting, the bounded queue, its timeout, the rate windows."""

from __future__ import annotations

import asyncio
import time
import types

import pytest

import gateway.admission
from gateway.admission import Admission, RateLimiter
from gateway.errors import OpenAIError


async def hold(admission: Admission, release: asyncio.Event) -> None:
    """Occupy a slot (or a queue place) until `release` is set."""
    async with admission.slot():
        await release.wait()


def assert_overloaded(error: OpenAIError) -> None:
    assert error.status == 429
    assert int(error.headers["Retry-After"]) >= 1
    assert error.body()["error"]["type"] == "rate_limit_error"
    assert error.body()["error"]["code"] == "rate_limit_exceeded"


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


# --- Admission -------------------------------------------------------------------------------


def test_slots_are_counted_and_returned():
    async def scenario():
        admission = Admission(max_running=2, max_queue=2, queue_timeout_s=5)
        release = asyncio.Event()
        queued_for = []

        async def hold_and_record():
            async with admission.slot() as queued_s:
                queued_for.append(queued_s)
                await release.wait()

        tasks = [asyncio.create_task(hold_and_record()) for _ in range(3)]
        await settle()
        assert (admission.running, admission.waiting) == (2, 1)
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert (admission.running, admission.waiting) == (0, 0)
        assert len(queued_for) == 3 and all(seconds >= 0 for seconds in queued_for)
        async with admission.slot():
            assert admission.running == 1
        assert admission.running == 0

    asyncio.run(scenario())


def test_slot_is_returned_when_the_body_raises():
    async def scenario():
        admission = Admission(max_running=1, max_queue=0, queue_timeout_s=1)
        with pytest.raises(RuntimeError):
            async with admission.slot():
                raise RuntimeError("generation failed")
        assert admission.running == 0
        async with admission.slot():  # the one slot is free again
            assert admission.running == 1

    asyncio.run(scenario())


def test_full_queue_is_429_at_once():
    async def scenario():
        admission = Admission(max_running=1, max_queue=1, queue_timeout_s=5)
        release = asyncio.Event()

        holder, waiter = asyncio.create_task(hold(admission, release)), asyncio.create_task(hold(admission, release))
        await settle()
        assert (admission.running, admission.waiting) == (1, 1)
        with pytest.raises(OpenAIError) as refused:
            async with admission.slot():
                pytest.fail("admitted past a full queue")
        assert_overloaded(refused.value)
        assert (admission.running, admission.waiting) == (1, 1)
        release.set()
        await asyncio.wait_for(asyncio.gather(holder, waiter), 5)
        assert (admission.running, admission.waiting) == (0, 0)

    asyncio.run(scenario())


def test_burst_arriving_together_is_bounded_by_running_plus_queue():
    async def scenario():
        admission = Admission(max_running=1, max_queue=1, queue_timeout_s=5)
        release = asyncio.Event()
        outcomes = []

        async def request():
            try:
                async with admission.slot():
                    outcomes.append("admitted")
                    await release.wait()
            except OpenAIError as error:
                assert_overloaded(error)
                outcomes.append("refused")

        tasks = [asyncio.create_task(request()) for _ in range(4)]  # all reach slot() in one loop turn
        await settle()
        assert admission.running + admission.waiting <= 2, (admission.running, admission.waiting)
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert sorted(outcomes) == ["admitted", "admitted", "refused", "refused"]
        assert (admission.running, admission.waiting) == (0, 0)

    asyncio.run(scenario())


def test_no_queue_refuses_only_when_all_slots_are_busy():
    async def scenario():
        admission = Admission(max_running=1, max_queue=0, queue_timeout_s=5)
        async with admission.slot():
            with pytest.raises(OpenAIError) as refused:
                async with admission.slot():
                    pytest.fail("admitted with no slot and no queue")
            assert_overloaded(refused.value)
        async with admission.slot():
            assert admission.running == 1

    asyncio.run(scenario())


def test_queue_timeout_is_429_and_leaves_no_trace():
    async def scenario():
        admission = Admission(max_running=1, max_queue=5, queue_timeout_s=0.05)
        release = asyncio.Event()

        holder = asyncio.create_task(hold(admission, release))
        await settle()
        started = time.perf_counter()
        with pytest.raises(OpenAIError) as refused:
            async with admission.slot():
                pytest.fail("admitted without a free slot")
        assert time.perf_counter() - started >= 0.04
        assert_overloaded(refused.value)
        assert (admission.running, admission.waiting) == (1, 0)
        release.set()
        await asyncio.wait_for(holder, 5)
        assert (admission.running, admission.waiting) == (0, 0)
        async with admission.slot():  # the timed-out waiter took no slot with it
            assert admission.running == 1

    asyncio.run(scenario())


def test_cancelled_waiter_leaves_the_queue():
    async def scenario():
        admission = Admission(max_running=1, max_queue=1, queue_timeout_s=5)
        release = asyncio.Event()

        holder, waiter = asyncio.create_task(hold(admission, release)), asyncio.create_task(hold(admission, release))
        await settle()
        assert admission.waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert (admission.running, admission.waiting) == (1, 0)
        release.set()
        await asyncio.wait_for(holder, 5)
        async with admission.slot():
            assert admission.running == 1
        assert admission.running == 0

    asyncio.run(scenario())


async def hold_generations(admission: Admission, generations: int, release: asyncio.Event, admitted: list) -> None:
    async with admission.slot(generations):
        admitted.append(generations)
        await release.wait()


def test_a_request_takes_one_slot_per_choice_as_verify_counts_sessions():
    async def scenario():
        admission = Admission(max_running=16, max_queue=4, queue_timeout_s=5)
        release, admitted = asyncio.Event(), []
        tasks = [asyncio.create_task(hold_generations(admission, 8, release, admitted)) for _ in range(3)]
        await settle()
        # two n=8 requests fill 16 generations: the third waits instead of reaching verify's cap
        assert admitted == [8, 8] and (admission.running, admission.waiting, admission.generations) == (2, 1, 16)
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert admitted == [8, 8, 8] and (admission.running, admission.waiting, admission.generations) == (0, 0, 0)

    asyncio.run(scenario())


def test_waiters_are_admitted_in_arrival_order_even_when_a_later_one_would_fit():
    async def scenario():
        admission = Admission(max_running=4, max_queue=4, queue_timeout_s=5)
        first, second, admitted = asyncio.Event(), asyncio.Event(), []
        holder = asyncio.create_task(hold_generations(admission, 3, first, admitted))
        await settle()
        wide = asyncio.create_task(hold_generations(admission, 4, second, admitted))
        await settle()
        narrow = asyncio.create_task(hold_generations(admission, 1, second, admitted))  # fits now, but queued behind `wide`
        await settle()
        assert admitted == [3] and admission.waiting == 2
        first.set()
        await settle()
        assert admitted == [3, 4] and admission.waiting == 1
        second.set()
        await asyncio.wait_for(asyncio.gather(holder, wide, narrow), 5)
        assert admitted == [3, 4, 1] and admission.generations == 0

    asyncio.run(scenario())


def test_more_choices_than_the_capacity_take_all_of_it():
    async def scenario():
        admission = Admission(max_running=4, max_queue=1, queue_timeout_s=5)
        async with admission.slot(8):
            assert admission.generations == 4
            with pytest.raises(OpenAIError):
                async with admission.slot(1):
                    pytest.fail("admitted past the capacity")
        assert admission.generations == 0

    asyncio.run(scenario())


def test_a_waiter_that_times_out_or_is_cancelled_takes_no_room_with_it():
    async def scenario():
        admission = Admission(max_running=2, max_queue=4, queue_timeout_s=0.05)
        release, admitted = asyncio.Event(), []
        holder = asyncio.create_task(hold_generations(admission, 2, release, admitted))
        await settle()
        with pytest.raises(OpenAIError) as refused:
            async with admission.slot(2):
                pytest.fail("admitted without room")
        assert_overloaded(refused.value)
        waiter = asyncio.create_task(hold_generations(admission, 1, release, admitted))
        await settle()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert (admission.waiting, admission.generations) == (0, 2)
        release.set()
        await asyncio.wait_for(holder, 5)
        assert (admission.running, admission.waiting, admission.generations) == (0, 0, 0)

    asyncio.run(scenario())


# --- RateLimiter -----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(gateway.admission, "time", types.SimpleNamespace(monotonic=clock.monotonic, perf_counter=time.perf_counter))
    return clock


def test_request_window_frees_after_a_minute(clock):
    limiter = RateLimiter(requests_per_minute=2, tokens_per_minute=None)
    limiter.check("a")
    clock.now += 10
    limiter.check("a")
    clock.now += 35
    with pytest.raises(OpenAIError) as refused:
        limiter.check("a")
    assert_overloaded(refused.value)
    assert refused.value.headers["Retry-After"] == "15"  # the first request leaves the window at +60 s
    limiter.check("b")  # keys are counted apart
    clock.now += 15.5
    limiter.check("a")  # the first request has left the window
    with pytest.raises(OpenAIError):
        limiter.check("a")


def test_refused_requests_do_not_extend_the_window(clock):
    limiter = RateLimiter(requests_per_minute=1, tokens_per_minute=None)
    limiter.check("a")
    for _ in range(5):
        clock.now += 10
        with pytest.raises(OpenAIError):
            limiter.check("a")
    clock.now += 10.5
    limiter.check("a")


def test_token_window_frees_after_a_minute(clock):
    limiter = RateLimiter(requests_per_minute=None, tokens_per_minute=10)
    limiter.check("a")
    limiter.record_tokens("a", 6)
    clock.now += 20
    limiter.check("a")  # 6 < 10
    limiter.record_tokens("a", 4)
    clock.now += 1
    with pytest.raises(OpenAIError) as refused:
        limiter.check("a")
    assert_overloaded(refused.value)
    assert refused.value.headers["Retry-After"] == "39"
    limiter.check("b")
    clock.now += 39.5  # the 6 leave the window; the 4 remain
    limiter.check("a")


def test_no_limits_never_refuse(clock):
    limiter = RateLimiter(requests_per_minute=None, tokens_per_minute=None)
    for _ in range(1000):
        limiter.check("a")
        limiter.record_tokens("a", 1000)
