"""The one table between command-line flags and the settings they override. Both directions come
from it: a parsed command line -> load_config overrides, and a config field in an error -> the flag
the user typed."""

from __future__ import annotations

import argparse
import re
from typing import Any

from specdec.fields import BY_NAME, SAMPLING

SERVICE_SECTIONS = {"draft": "draft_service", "verify": "verify_service", "gateway": "serving"}

# (setting, flag). A flag a command does not have is simply not read for it; `serve S` reads only
# S's own section of the service sections (each has a --port).
CONFIG_FLAGS: tuple[tuple[str, str], ...] = (
    ("model.target_path", "--target"),
    ("model.draft_path", "--draft"),
    ("model.draft_method", "--draft-method"),
    ("model.layer_skip_layers", "--layer-skip-layers"),
    ("model.draft_quantization", "--draft-quantization"),
    ("model.device", "--device"),
    ("model.draft_device", "--draft-device"),
    ("model.dtype", "--dtype"),
    ("model.prompt_lookup", "--prompt-lookup"),
    ("model.prompt_lookup_min_ngram", "--prompt-lookup-min-ngram"),
    ("model.model_draft_tokens", "--model-draft-tokens"),
    ("model.gguf_threads", "--gguf-threads"),
    ("model.gguf_context_tokens", "--gguf-context-tokens"),
    ("suffix.enabled", "--suffix-decoding"),
    ("speculative.draft_tokens", "--num-draft-tokens"),
    ("speculative.acceptance", "--acceptance"),
    ("speculative.adaptive_k", "--adaptive-k"),
    ("speculative.verification", "--verification"),
    ("speculative.tree_branching", "--tree-branching"),
    ("speculative.tree_nodes", "--tree-nodes"),
    *((f"{section}.{field}", flag) for section in SERVICE_SECTIONS.values() for field, flag in (("host", "--host"), ("port", "--port"))),
    *(
        (f"{section}.{field}", flag)
        for section in ("draft_service", "verify_service")
        for field, flag in (("max_sessions", "--max-sessions"), ("metrics_port", "--metrics-port"), ("cpu_threads", "--cpu-threads"))
    ),
    ("draft_service.overlap", "--overlap"),
    ("verify_service.draft_endpoint", "--draft-endpoint"),
    ("verify_service.draft_round_timeout_ms", "--draft-round-timeout-ms"),
    ("serving.verify_endpoint", "--verify-endpoint"),
    ("serving.served_model_name", "--served-model-name"),
    ("serving.api_keys_file", "--api-keys-file"),
    ("serving.max_concurrent_requests", "--max-concurrent-requests"),
    ("serving.max_queue", "--max-queue"),
    ("tls.cert_file", "--tls-cert"),
    ("tls.key_file", "--tls-key"),
    ("tls.ca_file", "--tls-ca"),
    ("tls.require_client_auth", "--tls-require-client-auth"),
)
# Fields of a generation request (`generate`), named in its validation errors.
REQUEST_FLAGS: tuple[tuple[str, str], ...] = tuple(
    (field.name, "--" + field.name.replace("_", "-")) for field in (*SAMPLING, BY_NAME["max_tokens"], BY_NAME["seed"])
)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def config_overrides(args: argparse.Namespace, service: str | None = None) -> dict[str, dict[str, Any]]:
    """{section: {field: value}} for every flag of the table this command has (None: not given).
    `service` ("draft", "verify", "gateway") places the per-service flags."""
    overrides: dict[str, dict[str, Any]] = {}
    for setting, flag in CONFIG_FLAGS:
        section, field = setting.split(".")
        if section in SERVICE_SECTIONS.values() and section != SERVICE_SECTIONS.get(service):
            continue  # another service's setting
        if hasattr(args, _dest(flag)):
            overrides.setdefault(section, {})[field] = getattr(args, _dest(flag))
    return overrides


FLAG_FOR_FIELD = dict(CONFIG_FLAGS + REQUEST_FLAGS)


def flag_for(field: str) -> str:
    """The flag that sets `field` ('speculative.draft_tokens' -> '--num-draft-tokens'), else the field."""
    return FLAG_FOR_FIELD.get(field, field)


def name_flags(message: str) -> str:
    """A message with each 'field:' a flag sets written as that flag."""
    for field, flag in FLAG_FOR_FIELD.items():
        message = re.sub(rf"(?<![-\w.]){re.escape(field)}:", f"{flag}:", message)
    return message
