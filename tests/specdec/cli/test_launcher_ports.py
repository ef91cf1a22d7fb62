"""`specdec up` on ports other servers hold: it refuses before starting anything, naming each busy
port and the flag that moves it, and never announces a stack whose health probe reached someone else."""

from __future__ import annotations

import os
import subprocess
import sys

from port_support import bare_listener, finished, grpc_occupant, http_ready_occupant

from specdec.cli.processes import free_port

REFUSAL_TIMEOUT_S = 120  # a refusal takes a second or two; the old code started services first


def _up(tmp_path, ports: dict[str, int]) -> subprocess.Popen:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    arguments = [arg for flag, port in ports.items() for arg in (flag, str(port))]
    return subprocess.Popen(
        [sys.executable, "-m", "specdec.cli", "up", "--tiny", *arguments],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _ports() -> dict[str, int]:
    return {
        flag: free_port() for flag in ("--gateway-port", "--draft-port", "--verify-port", "--draft-metrics-port", "--verify-metrics-port")
    }


def test_up_refuses_busy_ports_before_starting_anything_naming_each_port_and_its_flag(tmp_path):
    ports = _ports()
    # A gateway port whose /ready answers 200 fooled the old probe into "specdec is up"; a verify port held
    # by a gRPC server was shared with it (SO_REUSEPORT); a busy metrics port was an OSError traceback.
    with http_ready_occupant(ports["--gateway-port"]), grpc_occupant(ports["--verify-port"]), bare_listener(ports["--verify-metrics-port"]):
        status, output = finished(_up(tmp_path, ports), REFUSAL_TIMEOUT_S)
    assert status != 0 and "specdec is up" not in output, output
    assert "Traceback" not in output, output
    (line,) = [line for line in output.splitlines() if line.strip()]
    assert line.startswith("specdec: error: "), output
    for flag in ("--gateway-port", "--verify-port", "--verify-metrics-port"):
        assert f":{ports[flag]} ({flag}): the port is in use" in line, line
    for flag in ("--draft-port", "--draft-metrics-port"):  # free ones are not named
        assert str(ports[flag]) not in line and flag not in line, line
    assert not (tmp_path / "specdec" / "tiny-pair").exists()  # refused before building the pair or starting a child


def test_up_refuses_one_port_given_to_two_services(tmp_path):
    ports = _ports()
    ports["--verify-metrics-port"] = ports["--draft-port"]
    status, output = finished(_up(tmp_path, ports), REFUSAL_TIMEOUT_S)
    assert status != 0 and "Traceback" not in output, output
    assert (
        f"specdec: error: each service needs its own port: --draft-port and --verify-metrics-port share port {ports['--draft-port']}"
        in output
    )
