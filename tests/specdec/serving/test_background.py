"""Heavy one-off work runs on threads below the serving threads' priority, and only those threads."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from specdec.serving.background import BACKGROUND_NICENESS, background_executor

# Niceness is per thread on Linux only: elsewhere the threads keep the process's priority (documented no-op).
LOWERS = sys.platform.startswith("linux")


def _own_niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id() if LOWERS else 0)


def test_background_threads_run_below_the_callers_priority_and_leave_it_alone():
    before = _own_niceness()
    with background_executor("test-background") as executor:
        worker = executor.submit(_own_niceness).result()
    assert worker == (min(19, before + BACKGROUND_NICENESS) if LOWERS else before)
    assert _own_niceness() == before


def test_negative_control_a_plain_pool_runs_at_the_callers_priority():
    with ThreadPoolExecutor(max_workers=1) as executor:
        assert executor.submit(_own_niceness).result() == _own_niceness()
