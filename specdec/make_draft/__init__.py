"""`specdec make-draft`: a quantized copy of a target, as a GGUF draft for llama.cpp.

From a GGUF target, llama.cpp's quantizer re-quantizes it (quantize.py). From a Hugging Face
directory, the model is first written to a lossless GGUF (hf_gguf.py, with its tokenizer:
hf_vocab.py), then quantized, and llama.cpp's tokenization of sample texts is checked against
the HF tokenizer's. The output appears only when complete (written under a temporary name).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from specdec.errors import DraftConversionError
from specdec.make_draft.quantize import QUANT_TYPES, check_quant_type, import_llama_cpp, quantize_gguf

__all__ = ["QUANT_TYPES", "MadeDraft", "check_quant_type", "make_draft"]


@dataclass(frozen=True)
class MadeDraft:
    path: Path
    size_bytes: int
    seconds: float


def make_draft(source: Path, quant_type: str, out: Path, threads: int | None = None) -> MadeDraft:
    """`source` (a .gguf file or a Hugging Face Llama directory) quantized to `quant_type`, written at `out` (mode 0644)."""
    started = time.perf_counter()
    check_quant_type(quant_type)
    import_llama_cpp()  # fail before any work when it is missing
    if not source.exists():
        raise DraftConversionError(f"{source} does not exist")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".make-draft-", dir=out.parent) as scratch:
        partial = Path(scratch) / out.name
        if source.is_dir():
            _from_hf(source, partial, quant_type, threads)
        else:
            quantize_gguf(source, partial, quant_type, threads)
        partial.chmod(0o644)
        os.replace(partial, out)
    return MadeDraft(out, out.stat().st_size, time.perf_counter() - started)


def _from_hf(model_dir: Path, out: Path, quant_type: str, threads: int | None) -> None:
    from specdec.make_draft.hf_gguf import read_config, write_gguf
    from specdec.make_draft.hf_vocab import check_tokenization

    read_config(model_dir)  # architecture first: the tokenizer load below is the slow part
    tokenizer = _load_tokenizer(model_dir)
    lossless = write_gguf(model_dir, out.with_name(out.stem + ".lossless.gguf"), tokenizer)
    quantize_gguf(lossless, out, quant_type, threads)
    lossless.unlink()
    check_tokenization(out, tokenizer)


def _load_tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError) as error:
        raise DraftConversionError(f"cannot load the tokenizer of {model_dir}: {error}") from error
