"""The `specdec` command line (argument parsing). Every command takes --config FILE; flags override the file."""

from __future__ import annotations

import argparse
import os
import sys

from pydantic import ValidationError

from specdec.cli.flags import flag_for, name_flags
from specdec.cli.restarts import CRASH_LIMIT, CRASH_WINDOW_S, FIRST_DELAY_S, MAX_DELAY_S
from specdec.errors import SpecdecError, describe_validation_error
from specdec.fields import ACCEPTANCE, SPECULATION_POLICY, VERIFICATION
from specdec.serving.config import DraftMethod

SUFFIX_HELP = "draft from suffix trees over this request and the API key's earlier outputs before the draft model (suffix decoding)"
DRAFT_METHOD_CHOICES = [method.value for method in DraftMethod]  # each has its row in specdec.draft_methods


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="Lossless speculative-decoding LLM inference.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_generate(commands)
    tiny = commands.add_parser("make-tiny-pair", help="write a tiny random target/draft pair (HF format) to DIR")
    tiny.add_argument("directory", metavar="DIR")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--config", help="accepted for uniformity; unused")
    _add_serve(commands)
    plan = commands.add_parser("plan", help="memory plan: weights, KV bytes per token, sessions that fit per device")
    plan.add_argument("--config", help="YAML config file (default: $SPECDEC_CONFIG)")
    plan.add_argument("--target")
    plan.add_argument("--draft")
    plan.add_argument("--draft-method", choices=DRAFT_METHOD_CHOICES)
    plan.add_argument("--layer-skip-layers", type=int)
    plan.add_argument("--draft-quantization", choices=["int8"])
    plan.add_argument("--device")
    plan.add_argument("--draft-device")
    plan.add_argument("--dtype")
    lossless = commands.add_parser("check-lossless", help="spec on vs off against a running gateway: PASS/FAIL")
    lossless.add_argument("--url", default="http://localhost:8000", help="the gateway")
    lossless.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="default: $OPENAI_API_KEY")
    lossless.add_argument("--model", help="default: the first model the gateway lists")
    lossless.add_argument("--prompts", type=int, default=8, help="prompts for the greedy and coupled checks (max 12)")
    lossless.add_argument("--max-tokens", type=int, default=32)
    lossless.add_argument(
        "--samples",
        type=int,
        default=300,
        help="seeded samples per side for the rejection check, split over its 3 prompts (it prints the distance they can detect)",
    )
    lossless.add_argument("--config", help="accepted for uniformity; unused")
    _add_bench(commands)
    _add_distill(commands)
    _add_make_draft(commands)
    check = commands.add_parser("healthcheck", help="exit 0 when a service is healthy (for container probes)")
    check.add_argument("service", choices=["draft", "verify", "gateway"])
    check.add_argument("--address", help="HOST:PORT (default: localhost and the service's port from the config)")
    check.add_argument("--timeout", type=float, default=3.0)
    check.add_argument("--config", help="YAML config file (default: $SPECDEC_CONFIG)")
    check.add_argument("--tls-cert", help="draft/verify: the service's certificate, as given to `serve`: the probe speaks TLS")
    check.add_argument("--tls-key", help="the service's private key (mTLS: the probe's identity unless tls.client_cert_file is set)")
    check.add_argument("--tls-ca", help="CA bundle that verifies the service's certificate")
    check.add_argument("--tls-server-name", help="the name the service's certificate carries (default: the --address host)")
    up = commands.add_parser("up", help="run draft, verify and gateway on this host (default: the default pair)")
    up.add_argument("--config", help="YAML config file (default: $SPECDEC_CONFIG)")
    up.add_argument(
        "--target",
        help="target model (default: SmolLM2-135M-Instruct, fetched on first use, drafted by its own Q4_1 GGUF through "
        "llama.cpp; the bundled distilled draft where llama-cpp-python is not installed)",
    )
    up.add_argument(
        "--tiny", action="store_true", help="the tiny random pair instead of the default: starts in seconds, for trying the plumbing"
    )
    up.add_argument("--draft", help="draft model")
    up.add_argument("--draft-method", choices=DRAFT_METHOD_CHOICES)
    up.add_argument(
        "--gguf-threads", type=int, help="llama.cpp threads of a gguf draft (default: the default pair's tuning, else one per core)"
    )
    up.add_argument(
        "--num-draft-tokens",
        type=int,
        help="K per round (default: the config's; for the default pair 4 with its GGUF draft, 2 with the distilled one)",
    )
    up.add_argument("--suffix-decoding", action=argparse.BooleanOptionalAction, help=SUFFIX_HELP)
    up.add_argument("--gateway-port", type=int, default=8000)
    up.add_argument("--draft-port", type=int, default=50051)
    up.add_argument("--verify-port", type=int, default=50052)
    up.add_argument("--draft-metrics-port", type=int, default=9101)
    up.add_argument("--verify-metrics-port", type=int, default=9102)
    up.add_argument(
        "--crash-limit",
        type=int,
        default=CRASH_LIMIT,
        metavar="N",
        help=f"a service that exits is restarted (backoff {FIRST_DELAY_S:g}s doubling to {MAX_DELAY_S:g}s); once one "
        f"has exited this many times within --crash-window, up stops the stack and exits 1 "
        f"(default {CRASH_LIMIT}; 1: never restart)",
    )
    up.add_argument(
        "--crash-window",
        type=float,
        default=CRASH_WINDOW_S,
        metavar="SECONDS",
        help=f"the window in which --crash-limit counts one service's exits (default {CRASH_WINDOW_S:g})",
    )
    show = commands.add_parser("config", help="configuration tools").add_subparsers(dest="config_command", required=True)
    show.add_parser("show", help="print the effective configuration as YAML").add_argument("--config")
    return parser


def _add_generate(commands: argparse._SubParsersAction) -> None:
    gen = commands.add_parser("generate", help="generate in-process (no servers) and print text and stats")
    gen.add_argument("--config", help="YAML config file (default: $SPECDEC_CONFIG)")
    gen.add_argument("--target", help="target model: HF directory, .gguf file or hub id")
    gen.add_argument("--draft", help="draft model (for --draft-method model)")
    gen.add_argument("--draft-method", choices=DRAFT_METHOD_CHOICES)
    gen.add_argument("--layer-skip-layers", type=int, help="target layers the layer_skip draft keeps")
    gen.add_argument("--draft-quantization", choices=["int8"], help="weight-only int8 draft")
    _add_gguf_flags(gen)
    gen.add_argument("--device", help="target device: auto, cpu, cuda:N")
    gen.add_argument("--draft-device", help="draft device: auto, cpu, cuda:N")
    gen.add_argument("--dtype", help="auto, float32, bfloat16, float16, float64")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--raw", action="store_true", help="do not wrap the prompt in the chat template")
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=1.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--min-p", type=float, default=0.0)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument("--num-draft-tokens", type=int, help="K, candidates per round (with --adaptive-k, the most)")
    gen.add_argument("--adaptive-k", action=argparse.BooleanOptionalAction, help="choose K each round from measured acceptance and costs")
    gen.add_argument("--acceptance", choices=ACCEPTANCE.choices)
    gen.add_argument(
        "--verification",
        choices=VERIFICATION.choices,
        help="tree: verify a token tree per round (needs --acceptance coupled or temperature 0)",
    )
    gen.add_argument("--tree-branching", type=int, help="tree: children per node")
    gen.add_argument("--tree-nodes", type=int, help="tree: most draft tokens per round")
    gen.add_argument("--no-speculation", action="store_true", help="target-only decoding (the reference)")
    gen.add_argument("--json", action="store_true", help="print text, token_ids and stats as JSON")


def _add_gguf_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gguf-threads", type=int, help="llama.cpp threads of a gguf draft (default: --cpu-threads, else one per core)")
    parser.add_argument("--gguf-context-tokens", type=int, help="KV cache cells the sessions of a gguf draft share (default 16384)")


def _add_bench(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="measured speedup: speculation on vs off against a running gateway (Spec-Bench prompts)")
    bench.add_argument("--url", default="http://localhost:8000", help="the gateway")
    bench.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="default: $OPENAI_API_KEY")
    bench.add_argument("--model", help="default: the first model the gateway lists")
    bench.add_argument(
        "--prompts",
        help="JSONL: Spec-Bench lines (category, turns) or lines with `prompt` or `messages` "
        "(default: benchmarks/spec-bench/question.jsonl, the Spec-Bench questions)",
    )
    bench.add_argument("--limit", type=int, default=80, help="prompts to use, taken round-robin across categories")
    bench.add_argument("--categories", help="comma-separated categories to keep (default: all)")
    bench.add_argument("--concurrency", default="1,4", help="comma-separated concurrency levels")
    bench.add_argument("--max-tokens", type=int, default=128)
    bench.add_argument("--temperature", type=float, default=0.0)
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--num-draft-tokens", type=int, help="K for the speculative requests (default: the server's)")
    bench.add_argument("--acceptance", choices=ACCEPTANCE.choices, help="the speculative requests' acceptance (default: the server's)")
    bench.add_argument(
        "--speculation-policy",
        choices=SPECULATION_POLICY.choices,
        help="always: the speculative requests draft every round, whatever the server's load-aware policy says (default: the server's)",
    )
    bench.add_argument("--out", help="output directory (default: bench-results/<timestamp>)")
    bench.add_argument("--no-plot", action="store_true", help="do not write speedup.png")
    bench.add_argument(
        "--baseline", choices=["hf"], help="hf: also time Hugging Face generate(), target alone and assisted, in-process (greedy)"
    )
    bench.add_argument("--target", help="the baseline's target model (default: the default pair's)")
    bench.add_argument("--draft", help="the baseline's draft model (default: the default pair's)")
    bench.add_argument("--config", help="accepted for uniformity; unused")


def _add_distill(commands: argparse._SubParsersAction) -> None:
    distill = commands.add_parser("distill", help="train a small draft model for a target by logit distillation (resumable)")
    distill.add_argument("--target", required=True, help="target model: HF directory, .gguf file, bundled name or hub id")
    distill.add_argument("--out", required=True, help="output directory: data, checkpoints, then the draft model itself")
    distill.add_argument("--layers", type=int, default=2, help="decoder layers of the draft")
    distill.add_argument("--draft-vocab", type=int, default=6144, help="tokens the draft scores (the target's most probable ones)")
    distill.add_argument("--prompts", type=int, default=480, help="distillation prompts the target answers (never Spec-Bench's)")
    distill.add_argument("--max-new-tokens", type=int, default=160, help="longest teacher answer")
    distill.add_argument("--data-batch-size", type=int, default=24, help="prompts the teacher answers at once")
    distill.add_argument("--epochs", type=float, default=3.0)
    distill.add_argument("--batch-size", type=int, default=8, help="training sequences per step")
    distill.add_argument("--learning-rate", type=float, default=1e-3)
    distill.add_argument("--device", default="auto", help="auto, cpu, cuda:N")
    distill.add_argument("--seed", type=int, default=0)
    distill.add_argument("--config", help="accepted for uniformity; unused")


def _add_make_draft(commands: argparse._SubParsersAction) -> None:
    make = commands.add_parser("make-draft", help="a quantized GGUF copy of a target, to draft with llama.cpp")
    make.add_argument(
        "--target",
        help="a .gguf file (re-quantized), a Hugging Face Llama directory (converted, then quantized) "
        "or a bundled name (default: smollm2-135m-instruct, the default target's GGUF)",
    )
    make.add_argument("--type", default="q8_0", help="f32, f16, bf16, q8_0 (default), q6_k, q5_k_m, q5_0, q4_k_m, q4_1, q4_0 or iq4_nl")
    make.add_argument("--out", help="output .gguf (default: $SPECDEC_MODELS_DIR/<target name>-<type>.gguf)")
    make.add_argument("--threads", type=int, help="quantizer threads (default: one per core)")
    make.add_argument("--config", help="accepted for uniformity; unused")


def _add_serve(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="run one service").add_subparsers(dest="service", required=True, metavar="SERVICE")
    draft = serve.add_parser("draft", help="the draft service (gRPC, default port 50051)")
    draft.add_argument("--draft", help="draft model (for --draft-method model)")
    draft.add_argument("--target", help="target model (for --draft-method layer_skip: its first layers are the draft)")
    draft.add_argument("--draft-method", choices=DRAFT_METHOD_CHOICES)
    draft.add_argument("--layer-skip-layers", type=int)
    draft.add_argument("--draft-quantization", choices=["int8"])
    _add_gguf_flags(draft)
    draft.add_argument("--draft-device", help="auto, cpu, cuda:N")
    draft.add_argument("--overlap", action=argparse.BooleanOptionalAction, help="draft each next block while the target verifies this one")
    draft.add_argument("--prompt-lookup", action=argparse.BooleanOptionalAction, help="try prompt lookup before the draft model each round")
    draft.add_argument("--prompt-lookup-min-ngram", type=int, help="shortest suffix n-gram that counts as a lookup match")
    draft.add_argument("--model-draft-tokens", type=int, help="most candidates per block from the draft model (lookup blocks: up to K)")
    verify = serve.add_parser("verify", help="the target-verify service (gRPC, default port 50052)")
    verify.add_argument("--target", help="target model: HF directory, .gguf file, bundled name or hub id")
    verify.add_argument("--device", help="auto, cpu, cuda:N")
    verify.add_argument("--draft-endpoint", help="HOST:PORT or dns:///HOST:PORT (round-robin over replicas)")
    verify.add_argument("--no-draft", action="store_true", help="no draft service: target-only decoding")
    verify.add_argument("--draft-round-timeout-ms", type=float, help="a draft block later than this falls back to the target")
    verify.add_argument("--num-draft-tokens", type=int, help="default K per round (with --adaptive-k, the most)")
    verify.add_argument(
        "--adaptive-k", action=argparse.BooleanOptionalAction, help="choose K each round from measured acceptance and costs"
    )
    verify.add_argument("--acceptance", choices=ACCEPTANCE.choices, help="default acceptance mode")
    verify.add_argument("--suffix-decoding", action=argparse.BooleanOptionalAction, help=SUFFIX_HELP)
    gateway = serve.add_parser("gateway", help="the OpenAI-compatible HTTP gateway (default port 8000)")
    gateway.add_argument("--config", help="YAML config file (default: $SPECDEC_CONFIG)")
    gateway.add_argument("--host", help="address to bind (default 0.0.0.0)")
    gateway.add_argument("--port", type=int)
    gateway.add_argument("--verify-endpoint", help="HOST:PORT of the verify service (default localhost:50052)")
    gateway.add_argument("--served-model-name", help="the model id clients send (default: the target's name)")
    gateway.add_argument("--api-keys-file", help="one API key per line, re-read on change (also: $SPECDEC_API_KEYS)")
    gateway.add_argument("--max-concurrent-requests", type=int)
    gateway.add_argument("--max-queue", type=int)
    gateway.add_argument("--tls-ca", help="CA bundle to verify the verify service's certificate")
    for parser in (draft, verify):
        parser.add_argument("--config", help="YAML config file (default: $SPECDEC_CONFIG)")
        parser.add_argument("--host", help="address to bind (default 0.0.0.0)")
        parser.add_argument("--port", type=int)
        parser.add_argument("--dtype", help="auto, float32, bfloat16, float16, float64")
        parser.add_argument("--max-sessions", type=int, help="concurrent streams before RESOURCE_EXHAUSTED")
        parser.add_argument("--cpu-threads", type=int, help="torch intra-op threads on CPU (default: one per core)")
        parser.add_argument("--metrics-port", type=int, help="Prometheus /metrics port (draft 9101, verify 9102; 0 = off)")
        parser.add_argument("--tls-cert", help="server certificate (PEM); enables TLS")
        parser.add_argument("--tls-key", help="server private key (PEM)")
        parser.add_argument("--tls-ca", help="CA bundle: verifies clients (mTLS) and, for verify, the draft service")
        parser.add_argument(
            "--tls-require-client-auth", action="store_true", default=None, help="mTLS: refuse clients without a certificate"
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except ValidationError as error:
        return _fail(describe_validation_error(error.errors(), rename=flag_for))
    except SpecdecError as error:
        return _fail(str(error))
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    # The GGUF loader draws a bare tqdm bar; tqdm reads this variable when it is first imported.
    # make-draft's bars are its progress output (shown on a terminal only: disable=None).
    if args.command != "make-draft":
        os.environ.setdefault("TQDM_DISABLE", "1")
    from specdec.cli import commands  # deferred: torch/transformers load only for commands that need them

    handlers = {
        "generate": commands.generate,
        "make-tiny-pair": commands.make_tiny_pair,
        "config": commands.config_show,
        "serve": commands.serve,
        "up": commands.up,
        "healthcheck": commands.healthcheck,
        "plan": commands.memory_plan,
        "check-lossless": commands.check_lossless,
        "bench": commands.bench,
        "distill": commands.distill,
        "make-draft": commands.make_draft,
    }
    return handlers[args.command](args)


def _fail(message: str) -> int:
    print(f"specdec: error: {name_flags(message)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
