"""What the service benchmarks share (soak.py, hostile_load.py): a draft + verify + gateway stack on
127.0.0.1, started by the very start sequence of `specdec up`, with each service's RSS and
live-session gauge; latency percentiles; the JSON report."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from specdec.cli.launcher import Stack, UpPlan, start_all
from specdec.cli.processes import free_port
from specdec.cli.tiny_pair import make_tiny_pair


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


_RUNNING_GAUGES = {
    "draft": "specdec_draft_requests_running ",
    "verify": "specdec_requests_running ",
    "gateway": "specdec_gateway_requests_running ",
}


class Services:
    """The running stack: URLs, RSS per process and the live-session gauge each service exports."""

    def __init__(self, stack: Stack, plan: UpPlan) -> None:
        self.pids = {name: process.pid for name, process in stack.children}
        self.url = f"http://127.0.0.1:{plan.gateway_port}"
        self.verify_address = f"127.0.0.1:{plan.verify_port}"
        self.draft_address = f"127.0.0.1:{plan.draft_port}"
        self.metrics = {
            "draft": f"http://127.0.0.1:{plan.draft_metrics_port}/metrics",
            "verify": f"http://127.0.0.1:{plan.verify_metrics_port}/metrics",
            "gateway": f"{self.url}/metrics",
        }

    def cpu_seconds(self) -> dict[str, float]:
        """User + system CPU time each service has used so far (/proc/PID/stat; clock ticks of 1/100 s)."""
        ticks = os.sysconf("SC_CLK_TCK")
        fields = {name: Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split() for name, pid in self.pids.items()}
        return {name: round((int(values[11]) + int(values[12])) / ticks, 2) for name, values in fields.items()}

    def rss(self) -> dict[str, float]:
        return {name: round(rss_mib(pid), 1) for name, pid in self.pids.items()}

    def sessions(self) -> dict[str, float]:
        values = {}
        for name, url in self.metrics.items():
            lines = httpx.get(url, timeout=5).text.splitlines()
            gauge = _RUNNING_GAUGES[name]  # each service's own name (one source per metric)
            values[name] = next(float(line.split()[1]) for line in lines if line.startswith(gauge))
        return values

    def wait_idle(self, timeout_s: float = 15.0) -> dict[str, float]:
        deadline = time.monotonic() + timeout_s
        while True:
            sessions = self.sessions()
            if not any(sessions.values()) or time.monotonic() > deadline:
                return sessions
            time.sleep(0.1)


@contextlib.contextmanager
def loopback_stack(target: str | None, draft: str | None, **sections: dict) -> Iterator[Services]:
    """The stack on free loopback ports, with the tiny random pair when `target` is None; `sections`
    are config sections merged over the defaults (e.g. serving={"max_concurrent_requests": 4})."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per service, as on separate hosts
    with tempfile.TemporaryDirectory(prefix="specdec-bench-") as directory:
        if target is None:  # the tiny random pair, built in seconds
            pair = make_tiny_pair(Path(directory) / "pair")
            target, draft = str(pair.target), str(pair.draft)
        # All on loopback; the clients ask for model "target" whatever the pair.
        config = {
            "model": {"target_path": target, "draft_path": draft},
            "observability": {"log_level": "warning"},
            "serving": {"host": "127.0.0.1", "served_model_name": "target"},
            "draft_service": {"host": "127.0.0.1"},
            "verify_service": {"host": "127.0.0.1"},
        }
        for name, values in sections.items():
            config[name] = {**config.get(name, {}), **values}
        path = Path(directory) / "bench.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        plan = UpPlan(
            config_file=str(path),
            target=None,
            draft=None,
            draft_method=None,
            gateway_port=free_port(),
            draft_port=free_port(),
            verify_port=free_port(),
            draft_metrics_port=free_port(),
            verify_metrics_port=free_port(),
        )
        stack = Stack()
        try:
            start_all(stack, plan)
            yield Services(stack, plan)
        finally:
            stack.stop()


def percentiles(values: list[float]) -> dict:
    """p50 / p90 / p99 / max in milliseconds."""
    if len(values) < 2:
        return {"count": len(values)}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {
        "count": len(values),
        "p50_ms": round(cuts[49] * 1000, 2),
        "p90_ms": round(cuts[89] * 1000, 2),
        "p99_ms": round(cuts[98] * 1000, 2),
        "max_ms": round(max(values) * 1000, 2),
    }


def report(result: dict, json_path: str | None) -> int:
    """Print the report (and write it to `json_path`); the exit status: 0 when result["ok"]."""
    text = json.dumps(result, indent=2)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n", encoding="utf-8")
    return 0 if result["ok"] else 1
