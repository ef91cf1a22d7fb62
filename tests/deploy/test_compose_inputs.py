"""`make compose-inputs`: what compose.yaml mounts, written where missing and readable by the containers' uids."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_support import ROOT


def compose_inputs(tmp_path: Path) -> subprocess.CompletedProcess:
    if shutil.which("make") is None:
        pytest.fail("make is not installed (Debian: apt-get install make)", pytrace=False)
    # -o install: use this interpreter's environment as it is, never (re)install into it.
    bin_dir = Path(sys.executable).parent
    command = [
        "make",
        "-C",
        str(ROOT),
        "-o",
        "install",
        "compose-inputs",
        f"BIN={bin_dir}",
        f"PYTHON={sys.executable}",
        f"MODELS_DIR={tmp_path / 'models'}",
        f"SECRETS_DIR={tmp_path / 'secrets'}",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, check=True)


def test_compose_inputs_writes_secrets_and_a_pair_other_users_can_read(tmp_path):
    compose_inputs(tmp_path)
    for name in ("api_keys.txt", "grafana_admin_password.txt"):
        secret = tmp_path / "secrets" / name
        assert re.fullmatch(r"[0-9a-f]{64}\n", secret.read_text()), name
        assert secret.stat().st_mode & 0o777 == 0o644, f"{name}: uid 10001 (specdec) and 472 (grafana) read it"
    for role in ("target", "draft"):
        model = tmp_path / "models" / role
        assert (model / "config.json").is_file() and (model / "model.safetensors").stat().st_mode & 0o777 == 0o644


def test_compose_inputs_keeps_what_is_there(tmp_path):
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "api_keys.txt").write_text("my-key\n")
    (tmp_path / "models" / "target").mkdir(parents=True)
    result = compose_inputs(tmp_path)
    assert (tmp_path / "secrets" / "api_keys.txt").read_text() == "my-key\n", "an existing key file is never replaced"
    assert not (tmp_path / "models" / "draft").exists(), "models/ with a target is the user's: no tiny pair"
    assert "make-tiny-pair" not in result.stdout
