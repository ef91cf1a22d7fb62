"""The committed stubs in specdec/v1 are exactly what `make proto` generates from protos/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_stubs_match_the_protos(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run([str(ROOT / "scripts" / "gen_protos.sh"), str(tmp_path)], check=True, env=env, capture_output=True)
    generated = {path.relative_to(tmp_path): path.read_bytes() for path in (tmp_path / "specdec" / "v1").iterdir() if path.is_file()}
    committed = {
        path.relative_to(ROOT): path.read_bytes()
        for path in (ROOT / "specdec" / "v1").iterdir()
        if path.is_file() and path.suffix in (".py", ".pyi")
    }
    assert set(generated) == set(committed), "run `make proto`: the set of generated files changed"
    stale = sorted(str(name) for name, content in generated.items() if committed[name] != content)
    assert not stale, f"run `make proto`: stale stubs {stale}"
