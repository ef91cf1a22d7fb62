"""Loading target and draft models: a Hugging Face directory, a .gguf file, or a hub id."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

import specdec.engines.reduced_vocab  # noqa: F401 -- registers the reduced-vocabulary draft with the Auto classes
from specdec.batching import BatchingOptions, SequenceRunner, default_runner
from specdec.batching.packed_forward import model_parts
from specdec.bundled import BUNDLED_MODELS, bundled_model_path
from specdec.constraints.matcher import hf_grammar_tokenizer
from specdec.errors import IncompatibleVocabularyError, ModelLoadError
from specdec.kv_cache import TREE_NEEDS_PACKED
from specdec.quantization import quantize_int8_weight_only

log = logging.getLogger(__name__)

_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer, on one device."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source: str
    # Where sessions get their KV caches and passes; services install a batched one with their budget.
    runner: SequenceRunner | None = field(default=None, repr=False)

    def open_sequence(self, reserve_tokens: int):  # -> PrefixCache
        """A KV cache for one session, with room for `reserve_tokens` (may wait for the budget)."""
        if self.runner is None:
            self.runner = default_runner(self.model)
        return self.runner.open_sequence(reserve_tokens)

    def batched_runner(self, options: BatchingOptions) -> SequenceRunner:
        """A service's runner: packed, batched passes where the architecture allows."""
        return default_runner(self.model, options)

    @property
    def tree_refusal(self) -> str | None:
        """Why this model cannot verify token trees; None: it can (the packed pass supports it)."""
        if model_parts(self.model) is not None:
            return None
        return f"{self.model.config.model_type} models cannot verify or draft token trees: {TREE_NEEDS_PACKED}"

    @property
    def supports_trees(self) -> bool:
        return self.tree_refusal is None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def vocab_size(self) -> int:
        """Width of the logits, which may exceed len(tokenizer) when embeddings are padded.

        A reduced-vocabulary draft scores fewer rows but returns logits over the target's width.
        """
        if hasattr(self.model.config, "draft_vocab_size"):
            return self.model.config.vocab_size
        return self.model.get_output_embeddings().out_features

    @property
    def max_context(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    def describe_memory(self) -> str:
        return describe_memory(self)

    def grammar_tokenizer(self, vocab_size: int):  # -> llguidance.LLTokenizer
        """The tokenizer as the grammar engine sees it (structured outputs), built once per model."""
        return hf_grammar_tokenizer(self.tokenizer, vocab_size, tuple(sorted(self.eos_token_ids)))

    @property
    def eos_token_ids(self) -> frozenset[int]:
        ids = {self.tokenizer.eos_token_id}
        generation_eos = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(generation_eos if isinstance(generation_eos, list) else [generation_eos])
        return frozenset(i for i in ids if i is not None)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} requested but CUDA is not available on this host")
    return resolved


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not one of auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def load_model(source: str | Path, device: str = "auto", dtype: str = "auto", quantize: str | None = None) -> LoadedModel:
    """Load `source` (HF directory, .gguf file, bundled model name, or hub id) for inference.

    `quantize="int8"` stores Linear weights as int8 (weight-only), for a draft that must fit
    beside the target.
    """
    if quantize not in (None, "int8"):
        raise ModelLoadError(f"quantize {quantize!r} is not supported (use int8 or none)")
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    location, kwargs = _locate(str(source))
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(location, dtype=torch_dtype, **kwargs)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"could not load model {str(source)!r}: {_summary(error)}") from error
    if quantize == "int8":
        quantize_int8_weight_only(model)
    model.to(torch_device).eval()
    log.info("loaded %s on %s as %s (%s)", source, torch_device, torch_dtype, quantize or "unquantized")
    return LoadedModel(model=model, tokenizer=tokenizer, source=str(source))


def load_tokenizer(source: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer of `source` alone (a draft service checking its draft against the target's vocabulary)."""
    location, kwargs = _locate(str(source))
    try:
        return AutoTokenizer.from_pretrained(location, **kwargs)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"could not load the tokenizer of {str(source)!r}: {_summary(error)}") from error


def _locate(source: str) -> tuple[str, dict]:
    """Where from_pretrained should look, and with which extra arguments."""
    if source in BUNDLED_MODELS:
        source = str(bundled_model_path(source))
    path = Path(source).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {source}")
        return str(path.parent), {"gguf_file": path.name}
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{source} is a directory without config.json: not a Hugging Face model")
        return str(path), {}
    if source.startswith((".", "/", "~")) or path.exists() or source.count("/") > 1:
        raise ModelLoadError(f"model path not found: {source}")
    # Otherwise a hub id: from_pretrained uses the local cache when the hub is unreachable.
    return source, {}


def _summary(error: BaseException) -> str:
    """The error's first two lines as one (library messages often put the useful part second)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(error).__name__


def check_vocab_compatible(target: LoadedModel, draft: LoadedModel) -> None:
    """Refuse a draft whose token ids mean something else to the target's tokenizer."""
    draft_vocab = draft.tokenizer.get_vocab()
    difference = vocab_difference(target.tokenizer.get_vocab(), draft_vocab)
    if difference:
        raise IncompatibleVocabularyError(f"draft vocabulary is incompatible with the target's: {difference}")
    if draft.vocab_size > target.vocab_size and len(draft_vocab) > target.vocab_size:
        raise IncompatibleVocabularyError(
            f"draft vocabulary ({len(draft_vocab)} tokens) is larger than the target's logits ({target.vocab_size})"
        )


def vocab_difference(target_vocab: dict[str, int], draft_vocab: dict[str, int]) -> str | None:
    """How the draft's token -> id map disagrees with the target's (None: every draft token has its target id)."""
    differing = [token for token, token_id in draft_vocab.items() if target_vocab.get(token) != token_id]
    if not differing:
        return None
    example = differing[0]
    return (
        f"{len(differing)} of the draft's {len(draft_vocab)} tokens have a different id in the target tokenizer "
        f"(e.g. {example!r}: draft id {draft_vocab[example]}, target id {target_vocab.get(example)})"
    )


def describe_memory(loaded: LoadedModel) -> str:
    """Weight memory of a model, and the device's allocated memory on CUDA, for start-up logs."""
    model = loaded.model
    weight_bytes = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    text = f"{weight_bytes / 2**20:.1f} MiB of weights on {loaded.device}"
    if loaded.device.type == "cuda":
        text += f", {torch.cuda.memory_allocated(loaded.device) / 2**20:.1f} MiB allocated on the device"
    return text
