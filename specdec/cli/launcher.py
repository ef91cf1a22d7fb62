"""`specdec up`: draft, then verify, then the gateway, each started once the previous is healthy; one that
exits after that is restarted (specdec/cli/supervision.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from specdec.cli.processes import Placement, grpc_serving, http_ok, wait_for
from specdec.cli.restarts import RestartPolicy
from specdec.cli.supervision import Stack
from specdec.errors import SpecdecError
from specdec.serving.ports import bind_problem

START_TIMEOUT_S = 600.0  # a large model can take minutes to load
LOOPBACK = "127.0.0.1"
SUPERVISE_INTERVAL_S = 0.25  # how often `up` looks for a child that exited


@dataclass
class UpPlan:
    """What `specdec up` runs: models and ports (None = take the config file's)."""

    config_file: str | None
    target: str | None
    draft: str | None
    draft_method: str | None
    gateway_port: int
    draft_port: int
    verify_port: int
    draft_metrics_port: int = 9101
    verify_metrics_port: int = 9102
    tiny: bool = False
    num_draft_tokens: int | None = None  # K for the verify service (None: the config's, or the default pair's)
    gguf_threads: int | None = None  # llama.cpp threads of a gguf draft (None: the default pair's, or the config's)
    suffix_decoding: bool | None = None  # suffix decoding in the verify service (None: the config's)
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)  # a child that exits is restarted within it


@dataclass(frozen=True)
class DefaultPair:
    """What `specdec up` with no arguments serves."""

    target: str
    draft: str
    draft_method: str | None  # None: the config's (a `model` draft)
    draft_flags: tuple[str, ...] = ()  # on any host
    served_name: str | None = None  # the model id clients send (None: the target's file name)
    suffix_decoding: bool = False  # verify drafts from suffix trees first, unless `up` or the config file says otherwise


# The target's own GGUF agrees with it on 0.98 of greedy tokens; prompt lookup first would only replace
# better proposals (0.65-0.87 with lookup in front; docs/benchmarks.md).
_GGUF_PAIR_FLAGS = ("--no-prompt-lookup",)


def _suffix_flags() -> tuple[str, ...]:
    """Suffix decoding before the GGUF draft where arctic-inference is installed: on agent traffic 1.2x the pair's
    tok/s, on chat the same (docs/benchmarks.md, "Suffix decoding")."""
    if importlib.util.find_spec("arctic_inference") is None:
        print(
            "specdec up: arctic-inference is not installed, so the default pair drafts without suffix decoding (`make install` builds it)",
            file=sys.stderr,
        )
        return ()
    return ("--suffix-decoding",)


def default_pair_paths(tiny: bool = False) -> DefaultPair:
    """The embedded default pair: SmolLM2-135M-Instruct drafted by its own Q4_1 GGUF through llama.cpp
    (the distilled draft where llama-cpp-python is not installed), fetched on first use.

    `tiny`: the tiny random pair instead (seconds to start; for trying the plumbing), built once
    into the user's cache.
    """
    if not tiny:
        from specdec.default_models import (
            DRAFT_DIR,
            TARGET_NAME,
            default_draft_gguf,
            ensure_default_target,
            ensure_default_target_gguf,
            models_dir,
        )

        if importlib.util.find_spec("llama_cpp") is None:
            print(
                "specdec up: llama-cpp-python is not installed, so the default pair runs the target in transformers and drafts "
                "with the distilled draft (slower; `pip install 'specdec[llama]'`, see docs/configuration.md)",
                file=sys.stderr,
            )
            return DefaultPair(str(ensure_default_target(models_dir())), str(DRAFT_DIR), None, served_name=TARGET_NAME)
        # The target in bf16 on the llama_cpp engine: docs/benchmarks.md, "Target engines".
        return DefaultPair(
            str(ensure_default_target_gguf(models_dir())),
            str(default_draft_gguf(models_dir())),
            "gguf",
            _GGUF_PAIR_FLAGS,
            served_name=TARGET_NAME,
            suffix_decoding=True,
        )
    from specdec.cli.tiny_pair import make_tiny_pair

    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specdec" / "tiny-pair"
    if not (root / "target" / "config.json").is_file() or not (root / "draft" / "config.json").is_file():
        make_tiny_pair(root)
    return DefaultPair(str(root / "target"), str(root / "draft"), None)


@dataclass(frozen=True)
class PairTuning:
    """How the default pair drafts on a CPU-only host: K per round and the draft service's flags."""

    num_draft_tokens: int
    draft_flags: tuple[str, ...]
    own_cores: bool = False  # draft and verify each pinned to cores of their own (split_cores), as on devices of their own


# Chosen by measurement (docs/benchmarks.md, "Default pair: SmolLM2 drafted by its own GGUF"): K = 4
# (1.58x against 1.47x for K = 3 on chat prompts, quiet machine); one llama.cpp thread leaves the other core to the target.
GGUF_TUNING = PairTuning(num_draft_tokens=4, draft_flags=("--gguf-threads=1",), own_cores=True)
DRAFT_NICENESS_ON_CPU = 10
# The distilled draft: K = 2 for a looked-up block, 1 from the draft model, single-token matches counted.
DISTILLED_TUNING = PairTuning(num_draft_tokens=2, draft_flags=("--model-draft-tokens=1", "--prompt-lookup-min-ngram=1"))


def default_pair_tuning(draft_method: str | None = "gguf") -> PairTuning | None:
    """The CPU tuning of the default pair with this draft; None on a GPU host (the configured defaults)."""
    import torch

    if torch.cuda.is_available():
        return None
    return GGUF_TUNING if draft_method == "gguf" else DISTILLED_TUNING


def run_up(plan: UpPlan) -> int:
    check_ports_free(plan, _file_config(plan).serving.host)
    stack = Stack(plan.restart_policy)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    # NOTE: a shell starts a background job (`specdec up &` in a script) with SIGINT ignored, which Python keeps;
    # a Ctrl-C or `kill -INT` to the process group then stopped the children (their servers handle SIGINT) and up
    # restarted them as crashed. Ctrl-C stops the stack however up was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        start_all(stack, plan)
        _announce(plan)
        while not stopping:
            stack.supervise(time.monotonic())  # restarts what exited; a SpecdecError once one keeps exiting
            time.sleep(SUPERVISE_INTERVAL_S)
    except KeyboardInterrupt:
        pass
    finally:
        print("specdec up: stopping gateway, verify, draft", file=sys.stderr)
        stack.stop()
    return 0


def check_ports_free(plan: UpPlan, gateway_host: str) -> None:
    """Refuse, naming each busy port and the flag that moves it, before anything starts: a child on a busy
    port would fail to bind, and the health probe could reach the other server and call the stack up."""
    wanted = [
        ("--gateway-port", gateway_host, plan.gateway_port),
        ("--draft-port", LOOPBACK, plan.draft_port),
        ("--verify-port", LOOPBACK, plan.verify_port),
        ("--draft-metrics-port", LOOPBACK, plan.draft_metrics_port),
        ("--verify-metrics-port", LOOPBACK, plan.verify_metrics_port),
    ]
    wanted = [(flag, host, port) for flag, host, port in wanted if port]  # 0: a metrics port that is off
    flags_by_port: dict[int, list[str]] = {}
    for flag, _, port in wanted:
        flags_by_port.setdefault(port, []).append(flag)
    shared = [f"{' and '.join(flags)} share port {port}" for port, flags in flags_by_port.items() if len(flags) > 1]
    if shared:
        raise SpecdecError(f"each service needs its own port: {'; '.join(shared)}")
    problems = [(flag, f"{host}:{port}", problem) for flag, host, port in wanted if (problem := bind_problem(host, port))]
    if problems:
        listed = "; ".join(f"cannot listen on {address} ({flag}): {problem}" for flag, address, problem in problems)
        flags = ", ".join(flag for flag, _, _ in problems)
        raise SpecdecError(
            f"{listed}; nothing started: stop what holds {'them' if len(problems) > 1 else 'it'} or pass a free port with {flags}"
        )


@dataclass
class _DraftSide:
    target: str | None
    args: list[str]  # `serve draft` flags
    num_draft_tokens: int | None  # K for the verify service
    placement: Placement = Placement()  # the draft process's on the host's CPUs
    verify_placement: Placement = Placement()
    served_name: str | None = None  # the gateway's --served-model-name (None: the config's, or the target's name)
    verify_flags: tuple[str, ...] = ()  # the default pair's `serve verify` flags
    # A model-free method that runs beside the target (suffix decoding): no draft service, no round trip, and
    # the target keeps every core.
    in_verify: bool = False


# Draft methods `up` runs inside the verify service (flags for `serve verify`) instead of starting a draft service.
IN_VERIFY_METHODS = {"suffix": ("--no-draft", "--suffix-decoding")}


def _draft_side(plan: UpPlan) -> _DraftSide:
    """The draft service's flags: the given models, or the default pair with its flags and (on CPU) its
    tuning, where the config file (if any) does not set those settings itself."""
    target, draft, method, flags, cores, served_name = plan.target, plan.draft, plan.draft_method, [], None, None
    num_draft_tokens = plan.num_draft_tokens
    config = _file_config(plan)
    default_pair = target is None and config.model.target_path is None
    if (method or config.model.draft_method.value) in IN_VERIFY_METHODS:
        pair = default_pair_paths(plan.tiny) if default_pair else None  # once: it may fetch and convert the target
        served_name = pair.served_name if pair and not config.serving.served_model_name else None
        target = pair.target if pair else target
        flags = list(IN_VERIFY_METHODS[method or config.model.draft_method.value])
        return _DraftSide(target, flags, num_draft_tokens, served_name=served_name, in_verify=True)
    if default_pair:
        pair = default_pair_paths(plan.tiny)
        target = pair.target
        served_name = None if config.serving.served_model_name else pair.served_name
        if draft is None:
            draft, method, flags = pair.draft, method or pair.draft_method, list(pair.draft_flags)
        tuning = None if plan.tiny else default_pair_tuning(method)
        cores = split_cores(os.sched_getaffinity(0)) if tuning is not None and tuning.own_cores else None
        if tuning is not None:
            flags += [flag for flag in tuning.draft_flags if not (flag.startswith("--gguf-threads") and config.model.gguf_threads)]
            if "draft_tokens" not in config.speculative.model_fields_set:
                num_draft_tokens = num_draft_tokens or tuning.num_draft_tokens
    args = [*(["--draft-method", method] if method else []), *flags]
    args += [f"--gguf-threads={plan.gguf_threads}"] if plan.gguf_threads else []
    args += [f"--draft={draft}"] if draft else []
    # layer_skip drafts with the target's layers; a gguf draft checks its vocabulary against the target's at start.
    args += [f"--target={target}"] if target and method in ("layer_skip", "gguf") else []
    # One host: a small draft on one thread leaves the other cores to the target, and two
    # processes whose OpenMP thread teams span the same cores slow each other down badly.
    args += ["--cpu-threads", "1"] if (default_pair or plan.config_file is None) and config.draft_service.cpu_threads is None else []
    draft_cores, verify_cores = cores or (None, None)
    # Checked (and its absence reported) only where the default pair's suffix decoding is not overridden.
    chosen = plan.suffix_decoding is not None or "enabled" in config.suffix.model_fields_set
    verify_flags = _suffix_flags() if default_pair and pair.suffix_decoding and not chosen else ()
    return _DraftSide(
        target, args, num_draft_tokens, Placement(_draft_niceness(), draft_cores), Placement(cpus=verify_cores), served_name, verify_flags
    )


def split_cores(available: set[int]) -> tuple[frozenset[int], frozenset[int]] | None:
    """(the draft's core, the target's cores) on a host of two cores or more; None on one core.

    NOTE: without a GPU, a draft and a target on the same cores take turns (llama.cpp's threads and the
    target's contend for each core); on cores of their own the draft drafts the next block while the
    target verifies this one (overlapped drafting), as it would on a device of its own.
    """
    if len(available) < 2:
        return None
    cores = sorted(available)
    return frozenset(cores[-1:]), frozenset(cores[:-1])


def _draft_niceness() -> int:
    """On a host without a GPU the draft and the target share the CPU cores. The target's prefill and
    verification are on every request's critical path; the draft's prefill and drafting ahead are
    not, so where they contend the target goes first (docs/benchmarks.md: Spec-Bench's long prompts)."""
    import torch

    return 0 if torch.cuda.is_available() else DRAFT_NICENESS_ON_CPU


def _file_config(plan: UpPlan):
    """The settings of the config file (and SPECDEC_* env); a file without a target serves the default pair."""
    from specdec.serving.config import load_config

    return load_config(plan.config_file)


def start_all(stack: Stack, plan: UpPlan) -> None:
    config = ["--config", plan.config_file] if plan.config_file else []
    side = _draft_side(plan)
    # NOTE: draft and verify serve gRPC without authentication: `up` keeps them on the loopback interface.
    if not side.in_verify:
        _start_draft(stack, plan, config, side)
    verify_healthy = partial(grpc_serving, f"localhost:{plan.verify_port}")
    draft_flags = side.args if side.in_verify else ["--draft-endpoint", f"localhost:{plan.draft_port}"]
    stack.spawn(
        "verify",
        [
            "serve",
            "verify",
            *config,
            *([f"--target={side.target}"] if side.target else []),
            "--host",
            LOOPBACK,
            "--port",
            str(plan.verify_port),
            "--metrics-port",
            str(plan.verify_metrics_port),
            *draft_flags,
            *side.verify_flags,
            *([f"--num-draft-tokens={side.num_draft_tokens}"] if side.num_draft_tokens else []),
            *({True: ["--suffix-decoding"], False: ["--no-suffix-decoding"]}.get(plan.suffix_decoding, [])),
        ],
        placement=side.verify_placement,
        probe=verify_healthy,
    )
    _wait_healthy("verify", stack, verify_healthy)
    gateway_healthy = partial(http_ok, f"http://localhost:{plan.gateway_port}/ready")
    stack.spawn(
        "gateway",
        [
            "serve",
            "gateway",
            *config,
            "--port",
            str(plan.gateway_port),
            "--verify-endpoint",
            f"localhost:{plan.verify_port}",
            *([f"--served-model-name={side.served_name}"] if side.served_name else []),
        ],
        probe=gateway_healthy,
    )
    _wait_healthy("gateway", stack, gateway_healthy)


def _start_draft(stack: Stack, plan: UpPlan, config: list[str], side: _DraftSide) -> None:
    draft_healthy = partial(grpc_serving, f"localhost:{plan.draft_port}")
    stack.spawn(
        "draft",
        ["serve", "draft", *config, *side.args, "--host", LOOPBACK, "--port", str(plan.draft_port)]
        + ["--metrics-port", str(plan.draft_metrics_port)],
        placement=side.placement,
        probe=draft_healthy,
    )
    _wait_healthy("draft", stack, draft_healthy)


def _wait_healthy(name: str, stack: Stack, probe) -> None:
    # A healthy answer counts only while every child lives: after one exited, another server answered.
    problem = wait_for(lambda: probe() and stack.failed_child() is None, START_TIMEOUT_S, stack.failed_child, interval_s=0.3)
    if problem:
        raise SpecdecError(f"{name} did not start: {problem}")
    print(f"specdec up: {name} is healthy", file=sys.stderr)


def _announce(plan: UpPlan) -> None:
    """The URL, the model's id and a curl line to try; with API keys set, the curl line shows where the key goes."""
    url = f"http://localhost:{plan.gateway_port}"
    key = _any_api_key(plan)
    try:
        model = _served_model(url, key)
    except (OSError, ValueError, LookupError) as error:  # never a reason to stop a stack that is up
        print(f"specdec up: could not read the served model's id from {url}/v1/models: {error}", file=sys.stderr)
        model = "<model>"
    print(f"\nspecdec is up: {url}/v1 (model {model!r}); Ctrl-C stops it.\n")
    auth = " -H 'Authorization: Bearer <one of your API keys>'" if key else ""
    print(f"""curl {url}/v1/chat/completions -H 'Content-Type: application/json'{auth} \\
  -d '{{"model": "{model}", "messages": [{{"role": "user", "content": "Hello!"}}], "max_tokens": 32}}'\n""")
    print(f"Playground (speculation token by token): {url}/\n", flush=True)


def _any_api_key(plan: UpPlan) -> str | None:
    """One of the keys the gateway accepts ($SPECDEC_API_KEYS or the config's keys file), or None."""
    from gateway.auth import ApiKeys
    from specdec.serving.config import load_config

    keys = ApiKeys.from_environment(load_config(plan.config_file).serving.api_keys_file).current()
    return min(keys) if keys else None


def _served_model(url: str, key: str | None) -> str:
    request = urllib.request.Request(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)["data"][0]["id"]
