"""GGUF files for the tests: the tiny Hugging Face pair written as llama.cpp GGUFs by `specdec make-draft`'s own
converter (lossless, float32 as the tiny pair is stored), and the models loaded for drafting."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer

from specdec.make_draft.hf_gguf import write_gguf


def write_llama_gguf(hf_dir: str | Path, out: str | Path) -> Path:
    """The Llama model in `hf_dir` as an unquantized GGUF that llama.cpp loads."""
    return write_gguf(Path(hf_dir), Path(out), AutoTokenizer.from_pretrained(hf_dir))


def load_draft_gguf(path: str | Path, threads: int = 1, context_tokens: int = 4096, max_sequences: int = 8):
    """A GgufModel for tests: one thread (the suite runs on 2 cores), a small shared cache."""
    from specdec.engines.gguf_model import GgufOptions, load_gguf

    return load_gguf(path, GgufOptions(threads=threads, context_tokens=context_tokens, max_sequences=max_sequences, device="cpu"))


def load_llama_cpp_target(path: str | Path, max_sequences: int = 8):
    """A LlamaCppTarget for tests: one thread (the suite runs on 2 cores), a small shared cache."""
    from specdec.engines.llama_cpp import LlamaCppSettings
    from specdec.engines.llama_cpp import load_llama_cpp_target as load

    return load(path, LlamaCppSettings(threads=1, context_tokens=4096, max_sequences=max_sequences, device="cpu"))
