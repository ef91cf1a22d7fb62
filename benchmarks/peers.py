"""specdec against the server a user would run instead, on this machine, same prompts, same run.

    python benchmarks/peers.py --peer-python /path/to/venv/bin/python [--prompts 8] [--max-tokens 96]
        [--concurrency 1,4] [--temperatures 0,0.8] [--specdec "name=ARGS" ...] [--out docs/bench/peers/NAME.json]
        [--llama-server "$(bash benchmarks/build_llama_server.sh)"]

Systems, each started once and idle while another is measured:
- `llama_cpp.server` (llama-cpp-python's OpenAI server, 2 threads) on a bf16 GGUF of exactly the
  default target's weights (`specdec make-draft --type bf16`), and on the bundled Q4_1 file. It runs
  from `--peer-python`, a Python with `llama-cpp-python[server]` (its server extras are not specdec's
  dependencies): `python -m venv peer && peer/bin/pip install 'llama-cpp-python[server]==0.3.36'`;
- with `--llama-server`, llama.cpp's own C++ server (the same llama.cpp, built by benchmarks/build_llama_server.sh)
  with its defaults (several slots, continuous batching), 2 threads, on the bf16 GGUF: plain, drafted by the Q4_1
  file (`--spec-draft-model`: the same pair as specdec's default), and with its n-gram drafting (`ngram-mod`);
- `specdec up` with no arguments (`--specdec "name=ARGS"` adds stacks started with other `up` flags, and leading
  `SPECDEC_...=VALUE` words set settings in that stack's environment),
  each asked with speculation on and off (the request's `speculative.enabled`).

Prompts: benchmarks/chat-prompts.jsonl (chat). Interleaved: for each group of `concurrency` prompts,
every system in turn (rotating which goes first; a stack's on and off, which share its prompt cache, each going
first in every other group) runs the group at once, streamed. Tokens are counted
with the target's tokenizer on each reply's text, so every system is counted alike. Reported per
system, concurrency and temperature: tok/s (tokens / wall time of the groups), median TTFT and ITL,
and the ratio to llama_cpp.server on the bf16 GGUF. T > 0 requests carry a seed. Run it alone on a
quiet machine: it records the load average.

Warm-up: before the measured groups, each system answers the prompts that are not measured (the file's last
ones) for `--warmup-s` seconds, one at a time, as a server that has been up a while would have: llama.cpp's
first decodes, each prompt cache, and specdec's load-aware policy, whose first windows compare drafting with
plain steps (specdec/load_policy.py) before it settles.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import httpx

from specdec.cli.processes import free_port
from specdec.default_models import default_draft_gguf, ensure_default_target, models_dir

PROMPTS = Path(__file__).with_name("chat-prompts.jsonl")
START_TIMEOUT_S = 300


@dataclass
class System:
    name: str
    url: str
    model: str
    extra: dict = field(default_factory=dict)


@dataclass
class Reply:
    tokens: int
    seconds: float
    ttft_s: float
    itl_s: float | None


def _wait_ready(url: str, process: subprocess.Popen, name: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{name} exited with status {process.returncode} while starting")
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{name} did not start within {START_TIMEOUT_S} s")


def start_peer(name: str, command: list[str], port: int, gguf: Path, log_dir: Path) -> tuple[subprocess.Popen, System]:
    log = log_dir / f"{name.replace(' ', '-')}.log"
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    _wait_ready(url, process, name)
    return process, System(name, url, str(gguf))


def llama_cpp_python_server(python: str, gguf: Path, port: int) -> list[str]:
    """llama-cpp-python's OpenAI server: one slot, 2 threads."""
    threads = ["--n_threads", "2", "--n_threads_batch", "2"]
    return [python, "-m", "llama_cpp.server", "--model", str(gguf), *threads, "--n_ctx", "4096", "--port", str(port), "--host", "127.0.0.1"]


def llama_server(binary: str, gguf: Path, extra: list[str], port: int) -> list[str]:
    """llama.cpp's own C++ server with its defaults (slots, continuous batching, prompt cache), 2 threads."""
    return [binary, "--model", str(gguf), "--threads", "2", "--threads-batch", "2", "--port", str(port), "--host", "127.0.0.1", *extra]


def peers(args, bf16: Path, q4_1: Path) -> list[tuple[str, Path, Callable[[int], list[str]]]]:
    """(name, the GGUF it serves, its command for a port)."""
    chosen = [
        ("llama_cpp.server bf16", bf16, partial(llama_cpp_python_server, args.peer_python, bf16)),
        ("llama_cpp.server q4_1", q4_1, partial(llama_cpp_python_server, args.peer_python, q4_1)),
    ]
    if args.llama_server:
        # The same pair as specdec's default: the bf16 target drafted by the Q4_1 file, llama.cpp's draft defaults.
        draft = ["--spec-draft-model", str(q4_1), "--spec-draft-threads", "2", "--spec-draft-threads-batch", "2"]
        for name, extra in (("", []), (" draft q4_1", draft), (" ngram-mod", ["--spec-type", "ngram-mod"])):
            chosen.append((f"llama-server bf16{name}", bf16, partial(llama_server, args.llama_server, bf16, extra)))
    return chosen


def start_specdec(name: str, up_args: list[str], log_dir: Path) -> tuple[subprocess.Popen, list[System]]:
    """A `specdec up` stack; leading NAME=VALUE words of `up_args` are settings in its environment
    (SPECDEC_MODEL__TARGET_KV_SHARED=true ...), the rest its flags."""
    settings = dict(word.split("=", 1) for word in up_args if re.fullmatch(r"SPECDEC_[A-Z0-9_]+=.*", word))
    up_args = [word for word in up_args if not re.fullmatch(r"SPECDEC_[A-Z0-9_]+=.*", word)]
    ports = [free_port() for _ in range(5)]
    command = [
        sys.executable,
        "-m",
        "specdec.cli.main",
        "up",
        *up_args,
        "--gateway-port",
        str(ports[0]),
        "--draft-port",
        str(ports[1]),
        "--verify-port",
        str(ports[2]),
        "--draft-metrics-port",
        str(ports[3]),
        "--verify-metrics-port",
        str(ports[4]),
    ]
    env = {key: value for key, value in os.environ.items() if key != "SPECDEC_API_KEYS"} | settings
    process = subprocess.Popen(command, stdout=(log_dir / f"{name}.log").open("w"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{ports[0]}"
    _wait_ready(url, process, name)
    model = httpx.get(f"{url}/v1/models", timeout=5).json()["data"][0]["id"]
    return process, [System(f"{name} spec on", url, model), System(f"{name} spec off", url, model, {"speculative": {"enabled": False}})]


def ask(system: System, prompt: str, max_tokens: int, temperature: float, seed: int, tokenizer) -> Reply:
    body = {
        "model": system.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        **({"seed": seed} if temperature > 0 else {}),
        **system.extra,
    }
    started = time.perf_counter()
    first, last, text = None, None, []
    with httpx.stream("POST", f"{system.url}/v1/chat/completions", json=body, timeout=300) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or []
            piece = choices[0].get("delta", {}).get("content") if choices else None
            if piece:
                first = first or time.perf_counter()
                last = time.perf_counter()
                text.append(piece)
    seconds = time.perf_counter() - started
    tokens = len(tokenizer("".join(text), add_special_tokens=False)["input_ids"])
    first = first or started + seconds
    itl = (last - first) / (tokens - 1) if tokens > 1 and last else None
    return Reply(tokens, seconds, first - started, itl)


def run_group(system: System, prompts: list[str], args, temperature: float, tokenizer) -> tuple[float, list[Reply]]:
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        replies = list(
            pool.map(lambda item: ask(system, item[1], args.max_tokens, temperature, 1000 + item[0], tokenizer), enumerate(prompts))
        )
    return time.perf_counter() - started, replies


def warm_up(systems: list[System], prompts: list[str], args, tokenizer) -> None:
    for system in systems:
        deadline = time.monotonic() + args.warmup_s
        for index in itertools.count():
            if time.monotonic() >= deadline:
                break
            ask(system, prompts[index % len(prompts)], args.max_tokens, 0.0, index, tokenizer)


def group_order(systems: list[System], index: int) -> list[System]:
    """The systems in turn for group `index`: rotated, and a stack's on and off swapped every other group.

    NOTE: a stack's on and off share its prompt cache: whichever asks a group first prefills its prompts for the other
    (40-80 ms of TTFT here). Rotation alone put on before off in 3 groups of 4, which cost "on" 3.5% of its tok/s."""
    order = systems[index % len(systems) :] + systems[: index % len(systems)]
    stacks: dict[str, list[System]] = {}
    for system in systems:
        stacks.setdefault(system.url, []).append(system)
    for members in (members for members in stacks.values() if len(members) > 1):
        places = sorted(order.index(member) for member in members)
        for place, member in zip(places, members if index % 2 == 0 else members[::-1], strict=True):
            order[place] = member
    return order


def measure(systems: list[System], prompts: list[str], args, tokenizer) -> list[dict]:
    results = []
    for temperature in args.temperatures:
        for concurrency in args.concurrency:
            groups = [prompts[i : i + concurrency] for i in range(0, len(prompts) - concurrency + 1, concurrency)]
            walls = {system.name: 0.0 for system in systems}
            replies: dict[str, list[Reply]] = {system.name: [] for system in systems}
            loads = []
            for index, group in enumerate(groups):
                for system in group_order(systems, index):
                    wall, group_replies = run_group(system, group, args, temperature, tokenizer)
                    walls[system.name] += wall
                    replies[system.name] += group_replies
                loads.append(os.getloadavg()[0])
            for system in systems:
                tokens = sum(reply.tokens for reply in replies[system.name])
                itls = [reply.itl_s for reply in replies[system.name] if reply.itl_s is not None]
                results.append(
                    {
                        "system": system.name,
                        "temperature": temperature,
                        "concurrency": concurrency,
                        "tokens": tokens,
                        "seconds": walls[system.name],
                        "tok_s": tokens / walls[system.name],
                        "ttft_ms_p50": 1000 * statistics.median(reply.ttft_s for reply in replies[system.name]),
                        "itl_ms_p50": 1000 * statistics.median(itls) if itls else None,
                        "load_average": [min(loads), max(loads)],
                        "replies": [reply.__dict__ for reply in replies[system.name]],
                    }
                )
    return results


def table(results: list[dict], reference: str) -> str:
    lines = [
        "| system | T | concurrency | tok/s | vs llama_cpp.server bf16 | TTFT p50 (ms) | ITL p50 (ms) | load avg |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in results:
        base = next(
            r
            for r in results
            if r["system"] == reference and r["temperature"] == row["temperature"] and r["concurrency"] == row["concurrency"]
        )
        itl = f"{row['itl_ms_p50']:.1f}" if row["itl_ms_p50"] is not None else "-"
        lines.append(
            f"| {row['system']} | {row['temperature']} | {row['concurrency']} | {row['tok_s']:.1f} | {row['tok_s'] / base['tok_s']:.2f}x "
            f"| {row['ttft_ms_p50']:.0f} | {itl} | {row['load_average'][0]:.2f}-{row['load_average'][1]:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-python", required=True, help="a Python with llama-cpp-python[server] installed")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--concurrency", type=lambda text: [int(c) for c in text.split(",")], default=[1, 4])
    parser.add_argument("--temperatures", type=lambda text: [float(t) for t in text.split(",")], default=[0.0, 0.8])
    parser.add_argument("--specdec", action="append", default=[], help='"name=UP ARGS": another specdec stack (default: `up` alone)')
    parser.add_argument(
        "--llama-server", default=None, help="llama.cpp's C++ llama-server (benchmarks/build_llama_server.sh): plain, drafted, n-gram modes"
    )
    parser.add_argument("--no-default-stack", action="store_true", help="only the --specdec stacks")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--warmup-s", type=float, default=15.0, help="seconds of unmeasured prompts per system first")
    args = parser.parse_args()
    from specdec.engines.hf import load_tokenizer
    from specdec.make_draft import make_draft

    hf_dir = ensure_default_target(models_dir())
    bf16 = models_dir() / f"{hf_dir.name}-bf16.gguf"
    if not bf16.is_file():
        make_draft(hf_dir, "bf16", bf16)
    log_dir = Path(args.out).with_suffix("") if args.out else Path("bench-results") / "peers"
    log_dir.mkdir(parents=True, exist_ok=True)
    every_prompt = [json.loads(line)["prompt"] for line in PROMPTS.read_text().splitlines() if line.strip()]
    prompts, warmup_prompts = every_prompt[: args.prompts], every_prompt[args.prompts :][-4:] or every_prompt[-1:]
    stacks = ([] if args.no_default_stack else [("specdec", [])]) + [
        (spec.split("=", 1)[0], shlex.split(spec.split("=", 1)[1])) for spec in args.specdec
    ]
    processes, systems = [], []
    try:
        for name, gguf, command in peers(args, bf16, default_draft_gguf(models_dir())):
            port = free_port()
            process, system = start_peer(name, command(port), port, gguf, log_dir)
            processes.append(process)
            systems.append(system)
        for name, up_args in stacks:
            process, stack_systems = start_specdec(name, up_args, log_dir)
            processes.append(process)
            systems += stack_systems
        tokenizer = load_tokenizer(str(hf_dir))
        warm_up(systems, warmup_prompts, args, tokenizer)
        results = measure(systems, prompts, args, tokenizer)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
    if args.out:
        args.out.write_text(json.dumps({"argv": sys.argv[1:], "results": results}, indent=2))
    print(table(results, "llama_cpp.server bf16"))


if __name__ == "__main__":
    main()
