"""The pacing of 413s (specdec/serving/pacing.py RefusalPacer, used by gateway/body_limit.py); the refusals themselves are tested through
a gateway in test_hostile_input.py and, paced, against real processes in tests/reliability."""

from __future__ import annotations

import asyncio

from specdec.serving.pacing import RefusalPacer


def test_refusals_over_the_rate_wait_their_turn_and_a_lone_one_does_not():
    now, waits = [100.0], []

    async def recorded_sleep(seconds: float) -> None:
        waits.append(round(seconds, 6))

    pacer = RefusalPacer(per_second=4, clock=lambda: now[0], sleep=recorded_sleep)
    for _ in range(3):  # three at the same moment: a quarter second apart
        assert asyncio.run(pacer.turn())
    assert waits == [0.0, 0.25, 0.5]
    now[0] += 10  # long after: answered at once
    assert asyncio.run(pacer.turn()) and waits[-1] == 0.0


def test_beyond_max_waiting_refusals_are_shed_at_once():
    async def scenario() -> list[bool]:
        pacer = RefusalPacer(per_second=100, max_waiting=2)
        return list(await asyncio.gather(*(pacer.turn() for _ in range(4))))

    assert asyncio.run(scenario()) == [True, True, False, False]
