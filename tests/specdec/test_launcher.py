"""`specdec up`: the three services in start order, a working chat answer, a clean stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_up_tiny_starts_draft_verify_gateway_answers_and_stops_cleanly(tmp_path):
    ports = {"--gateway-port": _free_port(), "--draft-port": _free_port(), "--verify-port": _free_port(),
             "--draft-metrics-port": _free_port(), "--verify-metrics-port": _free_port()}
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    arguments = [arg for flag, port in ports.items() for arg in (flag, str(port))]
    log = (tmp_path / "up.log").open("w")  # the children's logs: a file, so no pipe can fill up
    up = subprocess.Popen([sys.executable, "-m", "specdec.cli", "up", "--tiny", *arguments], env=env,
                          stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    try:
        banner = _read_until(up, "specdec is up", timeout=120, log=tmp_path / "up.log")
        assert f"http://localhost:{ports['--gateway-port']}/v1" in banner
        assert (tmp_path / "specdec" / "tiny-pair" / "target" / "config.json").is_file()  # the tiny pair, built into the cache
        url = f"http://127.0.0.1:{ports['--gateway-port']}/v1/chat/completions"
        body = {"model": "target", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8}
        reply = httpx.post(url, json=body, timeout=30)
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
        assert reply.json()["speculative"]["rounds"] > 0
        verify_metrics = httpx.get(f"http://127.0.0.1:{ports['--verify-metrics-port']}/metrics", timeout=5).text
        assert "specdec_spec_decode_num_draft_tokens_total" in verify_metrics
    finally:
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=60) == 0
    children = subprocess.run(["pgrep", "-f", f"--port {ports['--draft-port']}"], capture_output=True, text=True).stdout
    assert children.strip() == "", "a child service outlived specdec up"


def _read_until(process: subprocess.Popen, marker: str, timeout: float, log) -> str:
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            raise AssertionError(f"specdec up exited: {log.read_text()}")
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError("specdec up did not come up in time")
