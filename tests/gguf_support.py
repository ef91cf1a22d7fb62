"""GGUF files for the tests: the tiny Hugging Face pair written as llama.cpp Llama GGUFs, and quantized copies.

Kept minimal and inside tests/ (what `specdec make-draft` does for users lives in specdec/): enough
of convert_hf_to_gguf.py for the tiny Llama pair, float32 weights, the BPE tokenizer's tokens and
merges.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

_LAYER_TENSORS = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def write_llama_gguf(hf_dir: str | Path, out: str | Path) -> Path:
    """The Llama model in `hf_dir` as a float32 GGUF that llama.cpp loads."""
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    config = model.config
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_tokenizer(writer, tokenizer, Path(hf_dir))
    for name, tensor in _gguf_tensors(model):
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(out)


def _add_tokenizer(writer: gguf.GGUFWriter, tokenizer, hf_dir: Path) -> None:
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    special = set(tokenizer.all_special_ids)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(tokens))])
    merges = json.loads((hf_dir / "tokenizer.json").read_text())["model"]["merges"]
    writer.add_token_merges([" ".join(merge) if isinstance(merge, list) else merge for merge in merges])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)


def _gguf_tensors(model):
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    for name, tensor in model.state_dict().items():
        array = tensor.float().numpy()
        if name == "model.embed_tokens.weight":
            yield "token_embd.weight", array
        elif name == "model.norm.weight":
            yield "output_norm.weight", array
        elif name == "lm_head.weight":
            yield "output.weight", array
        elif name.startswith("model.layers."):
            _, _, index, rest = name.split(".", 3)
            module = rest.rsplit(".", 1)[0]
            if module.endswith("q_proj"):
                array = _rope_permute(array, heads)
            elif module.endswith("k_proj"):
                array = _rope_permute(array, kv_heads)
            yield f"blk.{index}.{_LAYER_TENSORS[module]}.weight", array


def _rope_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """Hugging Face's rotate-half row order to llama.cpp's interleaved pairs (convert_hf_to_gguf.py's permute)."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def quantize(source: str | Path, out: str | Path, kind: str) -> Path:
    """A `kind` (q8_0, q4_0) copy of a GGUF, made by llama.cpp's own quantizer."""
    import llama_cpp

    file_types = {"q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0}
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = file_types[kind]
    if llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params) != 0:
        raise RuntimeError(f"llama.cpp could not quantize {source} to {kind}")
    return Path(out)


def load_draft_gguf(path: str | Path, threads: int = 1, context_tokens: int = 4096, max_sequences: int = 8):
    """A GgufModel for tests: one thread (the suite runs on 2 cores), a small shared cache."""
    from specdec.gguf_model import GgufOptions, load_gguf

    return load_gguf(path, GgufOptions(threads=threads, context_tokens=context_tokens, max_sequences=max_sequences, device="cpu"))
