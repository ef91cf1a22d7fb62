"""Heavy one-off work runs on threads below the serving threads' priority, and only those threads."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from specdec.serving.background import BACKGROUND_NICENESS, background_executor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="niceness is per thread on Linux only")


def _own_niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_background_threads_run_below_the_callers_priority_and_leave_it_alone():
    before = _own_niceness()
    with background_executor("test-background") as executor:
        worker = executor.submit(_own_niceness).result()
    assert worker == min(19, before + BACKGROUND_NICENESS)
    assert _own_niceness() == before


def test_negative_control_a_plain_pool_runs_at_the_callers_priority():
    with ThreadPoolExecutor(max_workers=1) as executor:
        assert executor.submit(_own_niceness).result() == _own_niceness()
