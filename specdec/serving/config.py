"""Configuration: a YAML file (the format docs/configuration.md documents), SPECDEC_* env, then flags."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from specdec.acceptance_modes import TREE_DEFAULT, TREE_REFUSAL, rule
from specdec.enums import AcceptanceMode, Verification
from specdec.errors import SpecdecError, describe_validation_error
from specdec.fields import MinDraftTokens, NumDraftTokens
from specdec.limits import MAX_DRAFT_TOKENS

if TYPE_CHECKING:
    from specdec.tree import TreeShape


class DraftMethod(str, Enum):
    MODEL = "model"
    LAYER_SKIP = "layer_skip"
    NGRAM = "ngram"
    GGUF = "gguf"  # a GGUF file (e.g. a quantized copy of the target) run by llama.cpp
    SUFFIX = "suffix"  # suffix decoding alone (the `suffix` section's trees): no model


class TargetEngine(str, Enum):
    """What runs the target (specdec/engines): auto picks llama.cpp for a .gguf file, transformers otherwise."""

    AUTO = "auto"
    HF = "hf"  # transformers (any format it loads; a .gguf is de-quantized into torch)
    LLAMA_CPP = "llama_cpp"  # a .gguf file run by llama.cpp


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=False)


class ModelSection(_Section):
    target_path: str | None = None
    draft_path: str | None = None
    draft_method: DraftMethod = DraftMethod.MODEL
    target_engine: TargetEngine = Field(
        TargetEngine.AUTO, description="what runs the target: auto (llama_cpp for a .gguf, else hf), hf or llama_cpp"
    )
    target_context_tokens: int = Field(
        32768,
        ge=256,
        le=1 << 20,
        description="KV cache cells of a llama_cpp target (allocated at start), split evenly among its target_kv_sessions",
    )
    target_kv_sessions: int | None = Field(
        None,
        ge=1,
        le=255,
        description="llama_cpp target: sessions with KV cells of their own, so none changes another's logits; "
        "more wait for a free one. Default: verify_service.max_batch_size",
    )
    target_kv_shared: bool = Field(
        False,
        description="llama_cpp target: one pool of cells all sessions share instead (a session may use the whole pool, "
        "but its logits then move with where its cells land: greedy and seeded texts may change with the load)",
    )
    target_prompt_cache_tokens: int = Field(
        16384,
        ge=0,
        le=1 << 22,
        description="llama_cpp target with KV cells per session: tokens of finished sessions kept in host memory "
        "(least recently used dropped) for later requests whose prompt begins alike, such as a conversation's next "
        "turn; 0 turns it off",
    )
    layer_skip_layers: int | None = Field(None, ge=1, description="target layers the layer-skip draft keeps; default half")
    device: str = "auto"
    draft_device: str = "auto"
    dtype: str = "auto"
    draft_quantization: str | None = Field(None, pattern="^(int8)$")
    # Prompt lookup before the draft model (drafters/prompt_lookup.py): free candidates where the
    # output quotes the prompt or repeats itself. Off for a draft that is right more often than a lookup.
    prompt_lookup: bool = Field(
        True, description="propose the continuation of an earlier occurrence of the last n-gram before asking the draft model"
    )
    prompt_lookup_min_ngram: int = Field(2, ge=1, le=16, description="shortest suffix n-gram that counts as a match")
    prompt_lookup_max_ngram: int = Field(3, ge=1, le=16, description="longest suffix n-gram tried first")
    model_draft_tokens: NumDraftTokens | None = Field(
        None, description="most candidates per block from the draft model; default: speculative.draft_tokens"
    )
    # draft_method gguf: draft_path is a .gguf file that llama.cpp runs (drafters/gguf.py).
    gguf_threads: int | None = Field(
        None, ge=1, le=256, description="llama.cpp threads of the gguf draft; default: draft_service.cpu_threads, else one per core"
    )
    gguf_context_tokens: int = Field(
        16384, ge=256, le=1 << 20, description="KV cache cells all sessions of the gguf draft share (allocated at start)"
    )

    @model_validator(mode="after")
    def _lookup_ngrams_ordered(self) -> ModelSection:
        if self.prompt_lookup_min_ngram > self.prompt_lookup_max_ngram:
            raise ValueError(
                f"prompt_lookup_min_ngram ({self.prompt_lookup_min_ngram}) is larger than "
                f"prompt_lookup_max_ngram ({self.prompt_lookup_max_ngram})"
            )
        return self


class SuffixSection(_Section):
    """Suffix decoding (specdec/drafters/suffix.py): draft from suffix trees over the request and the scope's earlier
    outputs before the draft model. In a verify service and in process it runs beside the target (no round trip);
    `model.draft_method: suffix` runs it alone (in a draft service too)."""

    enabled: bool = Field(False, description="draft from the suffix trees first, the draft model where they have no confident match")
    per_key: bool = Field(True, description="earlier outputs draft only for requests of the same API key; false: for every caller")
    max_depth: int = Field(24, ge=2, le=512, description="longest context matched, and deepest continuation kept")
    max_cached_requests: int = Field(10_000, ge=1, le=1_000_000, description="outputs kept in all scopes together, oldest first")
    max_scopes: int = Field(64, ge=1, le=100_000, description="scopes (API keys) with trees; the least recently used is dropped")
    draft_tokens: NumDraftTokens = Field(16, description="most candidates per suffix block")
    max_spec_factor: float = Field(1.0, gt=0, le=64, description="a block holds at most this many times the matched length")
    min_token_prob: float = Field(0.1, ge=0, le=1, description="stop a block where the continuation's estimated frequency drops below")
    # 8: about twice what a K = 4 block of a good draft model brings; 1 lost 9% on chat (docs/benchmarks.md, Suffix decoding).
    min_score: float = Field(8.0, ge=0, le=256, description="a block goes before the draft model's when it expects this many accepted")

    def settings(self):
        from specdec.drafters.suffix_cache import SuffixSettings  # deferred: the gateway reads this file too

        return SuffixSettings(**self.model_dump(exclude={"enabled"}))


class SpeculativeSection(_Section):
    enabled: bool = True
    draft_tokens: NumDraftTokens = 5
    # Choose K per round within [min_draft_tokens, draft_tokens] from measured acceptance and costs.
    adaptive_k: bool = False
    min_draft_tokens: MinDraftTokens = Field(0, description="least adaptive K; 0 lets a session stop drafting")
    verification: Verification = Verification.SEQUENTIAL
    # verification=tree: up to tree_nodes draft tokens per round, tree_branching children per node,
    # draft_tokens deep (specdec/drafters/tree_draft.py); needs acceptance coupled or greedy.
    tree_branching: int = Field(2, ge=1, le=16)
    tree_nodes: int = Field(16, ge=1, le=256)
    acceptance_sampling: bool = True
    # None: each request's own rule (acceptance_modes.requested_acceptance): coupled for a request
    # with a seed, rejection for one without. A mode named here applies to every request that names none.
    acceptance: AcceptanceMode | None = None
    draft_top_k: int = Field(32, ge=1)
    prediction_draft_tokens: NumDraftTokens = Field(
        MAX_DRAFT_TOKENS,
        description="most candidates per block drafted from a request's prediction (blocks start at 16 and double while accepted in full)",
    )

    @model_validator(mode="after")
    def _min_draft_tokens_within_draft_tokens(self) -> SpeculativeSection:
        if self.min_draft_tokens > self.draft_tokens:
            raise ValueError(f"min_draft_tokens ({self.min_draft_tokens}) is larger than draft_tokens ({self.draft_tokens})")
        return self

    @model_validator(mode="after")
    def _tree_settings_fit(self) -> SpeculativeSection:
        if self.verification is not Verification.TREE:
            return self
        if self.acceptance is None:
            # `verification: tree` alone must work: an unseeded request's default (rejection) verifies chains only.
            self.acceptance = TREE_DEFAULT
        elif not rule(self.acceptance).verifies_trees:
            raise ValueError(TREE_REFUSAL)
        if self.tree_nodes < self.draft_tokens:
            raise ValueError(
                f"tree_nodes ({self.tree_nodes}) is smaller than draft_tokens ({self.draft_tokens}): "
                "the tree holds at least the draft_tokens-long chain"
            )
        return self

    @property
    def tree(self) -> TreeShape | None:
        """The tree a drafter may propose each round; None for chains."""
        from specdec.tree import TreeShape  # deferred: torch, which probes and `config show` do not need

        return TreeShape(self.tree_branching, self.tree_nodes) if self.verification is Verification.TREE else None

    def tree_request_fields(self) -> dict[str, int]:
        """A GenerationRequest's tree fields under this section (none for chains)."""
        tree = self.tree
        return {"tree_branching": tree.branching, "tree_nodes": tree.max_nodes} if tree else {}

    @field_validator("acceptance_sampling")
    @classmethod
    def _lossless_stays_on(cls, value: bool) -> bool:
        # Lossless is the product: a config that turns the rejection-sampling switch off is refused, not ignored.
        if not value:
            raise ValueError("false would make outputs differ from the target model; specdec only serves lossless speculation")
        return value


class ServingSection(_Section):
    """The public HTTP side: the OpenAI-compatible gateway."""

    host: str = "0.0.0.0"
    port: int = Field(8000, ge=0, le=65535)
    max_batch_size: int = Field(8, ge=1)
    # NOTE: admitting more generations than one forward pass serves adds no throughput, only latency:
    # verify passes its sessions max_batch_size at a time, so each running request would advance
    # once every few passes and none finish sooner; the rest wait in the queue, first come first served.
    max_concurrent_requests: int | None = Field(
        None, ge=1, description="generations at once (a request for n choices counts n); default: max_batch_size"
    )
    max_queue: int = Field(1024, ge=0, description="requests waiting for a slot; beyond it: 429")
    queue_timeout_s: float = Field(60.0, gt=0, description="longest wait for a slot before 429")
    verify_endpoint: str = "localhost:50052"
    served_model_name: str | None = Field(None, description="the model id clients send; default: the target's name")
    api_keys_file: str | None = Field(None, description="one key per line; re-read when it changes")
    audit_secret_file: str | None = Field(None, description="secret for the audit log's key ids (HMAC); also $SPECDEC_AUDIT_SECRET")
    allowed_cidrs: list[str] = Field(default_factory=list, description="client allow-list; empty = everyone")
    rate_limit_rpm: int | None = Field(None, ge=1, description="requests per minute per API key")
    rate_limit_tpm: int | None = Field(None, ge=1, description="completion tokens per minute per API key")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    body_refusals_per_s: float = Field(
        4.0,
        gt=0,
        le=10_000,
        description="413s for oversized bodies answered a second; "
        "more wait their turn, their uploads paused (up to 64; beyond, the connection is closed)",
    )
    refusals_per_s_per_client: float = Field(
        8.0,
        ge=0,
        le=10_000,
        description="4xx answers a second per client (API key, else address); more wait their turn, a lone one is answered at once; 0: off",
    )
    max_n: int = Field(8, ge=1)
    max_tokens_limit: int = Field(8192, ge=1, description="largest max_tokens a request may ask for")
    request_timeout_s: float = Field(600.0, gt=0)
    upstream_connect_timeout_s: float = Field(2.0, gt=0, description="verify unreachable for this long: 503")

    @model_validator(mode="after")
    def _admit_one_pass_by_default(self) -> ServingSection:
        if self.max_concurrent_requests is None:
            self.max_concurrent_requests = self.max_batch_size
        return self


class ObservabilitySection(_Section):
    metrics_port: int = Field(
        9090, ge=1, le=65535, description="not read: each service has its own metrics_port; accepted so files in the documented format load"
    )
    log_level: str = Field("info", pattern="^(debug|info|warning|error|critical)$")
    log_format: str = Field("json", pattern="^(json|text)$", description="services log one JSON object per line")
    log_content: bool = Field(False, description="include prompt and output text in the gateway's audit lines")


class _BatchingSection(_Section):
    """Continuous batching of a service's sessions and the budget of their KV caches."""

    max_batch_size: int | None = Field(None, ge=1, description="sessions sharing one forward pass; default: serving.max_batch_size")
    batch_wait_ms: float = Field(
        50.0, ge=0, le=1000, description="longest wait for more sessions to join a pass (also at most half a pass)"
    )
    kv_cache_bytes: int | None = Field(None, ge=1, description="KV cache budget in bytes; default: kv_cache_fraction of free memory")
    kv_cache_fraction: float = Field(0.5, gt=0, le=1, description="share of the memory free after loading that KV caches may use")
    admission_timeout_s: float = Field(30.0, gt=0, description="longest wait of a new session for KV cache room")


class DraftServiceSection(_BatchingSection):
    host: str = "0.0.0.0"
    port: int = Field(50051, ge=0, le=65535)
    metrics_port: int = Field(9101, ge=0, le=65535)
    max_sessions: int = Field(256, ge=1)
    grace_seconds: float = Field(5.0, ge=0, description="time open streams get on shutdown")
    cpu_threads: int | None = Field(None, ge=1, description="torch intra-op threads on CPU; default: torch's (one per core)")
    overlap: bool = Field(True, description="draft each next block while the target verifies this one, guessing all is accepted")
    # Once open, a Propose stream may idle as long as its verify session lasts (rounds without drafting).
    stream_idle_timeout_s: float = Field(30.0, gt=0, description="a Propose stream that sends no `open` within this is closed")


class VerifyServiceSection(_BatchingSection):
    host: str = "0.0.0.0"
    port: int = Field(50052, ge=0, le=65535)
    metrics_port: int = Field(9102, ge=0, le=65535)
    # "host:port", or "dns:///host:port" to round-robin over every address the name resolves to.
    draft_endpoint: str | None = "localhost:50051"
    draft_round_timeout_ms: float = Field(2000.0, gt=0, description="a draft slower than this for one block is abandoned")
    max_sessions: int = Field(64, ge=1)
    default_max_tokens: int | None = Field(
        None, ge=1, description="max_tokens of a request that sets none; default: to the end of the context"
    )
    grace_seconds: float = Field(10.0, ge=0, description="time in-flight requests get on shutdown")
    cpu_threads: int | None = Field(None, ge=1, description="torch intra-op threads on CPU; default: torch's (one per core)")
    load_aware_speculation: bool = Field(True, description="no drafting at loads where it measurably delivers fewer tokens/s")
    load_window_s: float = Field(2.0, gt=0, description="length of the load-aware policy's measurement windows")
    stream_idle_timeout_s: float = Field(
        30.0, gt=0, description="a Verify stream with no message for this long is closed (DEADLINE_EXCEEDED)"
    )
    max_unopened_streams_per_peer: int = Field(16, ge=1, description="Verify streams one client address may hold before sending `open`")


class TlsSection(_Section):
    """TLS between services. Server side: cert + key (+ ca_file and require_client_auth for mTLS);
    client side: ca_file to trust, client cert + key for mTLS."""

    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    require_client_auth: bool = False
    client_cert_file: str | None = None
    client_key_file: str | None = None

    @property
    def server_enabled(self) -> bool:
        return bool(self.cert_file)

    @property
    def client_enabled(self) -> bool:
        return bool(self.ca_file or self.client_cert_file)


class SpecdecConfig(BaseSettings):
    """All settings. Precedence: command-line flags > SPECDEC_* env > the YAML file > defaults."""

    model_config = SettingsConfigDict(env_prefix="SPECDEC_", env_nested_delimiter="__", extra="forbid")

    model: ModelSection = ModelSection()
    speculative: SpeculativeSection = SpeculativeSection()
    suffix: SuffixSection = SuffixSection()
    serving: ServingSection = ServingSection()
    observability: ObservabilitySection = ObservabilitySection()
    draft_service: DraftServiceSection = DraftServiceSection()
    verify_service: VerifyServiceSection = VerifyServiceSection()
    tls: TlsSection = TlsSection()


class _FileSource(PydanticBaseSettingsSource):
    """The YAML file's values, already read and checked to be a mapping."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self.data = data

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.data


def load_config(path: str | Path | None = None, overrides: dict[str, dict[str, Any]] | None = None) -> SpecdecConfig:
    """Read `path` (or $SPECDEC_CONFIG), SPECDEC_* env, and `overrides` ({section: {key: value}}, from
    command-line flags; None values mean "not given")."""
    path = path or os.environ.get("SPECDEC_CONFIG")
    file_data = _read_yaml(Path(path)) if path else {}
    flags = {section: {k: v for k, v in values.items() if v is not None} for section, values in (overrides or {}).items()}

    class _Configured(SpecdecConfig):
        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, env_settings, **_other_sources):
            return init_settings, env_settings, _FileSource(settings_cls, file_data)

    try:
        return _Configured(**{section: values for section, values in flags.items() if values})
    except ValidationError as error:
        where = f" (config file {path}, SPECDEC_* environment and flags)" if path else ""
        raise SpecdecError(f"{describe_validation_error(error.errors())}{where}") from error


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as error:
        raise SpecdecError(f"cannot read config file {path}: {error.strerror}") from error
    except yaml.YAMLError as error:
        raise SpecdecError(f"config file {path} is not valid YAML: {error}") from error
    if not isinstance(data, dict):
        raise SpecdecError(f"config file {path} must be a mapping of sections, got {type(data).__name__}")
    return data
