"""When `specdec up` restarts a service that exited, and when it gives up on it.

A service that exits unexpectedly is started again after a delay that doubles with each exit within
the crash window (0.5 s, 1 s, 2 s, ... up to 10 s); once it has exited `crash_limit` times within
`crash_window_s`, `up` stops the stack. Bookkeeping only, no processes: the parser reads the defaults
from here without importing gRPC.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from specdec.errors import SpecdecError

FIRST_DELAY_S = 0.5
MAX_DELAY_S = 10.0
CRASH_LIMIT = 5  # exits of one service within the window that stop the stack
CRASH_WINDOW_S = 60.0


@dataclass(frozen=True)
class RestartPolicy:
    crash_limit: int = CRASH_LIMIT
    crash_window_s: float = CRASH_WINDOW_S
    first_delay_s: float = FIRST_DELAY_S
    max_delay_s: float = MAX_DELAY_S

    def __post_init__(self) -> None:
        if self.crash_limit < 1 or self.crash_window_s <= 0:
            raise SpecdecError(
                f"--crash-limit must be at least 1 and --crash-window above 0 (got {self.crash_limit} and {self.crash_window_s:g})"
            )


class CrashRecord:
    """One service's unexpected exits within the policy's window."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self.exits: deque[float] = deque()

    def record_exit(self, now: float) -> float | None:
        """Count an exit at `now` (monotonic seconds): the delay before restarting, or None: give up."""
        self.exits.append(now)
        while self.exits and self.exits[0] <= now - self.policy.crash_window_s:
            self.exits.popleft()
        if len(self.exits) >= self.policy.crash_limit:
            return None
        # Backoff follows the exits within the window, so a service that stayed up a while restarts fast again.
        return min(self.policy.max_delay_s, self.policy.first_delay_s * 2 ** (len(self.exits) - 1))

    @property
    def recent(self) -> int:
        """Exits counted in the window as of the last record_exit."""
        return len(self.exits)
