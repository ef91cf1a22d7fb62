"""benchmarks/soak.py in its short mode, as CI runs it: more clients than the gateway admits, for a
few seconds, with hostile clients mixed in (maximum-size prompts, a slow reader, idle Verify
streams). Nothing fails (overload is a 429), every hostile client gets an explicit answer, every
session is freed, and RSS returns to baseline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from service_support import SERVICE_ENV

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"


def test_short_soak_completes_everything_or_429s_and_leaks_nothing(tiny_pair_paths, tmp_path):
    report_file = tmp_path / "soak.json"
    # 10 clients against 4 running + 2 queued: some must be turned away with 429
    command = [
        sys.executable,
        str(SOAK),
        "--duration",
        "8",
        "--clients",
        "10",
        "--max-running",
        "4",
        "--max-queue",
        "2",
        "--hostile",
        "--target",
        str(tiny_pair_paths.target),
        "--draft",
        str(tiny_pair_paths.draft),
        "--json",
        str(report_file),
    ]
    finished = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300, env={**os.environ, **SERVICE_ENV})
    assert report_file.exists(), finished.stderr[-3000:]
    report = json.loads(report_file.read_text())
    assert finished.returncode == 0 and report["ok"], report["problems"]
    assert report["completed"] > 0 and report["failed"] == 0 and report["rejected_429"] > 0, report
    assert report["sessions_after"] == {"draft": 0, "verify": 0, "gateway": 0}
    assert report["ttft"]["count"] == report["completed"] and report["ttft"]["p50_ms"] <= report["ttft"]["p99_ms"]
    assert all(mib <= 64 for mib in report["rss_mib"]["growth"].values()), report["rss_mib"]
    hostile = report["hostile"]
    assert hostile.get("oversized_400_messages", 0) + hostile.get("oversized_413_None", 0) > 0 and hostile.get("slow_reader_200", 0) > 0, (
        hostile
    )
    assert hostile.get("idle_opened_DEADLINE_EXCEEDED", 0) > 0, hostile  # closed by verify's idle timeout (3 s here)
