"""Implementations of the CLI commands (argument parsing lives in main.py)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time

import yaml

from specdec.cli.flags import config_overrides
from specdec.errors import SpecdecError
from specdec.serving.config import SpecdecConfig, TlsSection, load_config


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def _quiet_transformers(log_level: str) -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if log_level != "debug":
        hf_logging.set_verbosity_error()


def _config_from_generate_flags(args: argparse.Namespace) -> SpecdecConfig:
    overrides = config_overrides(args)
    overrides["speculative"]["enabled"] = False if args.no_speculation else None
    return load_config(args.config, overrides)


def generate(args: argparse.Namespace) -> int:
    from specdec.acceptance_modes import requested_acceptance
    from specdec.request import GenerationRequest
    from specdec.sampling import SamplingParams

    config = _config_from_generate_flags(args)
    # stderr carries the stats line and errors; model-loading chatter only at debug.
    configure_logging("debug" if config.observability.log_level == "debug" else "warning")
    _quiet_transformers(config.observability.log_level)
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p)
    request = GenerationRequest(
        prompt_ids=[0],  # placeholder: validates every other field before the (slow) model load
        max_tokens=args.max_tokens,
        sampling=sampling,
        stop=args.stop,
        speculative=config.speculative.enabled,
        num_draft_tokens=config.speculative.draft_tokens,
        adaptive_k=config.speculative.adaptive_k,
        min_draft_tokens=config.speculative.min_draft_tokens,
        acceptance=requested_acceptance(config.speculative.acceptance, seeded=args.seed is not None),
        draft_top_k=config.speculative.draft_top_k,
        **config.speculative.tree_request_fields(),
        **({"seed": args.seed} if args.seed is not None else {}),
    )
    from specdec.assembly import build_generator
    from specdec.prompts import encode_prompt

    generator = build_generator(config)
    prompt_ids = encode_prompt(generator.target.tokenizer, args.prompt, chat=not args.raw)
    request = request.model_copy(update={"prompt_ids": prompt_ids})
    started = time.perf_counter()
    result = generator.generate(request)
    elapsed = time.perf_counter() - started
    if args.json:
        print(json.dumps({**result.as_dict(), "seed": request.seed, "elapsed_s": round(elapsed, 4)}))
    else:
        _print_human(result, elapsed)
    return 0


def _print_human(result, elapsed: float) -> None:
    stats = result.stats
    print(result.text)
    print(
        f"\n[{len(result.token_ids)} tokens in {elapsed:.2f}s ({len(result.token_ids) / max(elapsed, 1e-9):.1f} tok/s), "
        f"finish={result.finish_reason}, rounds={stats.rounds}, draft_tokens={stats.draft_tokens}, "
        f"accepted={stats.accepted_tokens}, acceptance_rate={stats.acceptance_rate:.3f}, fallback={stats.fallback}]",
        file=sys.stderr,
    )


def make_tiny_pair(args: argparse.Namespace) -> int:
    from specdec.cli.tiny_pair import make_tiny_pair as build

    _quiet_transformers("info")
    paths = build(args.directory, seed=args.seed)
    print(f"target: {paths.target}\ndraft:  {paths.draft}")
    return 0


def make_draft(args: argparse.Namespace) -> int:
    from pathlib import Path

    from specdec.bundled import BUNDLED_MODELS, bundled_model_path
    from specdec.default_models import TARGET_NAME, models_dir
    from specdec.make_draft import check_quant_type
    from specdec.make_draft import make_draft as build

    check_quant_type(args.type)
    target = args.target or TARGET_NAME
    bundled = target in BUNDLED_MODELS and not Path(target).exists()
    source = bundled_model_path(target) if bundled else Path(target)
    name = target if bundled else source.stem if source.suffix == ".gguf" else source.name
    out = Path(args.out) if args.out else models_dir() / f"{name}-{args.type}.gguf"
    print(f"specdec: making a {args.type} draft of {source}", file=sys.stderr)
    made = build(source, args.type, out, args.threads)
    print(f"{made.path}  ({made.size_bytes / 2**20:.1f} MiB, {made.seconds:.1f} s)")
    return 0


def config_show(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), end="")
    return 0


def _serve_overrides(args: argparse.Namespace) -> dict[str, dict]:
    overrides = config_overrides(args, args.service)
    if getattr(args, "no_draft", False):
        overrides["verify_service"]["draft_endpoint"] = ""
    return overrides


def serve(args: argparse.Namespace) -> int:
    import asyncio

    from specdec.serving.telemetry import configure_logging as configure_service_logging
    from specdec.serving.telemetry import setup_tracing

    config = load_config(args.config, _serve_overrides(args))
    configure_service_logging(config.observability.log_level, json_lines=config.observability.log_format == "json")
    setup_tracing(f"specdec-{args.service}")
    if args.service == "gateway":
        return _serve_gateway(config)  # no torch or transformers in the gateway process
    _quiet_transformers(config.observability.log_level)
    import torch

    threads = (config.draft_service if args.service == "draft" else config.verify_service).cpu_threads
    if threads:
        torch.set_num_threads(threads)
    if args.service == "draft":
        from draft_service.server import serve as run
    else:
        from verify_service.server import serve as run
    with asyncio.Runner(loop_factory=_fast_event_loop()) as runner:
        runner.run(run(config))
    return 0


def _fast_event_loop():
    """uvloop where installed: it cuts the per-round gRPC overhead by about a third."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _serve_gateway(config: SpecdecConfig) -> int:
    import uvicorn

    from gateway.app import create_app
    from specdec.serving.ports import listening_socket

    settings = config.serving
    # Bound here, before the app is built: a busy port ends the process in one line (uvicorn would log an OSError).
    sock = listening_socket("gateway", settings.host, settings.port)
    # uvicorn re-raises a captured SIGTERM once it has drained; exit 0 then, as the gRPC services do
    # (otherwise a clean drain reads as "killed by SIGTERM" to supervisors).
    signal.signal(signal.SIGTERM, _exit_cleanly)
    # SIGINT/SIGTERM: uvicorn stops accepting, lets open responses finish, then exits.
    # log_config=None: uvicorn keeps our JSON logging instead of installing its own text format.
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            host=settings.host,
            port=settings.port,
            log_level=config.observability.log_level,
            log_config=None,
            timeout_graceful_shutdown=10,
        )
    )
    # uvicorn does not log where it listens when it is given the socket.
    logging.getLogger(__name__).info("gateway on http://%s:%d", settings.host, sock.getsockname()[1])
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises a captured SIGINT once it has drained, as for SIGTERM above
        pass
    return 0 if server.started else 3  # 3: the app's startup failed (uvicorn.run's exit status for it)


def _exit_cleanly(signum, frame) -> None:
    raise SystemExit(0)


def up(args: argparse.Namespace) -> int:
    from specdec.cli.launcher import UpPlan, run_up
    from specdec.cli.restarts import RestartPolicy

    config_file = args.config or os.environ.get("SPECDEC_CONFIG")
    if config_file:
        load_config(config_file)  # fail fast, in one line, on a bad file
    for flag, source in (("--target", args.target), ("--draft", args.draft)):
        _check_local_model(flag, source)  # before any service starts: the draft would otherwise fail first, about something else
    return run_up(
        UpPlan(
            config_file=config_file,
            target=args.target,
            draft=args.draft,
            draft_method=args.draft_method,
            gateway_port=args.gateway_port,
            draft_port=args.draft_port,
            verify_port=args.verify_port,
            draft_metrics_port=args.draft_metrics_port,
            verify_metrics_port=args.verify_metrics_port,
            tiny=args.tiny,
            num_draft_tokens=args.num_draft_tokens,
            gguf_threads=args.gguf_threads,
            suffix_decoding=args.suffix_decoding,
            restart_policy=RestartPolicy(crash_limit=args.crash_limit, crash_window_s=args.crash_window),
        )
    )


def _check_local_model(flag: str, source: str | None) -> None:
    """A model given as a local path (absolute, relative with ./ or ../, ~, or a .gguf file) must exist."""
    if not source:
        return
    path = os.path.expanduser(source)
    looks_local = source.startswith(("/", "./", "../", "~")) or source.endswith(".gguf")
    if looks_local and not os.path.exists(path):
        raise SpecdecError(f"{flag} {source}: no such file or directory (a Hugging Face model directory or a .gguf file)")


def healthcheck(args: argparse.Namespace) -> int:
    """grpc.health.v1 for draft and verify (SERVING), GET /ready for the gateway; 0 = healthy.

    The probe reads the service's own settings (config file, SPECDEC_* environment, the same TLS flags), so
    inside the service's container it speaks TLS exactly when the service does."""
    config = load_config(args.config, {"tls": {"cert_file": args.tls_cert, "key_file": args.tls_key, "ca_file": args.tls_ca}})
    ports = {"draft": config.draft_service.port, "verify": config.verify_service.port, "gateway": config.serving.port}
    address = args.address or f"localhost:{ports[args.service]}"
    if args.service == "gateway":
        healthy, detail = _probe_http(address, args.timeout)
    else:
        healthy, detail = _probe_grpc(address, args.timeout, config.tls, args.tls_server_name)
    print(f"{args.service} at {address}: {detail}", file=sys.stderr if not healthy else sys.stdout)
    return 0 if healthy else 1


def _probe_grpc(address: str, timeout: float, tls: TlsSection, server_name: str | None) -> tuple[bool, str]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from specdec.serving.rpc.tls import channel_credentials, probe_tls

    client_tls = probe_tls(tls)
    if client_tls is None:
        channel = grpc.insecure_channel(address)
    else:
        options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
        channel = grpc.secure_channel(address, channel_credentials(client_tls), options=options)
    with channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError as error:
            return False, f"unreachable ({error.code().name}{', TLS' if client_tls else ''})"
    return reply.status == health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def _probe_http(address: str, timeout: float) -> tuple[bool, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{address}/ready", timeout=timeout) as response:
            return response.status == 200, "ready"
    except urllib.error.HTTPError as error:
        return False, f"not ready (HTTP {error.code})"
    except OSError as error:
        return False, f"unreachable ({error})"


def memory_plan(args: argparse.Namespace) -> int:
    from specdec.memory_plan import describe, plan

    _quiet_transformers("info")
    config = load_config(args.config, config_overrides(args))
    devices = plan(config)
    print(describe(devices))
    return 0 if all(device.sessions_that_fit >= 1 for device in devices) else 1


def check_lossless(args: argparse.Namespace) -> int:
    from specdec.cli.lossless_check import REJECTION_PROMPTS, USEFUL_TV, best_case_detectable_tv, run
    from specdec.lossless_stats import POWER, SIGNIFICANCE

    if args.samples < REJECTION_PROMPTS:
        raise SpecdecError(f"--samples: at least {REJECTION_PROMPTS} (the rejection check splits them over {REJECTION_PROMPTS} prompts)")
    if (best := best_case_detectable_tv(args.samples)) > USEFUL_TV:
        print(
            f"specdec: warning: --samples {args.samples}: the rejection check cannot detect a total-variation distance below "
            f"{best:.2f} even at best (power {POWER}, alpha {SIGNIFICANCE}); the distance shrinks as 1/sqrt(samples)",
            file=sys.stderr,
        )
    started = time.perf_counter()
    results = run(args.url, args.api_key, args.model, min(args.prompts, 12), args.max_tokens, args.samples)
    for result in results:
        print(f"{'PASS' if result.passed else 'FAIL'}  {result.name}: {result.detail}")
    passed = all(result.passed for result in results)
    print(f"lossless: {'PASS' if passed else 'FAIL'} ({time.perf_counter() - started:.0f} s)")
    return 0 if passed else 1


def bench(args: argparse.Namespace) -> int:
    import shlex

    from specdec.cli.bench import DEFAULT_PROMPTS, BenchOptions, parse_int_list, render_markdown, run_bench
    from specdec.errors import SpecdecError

    if args.limit < 1 or args.max_tokens < 1:
        raise SpecdecError(f"{'--limit' if args.limit < 1 else '--max-tokens'}: must be at least 1")
    options = BenchOptions(
        url=args.url,
        api_key=args.api_key,
        model=args.model,
        prompts=args.prompts or DEFAULT_PROMPTS,
        limit=args.limit,
        categories=[c.strip() for c in args.categories.split(",") if c.strip()] if args.categories else None,
        concurrency=parse_int_list(args.concurrency, "--concurrency"),
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
        num_draft_tokens=args.num_draft_tokens,
        acceptance=args.acceptance,
        speculation_policy=args.speculation_policy,
        out=args.out,
        plot=not args.no_plot,
        baseline=args.baseline,
        target=args.target,
        draft=args.draft,
        command=shlex.join(["specdec", "bench", *_effective_flags(args, hidden=("command", "api_key", "config"))]),
    )
    results = run_bench(options)
    print(render_markdown(results), end="")
    print(f"results: {results['out']}", file=sys.stderr)
    return 0


def _effective_flags(args: argparse.Namespace, hidden: tuple[str, ...]) -> list[str]:
    """The command line with every default spelled out, rebuilt from args rather than sys.argv so a key never lands in a file."""
    return [
        f"--{key.replace('_', '-')}" + ("" if value is True else f"={value}")
        for key, value in vars(args).items()
        if key not in hidden and value is not None and value is not False
    ]


def distill(args: argparse.Namespace) -> int:
    from pathlib import Path

    from specdec.distill.data import TeacherDataOptions
    from specdec.distill.run import DistillOptions, run_distill
    from specdec.distill.train import TrainOptions

    configure_logging("info")
    _quiet_transformers("info")
    for flag, value in {
        "--layers": args.layers,
        "--draft-vocab": args.draft_vocab,
        "--prompts": args.prompts,
        "--max-new-tokens": args.max_new_tokens,
        "--data-batch-size": args.data_batch_size,
        "--batch-size": args.batch_size,
    }.items():
        if value < 1:
            print(f"specdec: error: {flag} must be at least 1, got {value}", file=sys.stderr)
            return 1
    options = DistillOptions(
        target=args.target,
        out=Path(args.out),
        num_layers=args.layers,
        draft_vocab_size=args.draft_vocab,
        device=args.device,
        data=TeacherDataOptions(
            num_prompts=args.prompts, batch_size=args.data_batch_size, max_new_tokens=args.max_new_tokens, seed=args.seed
        ),
        train=TrainOptions(epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate, seed=args.seed),
    )
    summary = run_distill(options)
    print(json.dumps({k: v for k, v in summary.items() if not k.endswith("_options")}, indent=2))
    return 0
