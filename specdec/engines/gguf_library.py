"""Loading a GGUF file into llama.cpp, and llama.cpp's log: its lines go to Python logging, its errors into our messages."""

from __future__ import annotations

import collections
import ctypes
import functools
import logging
from pathlib import Path

from specdec.errors import ModelLoadError

log = logging.getLogger("specdec.engines.gguf_model")  # the engine's logger, as before the split

_ALL_LAYERS = 999  # llama.cpp's "offload every layer"
_GGML_LOG_ERROR, _GGML_LOG_CONT = 4, 5


def load_model(lib, path: Path, device: str):
    params = lib.llama_model_default_params()
    params.n_gpu_layers = _gpu_layers(lib, device)
    if device.startswith("cuda:"):
        params.main_gpu = int(device.split(":", 1)[1])
    llama_log().begin()
    model = lib.llama_model_load_from_file(str(path).encode(), params)
    if model is None:
        raise ModelLoadError(f"llama.cpp could not load {path}: {llama_log().first_error() or 'not a model it can run'}")
    return model


def _gpu_layers(lib, device: str) -> int:
    if device == "cpu":
        return 0
    supported = bool(lib.llama_supports_gpu_offload())
    if device == "auto":
        return _ALL_LAYERS if supported else 0
    if not supported:
        raise ModelLoadError(
            f"model.draft_device {device}: this llama-cpp-python was built without GPU support; reinstall it with "
            "CMAKE_ARGS=-DGGML_CUDA=on (see docs/configuration.md), or use draft_device cpu"
        )
    return _ALL_LAYERS


def token_text(lib, vocab, token_id: int) -> str:
    return lib.llama_vocab_get_text(vocab, token_id).decode("utf-8", errors="replace")


class LlamaLog:
    """llama.cpp's log lines, sent to Python logging (debug); its error lines kept for our messages."""

    def __init__(self) -> None:
        self.errors: collections.deque[str] = collections.deque(maxlen=8)
        self._line: list[str] = []
        self._level = 0
        self.callback = None  # the ctypes callback, kept alive while llama.cpp holds it

    def write(self, level: int, text: bytes, _user_data) -> None:
        if level != _GGML_LOG_CONT:
            self._level = level
        self._line.append(text.decode("utf-8", errors="replace"))
        if self._line[-1].endswith("\n"):
            line = "".join(self._line).strip()
            self._line = []
            log.debug("llama.cpp: %s", line)
            if self._level == _GGML_LOG_ERROR and line:
                self.errors.append(line)

    def begin(self) -> None:
        """Forget earlier errors: the next `first_error` is about what follows."""
        self.errors.clear()

    def first_error(self) -> str:
        """The first error since `begin` (llama.cpp logs the cause first, then each caller's 'failed')."""
        return self.errors[0] if self.errors else ""


@functools.cache
def llama_log() -> LlamaLog:
    """Route llama.cpp's logging (by default many lines on stderr) once per process."""
    import llama_cpp

    sink = LlamaLog()
    sink.callback = llama_cpp.llama_log_callback(sink.write)
    llama_cpp.llama_log_set(sink.callback, ctypes.c_void_p(0))
    return sink
