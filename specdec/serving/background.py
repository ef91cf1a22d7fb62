"""A thread pool for a service's one-off heavy work (grammar compiles, tokenizing very long prompts) at a
lower CPU priority than its serving threads.

NOTE: a service pinned to one core (as `specdec up` pins verify and the draft) shares that core between
its serving threads and this work; at the same priority a client looping pathological grammars took half
of it from the passes every other request waits on. On Linux niceness is per thread, so only these
threads run lower; elsewhere they run at the process's priority.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

BACKGROUND_NICENESS = 10  # added to the process's; the gateway's check worker processes run at it too
_MAX_NICENESS = 19


def lower_thread_priority(niceness: int = BACKGROUND_NICENESS) -> None:
    """Run the calling thread `niceness` steps below its current priority (Linux); a no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    thread_id = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, thread_id)
        os.setpriority(os.PRIO_PROCESS, thread_id, min(_MAX_NICENESS, current + niceness))
    except OSError as error:  # lowering one's own priority is always allowed; a sandbox may still refuse
        log.warning("could not lower the priority of a background thread: %s", error)


def background_executor(name: str, workers: int = 1) -> ThreadPoolExecutor:
    """`workers` threads at a lower priority; one, by default: heavy jobs run one at a time."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name, initializer=lower_thread_priority)
