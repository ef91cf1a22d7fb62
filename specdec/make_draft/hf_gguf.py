"""A Hugging Face Llama directory -> a GGUF llama.cpp loads, without rounding any weight.

The reference is llama.cpp's convert_hf_to_gguf.py (`LlamaModel`): the same metadata keys, tensor
names (gguf's TensorNameMap) and Q/K row permutation. Weights keep their precision: float32 and
float16 tensors are written as they are, bfloat16 ones widened to float32 (exact), norms and other
1-D tensors as float32, as llama.cpp expects. Quantizing is llama.cpp's job afterwards (quantize.py),
so the weights are rounded once. Tensors stream from the safetensors files one at a time: memory
stays at about one tensor, whatever the model's size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from tqdm import tqdm

from specdec.errors import DraftConversionError
from specdec.make_draft.hf_vocab import add_tokenizer

SUPPORTED_ARCHITECTURES = {"LlamaForCausalLM": gguf.MODEL_ARCH.LLAMA}
_SKIPPED_SUFFIXES = (".rotary_emb.inv_freq",)  # recomputed by llama.cpp


@dataclass(frozen=True)
class LlamaShape:
    """The hyperparameters of config.json that the GGUF needs (transformers 4 and 5 spellings)."""

    context_length: int
    embedding_length: int
    block_count: int
    feed_forward_length: int
    head_count: int
    head_count_kv: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_linear_factor: float | None
    vocab_size: int
    tied_embeddings: bool

    @staticmethod
    def from_config(config: dict, source: Path) -> LlamaShape:
        rope = config.get("rope_parameters") or {}
        scaling = config.get("rope_scaling") or rope
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
        if rope_type not in ("default", "linear"):
            raise DraftConversionError(f"unsupported rope scaling {rope_type!r} in {source}: make-draft converts default and linear rope")
        heads = config["num_attention_heads"]
        return LlamaShape(
            context_length=config["max_position_embeddings"],
            embedding_length=config["hidden_size"],
            block_count=config["num_hidden_layers"],
            feed_forward_length=config["intermediate_size"],
            head_count=heads,
            head_count_kv=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            rope_theta=config.get("rope_theta", rope.get("rope_theta", 10000.0)),
            rope_linear_factor=scaling["factor"] if rope_type == "linear" else None,
            vocab_size=config["vocab_size"],
            tied_embeddings=config.get("tie_word_embeddings", False),
        )

    def write(self, writer: gguf.GGUFWriter) -> None:
        writer.add_context_length(self.context_length)
        writer.add_embedding_length(self.embedding_length)
        writer.add_block_count(self.block_count)
        writer.add_feed_forward_length(self.feed_forward_length)
        writer.add_head_count(self.head_count)
        writer.add_head_count_kv(self.head_count_kv)
        writer.add_key_length(self.head_dim)
        writer.add_value_length(self.head_dim)
        writer.add_rope_dimension_count(self.head_dim)
        writer.add_rope_freq_base(self.rope_theta)
        if self.rope_linear_factor is not None:
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(self.rope_linear_factor)
        writer.add_layer_norm_rms_eps(self.rms_norm_eps)
        writer.add_vocab_size(self.vocab_size)


@dataclass(frozen=True)
class _Tensor:
    hf_name: str
    gguf_name: str
    file: Path
    shape: tuple[int, ...]
    dtype: np.dtype  # as written


def read_config(model_dir: Path) -> dict:
    """config.json of a supported architecture, else a one-line error naming what is wrong."""
    path = model_dir / "config.json"
    if not path.is_file():
        raise DraftConversionError(f"{model_dir} is not a Hugging Face model directory (no config.json) nor a .gguf file")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DraftConversionError(f"cannot read {path}: {error}") from error
    architectures = config.get("architectures") or [config.get("model_type", "unknown")]
    if architectures[0] not in SUPPORTED_ARCHITECTURES:
        raise DraftConversionError(
            f"unsupported architecture {architectures[0]} in {path}: make-draft converts "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}; convert others with llama.cpp's convert_hf_to_gguf.py "
            "and pass the .gguf"
        )
    return config


def write_gguf(model_dir: Path, out: Path, tokenizer) -> Path:
    """`model_dir` (a Llama) as a lossless GGUF at `out`, with `tokenizer` (loaded from it) as its vocabulary."""
    config = read_config(model_dir)
    shape = LlamaShape.from_config(config, model_dir)
    tensors = _plan(model_dir, shape)
    writer = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(model_dir.name)
    shape.write(writer)
    all_f32 = all(tensor.dtype == np.float32 for tensor in tensors)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if all_f32 else gguf.LlamaFileType.MOSTLY_F16)
    add_tokenizer(writer, model_dir, tokenizer, shape.vocab_size)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for tensor in tensors:
        writer.add_tensor_info(tensor.gguf_name, tensor.shape, tensor.dtype, int(np.prod(tensor.shape)) * tensor.dtype.itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    with tqdm(
        total=sum(int(np.prod(t.shape)) * t.dtype.itemsize for t in tensors),
        desc=f"converting {model_dir.name}",
        unit="B",
        unit_scale=True,
        disable=None,
    ) as bar:
        for tensor in tensors:
            data = _prepared(tensor, shape)
            writer.write_tensor_data(data)
            bar.update(data.nbytes)
    writer.close()
    return out


def _plan(model_dir: Path, shape: LlamaShape) -> list[_Tensor]:
    """Every tensor to write, in file order, with its GGUF name and the dtype it is written in."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise DraftConversionError(f"{model_dir} has no .safetensors weights (make-draft reads safetensors only)")
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, shape.block_count)
    tensors = []
    for file in files:
        try:
            with safe_open(file, framework="pt") as weights:
                for hf_name in weights.keys():  # noqa: SIM118 -- safetensors' safe_open has keys(), not __contains__/__iter__
                    if hf_name.endswith(_SKIPPED_SUFFIXES) or (shape.tied_embeddings and hf_name == "lm_head.weight"):
                        continue
                    gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
                    if gguf_name is None:
                        raise DraftConversionError(f"unexpected tensor {hf_name} in {file}: not part of a Llama model")
                    piece = weights.get_slice(hf_name)
                    written = _written_dtype(piece.get_dtype(), gguf_name)
                    tensors.append(_Tensor(hf_name, gguf_name, file, tuple(piece.get_shape()), written))
        except (OSError, SafetensorError) as error:
            raise DraftConversionError(f"cannot read {file}: {error}") from error
    return tensors


def _written_dtype(stored: str, gguf_name: str) -> np.dtype:
    # llama.cpp wants 1-D tensors (norms, biases) in float32; float16 matrices stay float16 (exact).
    if stored == "F16" and not gguf_name.endswith((".bias", "_norm.weight")):
        return np.dtype(np.float16)
    return np.dtype(np.float32)


def _prepared(tensor: _Tensor, shape: LlamaShape) -> np.ndarray:
    try:
        with safe_open(tensor.file, framework="pt") as weights:
            data = weights.get_tensor(tensor.hf_name)
    except (OSError, SafetensorError) as error:
        raise DraftConversionError(f"cannot read {tensor.hf_name} from {tensor.file}: {error}") from error
    if tensor.gguf_name.endswith(("attn_q.weight", "attn_q.bias")):
        data = _interleave_rope_halves(data, shape.head_count)
    elif tensor.gguf_name.endswith(("attn_k.weight", "attn_k.bias")):
        data = _interleave_rope_halves(data, shape.head_count_kv)
    return data.to(torch.float16 if tensor.dtype == np.float16 else torch.float32).numpy()


def _interleave_rope_halves(weights: torch.Tensor, heads: int) -> torch.Tensor:  # [heads * head_dim, ...] -> same shape
    """Reorder each head's rows from HF's rotate-half rope layout to llama.cpp's adjacent pairs (LlamaModel.permute)."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)
