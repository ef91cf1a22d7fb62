"""The restart policy of `specdec up`: backoff doubling to its cap, and giving up only after
`crash_limit` exits of one service within the window."""

from __future__ import annotations

import pytest

from specdec.cli.restarts import CrashRecord, RestartPolicy
from specdec.errors import SpecdecError


def test_backoff_doubles_from_half_a_second_to_ten_and_the_fifth_exit_in_a_minute_gives_up():
    record = CrashRecord(RestartPolicy())
    assert [record.record_exit(float(second)) for second in range(5)] == [0.5, 1.0, 2.0, 4.0, None]
    capped = CrashRecord(RestartPolicy(crash_limit=10))
    assert [capped.record_exit(float(second)) for second in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_exits_older_than_the_window_are_forgotten_so_a_service_that_stayed_up_restarts_fast():
    record = CrashRecord(RestartPolicy(crash_limit=3, crash_window_s=60))
    assert record.record_exit(0.0) == 0.5 and record.record_exit(10.0) == 1.0
    assert record.record_exit(100.0) == 0.5  # both earlier exits are over a minute old
    assert record.record_exit(120.0) == 1.0 and record.record_exit(130.0) is None  # three within 60 s


def test_a_limit_of_one_never_restarts_and_nonsense_limits_are_refused():
    assert CrashRecord(RestartPolicy(crash_limit=1)).record_exit(0.0) is None
    with pytest.raises(SpecdecError, match="--crash-limit must be at least 1"):
        RestartPolicy(crash_limit=0)
    with pytest.raises(SpecdecError, match="--crash-window above 0"):
        RestartPolicy(crash_window_s=0)
