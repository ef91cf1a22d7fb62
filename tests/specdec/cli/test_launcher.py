"""`specdec up`: the three services in start order, a working chat answer, a clean stop."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import signal
import subprocess
import sys
import time

import grpc
import httpx

from specdec.cli.launcher import DRAFT_NICENESS_ON_CPU, PairTuning, default_pair_tuning, split_cores
from specdec.cli.processes import free_port
from specdec.v1 import common_pb2, draft_pb2_grpc, verify_pb2_grpc


def _ports() -> dict[str, int]:
    return {
        "--gateway-port": free_port(),
        "--draft-port": free_port(),
        "--verify-port": free_port(),
        "--draft-metrics-port": free_port(),
        "--verify-metrics-port": free_port(),
    }


def _terminate(up: subprocess.Popen) -> None:
    up.send_signal(signal.SIGTERM)


@contextlib.contextmanager
def _specdec_up(
    tmp_path, ports: dict[str, int], *extra: str, env: dict[str, str] | None = None, timeout: float = 120, stop=_terminate, preexec_fn=None
):
    """`specdec up` as a user runs it; yields its banner, then stops it (`stop`: SIGTERM) and checks no child outlives it."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    arguments = [arg for flag, port in ports.items() for arg in (flag, str(port))]
    log = (tmp_path / "up.log").open("w")  # the children's logs: a file, so no pipe can fill up
    up = subprocess.Popen(
        [sys.executable, "-m", "specdec.cli", "up", *extra, *arguments],
        env=env,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,
        preexec_fn=preexec_fn,  # noqa: PLW1509 (one system call)
    )
    try:
        yield _read_until(up, '"max_tokens": 32', timeout=timeout, log=tmp_path / "up.log")  # the banner, to its curl line
    finally:
        stop(up)
        assert up.wait(timeout=60) == 0
    children = subprocess.run(["pgrep", "-f", f"--port {ports['--draft-port']}"], check=False, capture_output=True, text=True).stdout
    assert children.strip() == "", "a child service outlived specdec up"


def _chat(ports: dict[str, int], model: str, max_tokens: int, key: str | None = None, status: int = 200, **fields) -> dict:
    url = f"http://127.0.0.1:{ports['--gateway-port']}/v1/chat/completions"
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Hello! What can you do?"}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **fields,
    }
    reply = httpx.post(url, json=body, timeout=120, headers={"Authorization": f"Bearer {key}"} if key else {})
    assert reply.status_code == status, reply.text
    return reply.json()


def _listening_addresses(port: int) -> set[str]:
    """The local addresses of the sockets listening on `port` (from /proc/net/tcp and tcp6)."""
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as lines:
            for line in list(lines)[1:]:
                local, state = line.split()[1], line.split()[3]
                address, port_hex = local.split(":")
                if state == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                    ip = ipaddress.ip_address(bytes.fromhex(address)[::-1] if len(address) == 8 else _ipv6(address))
                    addresses.add(str(getattr(ip, "ipv4_mapped", None) or ip))  # gRPC listens on ::ffff:127.0.0.1
    return addresses


def _ipv6(address: str) -> bytes:
    return b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, 32, 8))


def test_up_tiny_starts_draft_verify_gateway_answers_and_stops_cleanly(tmp_path):
    ports = _ports()
    with _specdec_up(tmp_path, ports, "--tiny") as banner:
        assert f"http://localhost:{ports['--gateway-port']}/v1" in banner
        assert (tmp_path / "specdec" / "tiny-pair" / "target" / "config.json").is_file()  # the tiny pair, built into the cache
        reply = _chat(ports, "target", 8, speculative={"policy": "always"})  # drafts whatever the load-aware policy chose
        assert reply["choices"][0]["message"]["content"] and reply["speculative"]["rounds"] > 0
        verify_metrics = httpx.get(f"http://127.0.0.1:{ports['--verify-metrics-port']}/metrics", timeout=5).text
        assert "specdec_spec_decode_num_draft_tokens_total" in verify_metrics
        # No GPU: the draft shares the cores with the target, which goes first where they contend.
        ours = os.nice(0)
        assert _niceness(f"serve draft .*--port {ports['--draft-port']}") == ours + DRAFT_NICENESS_ON_CPU
        assert _niceness(f"serve verify .*--port {ports['--verify-port']}") == ours  # negative control


def test_ctrl_c_to_the_process_group_stops_up_started_with_sigint_ignored(tmp_path):
    """`specdec up &` from a script inherits SIGINT ignored; a Ctrl-C to its group must stop it, not restart the
    children it reached."""
    ports = _ports()
    as_background_job = functools.partial(signal.signal, signal.SIGINT, signal.SIG_IGN)
    ctrl_c = lambda up: os.killpg(up.pid, signal.SIGINT)
    with _specdec_up(tmp_path, ports, "--tiny", stop=ctrl_c, preexec_fn=as_background_job):
        assert _chat(ports, "target", 4)["choices"][0]["message"]["content"]
    assert "; restart " not in (tmp_path / "up.log").read_text()  # up stopped; it restarted no child


def _niceness(pattern: str) -> int:
    (pid,) = subprocess.run(["pgrep", "-f", pattern], check=True, capture_output=True, text=True).stdout.split()
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[16])  # field 19, nice (after pid and comm)


def _cpus(pattern: str) -> set[int]:
    (pid,) = subprocess.run(["pgrep", "-f", pattern], check=True, capture_output=True, text=True).stdout.split()
    return os.sched_getaffinity(int(pid))


def test_up_with_api_keys_set_comes_up_and_serves_only_with_a_key(tmp_path):
    ports = _ports()
    key = "sk-up-test-3141"
    with _specdec_up(tmp_path, ports, "--tiny", env={"SPECDEC_API_KEYS": f"{key},another-key"}) as banner:
        assert "model 'target'" in banner and "Authorization: Bearer" in banner
        assert key not in banner  # the banner shows where the key goes, never the key
        reply = _chat(ports, "target", 8, key=key)
        assert reply["choices"][0]["message"]["content"]
        _chat(ports, "target", 8, status=401)
        # The gRPC and metrics ports have no authentication: `up` keeps them on the loopback interface.
        for flag in ("--draft-port", "--verify-port", "--draft-metrics-port", "--verify-metrics-port"):
            assert _listening_addresses(ports[flag]) == {"127.0.0.1"}, (flag, _listening_addresses(ports[flag]))


def test_up_with_no_arguments_chats_with_smollm2_drafted_by_its_own_gguf(tmp_path, default_target_dir):
    ports = _ports()
    # The models directory the session fixture converted SmolLM2 into: `specdec up` finds it there.
    with _specdec_up(tmp_path, ports, env={"SPECDEC_MODELS_DIR": str(default_target_dir.parent)}, timeout=300) as banner:
        assert "model 'smollm2-135m-instruct'" in banner
        reply = _chat(ports, "smollm2-135m-instruct", 24)
        assert reply["choices"][0]["message"]["content"].strip()
        # Whether the first request drafts is the host's (the load-aware policy's start from step costs timed at load,
        # which verify logs); "always" drafts whatever it chose, so the pair's drafting is what is checked here.
        assert re.search(r"drafting gains at most [0-9.]+x at one session", (tmp_path / "up.log").read_text())
        stats = _chat(ports, "smollm2-135m-instruct", 24, speculative={"policy": "always"})["speculative"]
        assert stats["rounds"] > 0 and stats["accepted_tokens"] > 0 and not stats["fallback"]
        with grpc.insecure_channel(f"127.0.0.1:{ports['--draft-port']}") as channel:
            status = draft_pb2_grpc.DraftServiceStub(channel).Status(common_pb2.ServerStatusRequest(), timeout=10)
        assert status.drafter == "gguf" and status.model == str(default_target_dir.parent / "SmolLM2-135M-Instruct.Q4_1.gguf")
        with grpc.insecure_channel(f"127.0.0.1:{ports['--verify-port']}") as channel:
            verify_status = verify_pb2_grpc.VerifyServiceStub(channel).Status(common_pb2.ServerStatusRequest(), timeout=10)
        assert verify_status.model == str(default_target_dir.parent / "smollm2-135m-instruct-bf16.gguf")  # the llama_cpp engine's bf16
        # Each on cores of its own, as on devices of their own (split_cores).
        draft_cpus, verify_cpus = (
            _cpus(f"serve draft .*--port {ports['--draft-port']}"),
            _cpus(f"serve verify .*--port {ports['--verify-port']}"),
        )
        assert draft_cpus and verify_cpus and not draft_cpus & verify_cpus


def test_split_cores_gives_the_draft_one_core_and_the_target_the_rest():
    assert split_cores({0, 1}) == (frozenset({1}), frozenset({0}))
    assert split_cores({2, 5, 7, 9}) == (frozenset({9}), frozenset({2, 5, 7}))
    assert split_cores({3}) is None  # one core: nothing to split


def test_default_pair_on_a_cpu_host_drafts_three_gguf_tokens_on_one_thread(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_pair_tuning("gguf") == PairTuning(num_draft_tokens=4, draft_flags=("--gguf-threads=1",), own_cores=True)
    # Without llama-cpp-python the distilled draft's tuning: lookup 2 tokens, or 1 from the draft model.
    assert default_pair_tuning(None) == PairTuning(
        num_draft_tokens=2, draft_flags=("--model-draft-tokens=1", "--prompt-lookup-min-ngram=1")
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_pair_tuning("gguf") is None  # a GPU host runs the configured defaults


def test_without_llama_cpp_the_default_pair_drafts_with_the_distilled_draft(monkeypatch, default_target_dir, capsys):
    import importlib.util

    from specdec.cli.launcher import default_pair_paths
    from specdec.default_models import DRAFT_DIR

    monkeypatch.setenv("SPECDEC_MODELS_DIR", str(default_target_dir.parent))
    pair = default_pair_paths()
    assert (pair.draft_method, pair.draft_flags) == ("gguf", ("--no-prompt-lookup",))  # on any host: lookup only lowers its agreement
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "llama_cpp" else real_find_spec(name, *rest))
    pair = default_pair_paths()
    assert (pair.draft, pair.draft_method) == (str(DRAFT_DIR), None)
    assert "llama-cpp-python is not installed" in capsys.readouterr().err


def test_the_default_pair_drafts_with_suffix_decoding_first_unless_told_otherwise(monkeypatch, default_target_dir, tmp_path):
    from specdec.cli.launcher import UpPlan, _draft_side

    monkeypatch.setenv("SPECDEC_MODELS_DIR", str(default_target_dir.parent))
    ports = {"gateway_port": 1, "draft_port": 2, "verify_port": 3}
    assert _draft_side(UpPlan(None, None, None, None, **ports)).verify_flags == ("--suffix-decoding",)
    assert _draft_side(UpPlan(None, None, None, None, **ports, suffix_decoding=False)).verify_flags == ()  # `up`'s flag goes after
    config = tmp_path / "no-suffix.yaml"
    config.write_text("suffix:\n  enabled: false\n")
    assert _draft_side(UpPlan(str(config), None, None, None, **ports)).verify_flags == ()


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


def test_up_with_a_config_that_only_tunes_speculation_serves_the_default_pair_with_its_settings(tmp_path, default_target_dir):
    # No `model` section: the default pair, with the file's other settings (K, the served name, drafting
    # every round whatever the load) applied.
    config = tmp_path / "speculation.yaml"
    config.write_text(
        "speculative:\n  draft_tokens: 2\nserving:\n  served_model_name: tuned-default\nverify_service:\n  load_aware_speculation: false\n",
        encoding="utf-8",
    )
    ports = _ports()
    with _specdec_up(
        tmp_path, ports, "--config", str(config), env={"SPECDEC_MODELS_DIR": str(default_target_dir.parent)}, timeout=300
    ) as banner:
        assert "model 'tuned-default'" in banner
        reply = _chat(ports, "tuned-default", 24)
        assert reply["choices"][0]["message"]["content"].strip()
        stats = reply["speculative"]
        assert stats["rounds"] > 0 and stats["draft_tokens"] > 0 and not stats["fallback"]
        assert stats["draft_tokens"] <= 2 * stats["rounds"]  # K = 2 from the file, not the CPU tuning's 4
        with grpc.insecure_channel(f"127.0.0.1:{ports['--draft-port']}") as channel:
            status = draft_pb2_grpc.DraftServiceStub(channel).Status(common_pb2.ServerStatusRequest(), timeout=10)
        assert status.model == str(default_target_dir.parent / "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_services_get_sleeping_openmp_workers_unless_told_otherwise(monkeypatch):
    from specdec.cli.processes import service_environment

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("SPECDEC_MODELS_DIR", "/models")
    environment = service_environment()
    assert environment["OMP_WAIT_POLICY"] == "PASSIVE" and environment["SPECDEC_MODELS_DIR"] == "/models"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert service_environment()["OMP_WAIT_POLICY"] == "ACTIVE"


def _suffix_tokens(ports: dict[str, int], key: str) -> int:
    url = f"http://127.0.0.1:{ports['--gateway-port']}/v1/chat/completions"
    body = {
        "model": "target",
        "messages": [{"role": "user", "content": "List the tables of the shop schema."}],
        "max_tokens": 48,
        "temperature": 0,
        "speculative": {"provenance": True, "policy": "always"},
    }
    reply = httpx.post(url, json=body, timeout=120, headers={"Authorization": f"Bearer {key}"})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    accepted = sum(token["source"] == "suffix" for token in body["choices"][0]["provenance"]["tokens"])
    # The per-drafter statistics count the same tokens.
    assert body["speculative"]["drafters"].get("suffix", {}).get("accepted_tokens", 0) == accepted
    return accepted


def test_up_with_the_suffix_method_drafts_in_verify_from_the_same_keys_earlier_outputs(tmp_path):
    """No draft service (model-free drafting beside the target); a key's second identical request is drafted from
    its first one's output, another key's is not (the gateway's key id scopes the trees)."""
    ports = _ports()
    with _specdec_up(tmp_path, ports, "--tiny", "--draft-method", "suffix", env={"SPECDEC_API_KEYS": "key-a,key-b"}):
        assert not _listening_addresses(ports["--draft-port"])  # no draft service
        first = _suffix_tokens(ports, "key-a")  # from its own output only (the tiny model repeats itself)
        assert _suffix_tokens(ports, "key-a") > first
        assert _suffix_tokens(ports, "key-b") == first  # greedy: exactly the first request's, with nothing learned
