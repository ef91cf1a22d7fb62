"""GGUF -> GGUF with llama.cpp's own quantizer (`llama_model_quantize`), with a progress bar.

llama.cpp logs one line per tensor ("[  12/ 272] blk.1.attn_q.weight - ... converting to q4_0");
the bar follows those lines, and the error lines become the message when quantizing fails.
The log is captured rather than printed: make-draft's output is its bars and one result line.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from specdec.errors import DraftConversionError

# --type name -> llama.cpp file type (llama.h's LLAMA_FTYPE_*). q8_0, q4_0 and iq4_nl are the ones measured as drafts
# (q4_0 and iq4_nl run repacked kernels on AVX2 CPUs: docs/benchmarks.md, "Draft quantizations and the bound").
QUANT_TYPES = {
    "f32": "LLAMA_FTYPE_ALL_F32",
    "f16": "LLAMA_FTYPE_MOSTLY_F16",
    "bf16": "LLAMA_FTYPE_MOSTLY_BF16",
    "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
    "q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K",
    "q5_k_m": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
    "q5_0": "LLAMA_FTYPE_MOSTLY_Q5_0",
    "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
    "q4_1": "LLAMA_FTYPE_MOSTLY_Q4_1",
    "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
    "iq4_nl": "LLAMA_FTYPE_MOSTLY_IQ4_NL",
}
_TENSOR_LINE = re.compile(rb"\[\s*(\d+)/\s*(\d+)\]")
_LOG_PREFIX = re.compile(r"^(?:\w+: |failed to quantize: )+")  # "llama_model_quantize: failed to quantize: ..."
_GGML_LOG_LEVEL_ERROR, _GGML_LOG_LEVEL_CONT = 4, 5


def check_quant_type(name: str) -> str:
    if name not in QUANT_TYPES:
        raise DraftConversionError(f"unknown quantization type {name!r}: choose one of {', '.join(QUANT_TYPES)}")
    return name


def import_llama_cpp():
    try:
        import llama_cpp
    except ImportError as error:
        raise DraftConversionError(
            "make-draft needs llama-cpp-python (llama.cpp's quantizer): pip install 'llama-cpp-python==0.3.36'"
        ) from error
    return llama_cpp


@dataclass
class LlamaLog:
    """llama.cpp's log while make-draft calls it: kept off the terminal, error lines kept for messages."""

    on_text: Callable[[bytes], None] = lambda text: None
    error_text: list[bytes] = field(default_factory=list)  # error lines, as fragments (a line may come in several)
    _in_error: bool = False

    def __call__(self, level: int, text: bytes, user_data) -> None:
        if level != _GGML_LOG_LEVEL_CONT:
            self._in_error = level == _GGML_LOG_LEVEL_ERROR
        if self._in_error:
            self.error_text.append(text or b"")
        self.on_text(text or b"")

    def reason(self) -> str:
        lines = b"".join(self.error_text).decode("utf-8", errors="replace").splitlines()
        return "; ".join(_LOG_PREFIX.sub("", line.strip()) for line in lines if line.strip()) or "no reason given"


@contextmanager
def captured_llama_log(log: LlamaLog) -> Iterator[LlamaLog]:
    """Send llama.cpp's log to `log` inside the block, then back to llama-cpp-python's own handler."""
    llama_cpp = import_llama_cpp()
    callback = llama_cpp.llama_log_callback(log)  # referenced until llama.cpp no longer calls it
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
    try:
        yield log
    finally:
        from llama_cpp import _logger

        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))


def _follow_tensor_lines(bar: tqdm) -> Callable[[bytes], None]:
    def on_text(text: bytes) -> None:
        if match := _TENSOR_LINE.search(text):
            bar.total = int(match.group(2))
            bar.update(int(match.group(1)) - bar.n)

    return on_text


def quantize_gguf(source: Path, out: Path, quant_type: str, threads: int | None = None) -> None:
    """Write `source` quantized to `quant_type` at `out`, through llama.cpp (any architecture it knows).

    llama.cpp checks the file as it loads it (magic, header, tensor bounds): its error lines make the message.
    """
    llama_cpp = import_llama_cpp()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANT_TYPES[check_quant_type(quant_type)])
    params.nthread = threads or os.cpu_count() or 1
    # NOTE: an already quantized source (the default target's Q4_1) is dequantized, then quantized again;
    # llama.cpp refuses that unless asked, since the rounding compounds. For a draft that is the point.
    params.allow_requantize = True
    with (
        tqdm(desc=f"quantizing to {quant_type}", unit="tensor", disable=None) as bar,
        captured_llama_log(LlamaLog(_follow_tensor_lines(bar))) as log,
    ):
        status = llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), ctypes.byref(params))
    if status != 0:
        raise DraftConversionError(f"llama.cpp could not quantize {source}: {log.reason()}")
