"""`specdec make-draft` as users run it: the output line and file, and one clear error line for each
bad input (missing, corrupt, unknown type, unsupported architecture), with nothing left behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys

import gguf
import numpy as np
import pytest

from specdec.cli.main import main


def _bad_inputs(root, tiny_target_dir) -> dict:
    """name -> (target path, what the error must say)."""
    (root / "junk.gguf").write_bytes(os.urandom(4096))
    (root / "empty.gguf").touch()
    cases = {
        "missing": (root / "nowhere.gguf", "does not exist"),
        "junk": (root / "junk.gguf", "invalid magic characters"),
        "empty": (root / "empty.gguf", "failed to read magic"),
        "no-config": (root, "not a Hugging Face model directory"),
    }
    for name, edit, message in [
        ("gpt2", lambda d: _edit_json(d / "config.json", architectures=["GPT2LMHeadModel"]), "unsupported architecture GPT2LMHeadModel"),
        ("bad-config", lambda d: (d / "config.json").write_text("{oops"), "cannot read .*config.json"),
        ("bad-weights", lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 100), "cannot read .*model.safetensors"),
        (
            "rope",
            lambda d: _edit_json(d / "config.json", rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}),
            "unsupported rope scaling 'yarn'",
        ),
    ]:
        shutil.copytree(tiny_target_dir, root / name)
        edit(root / name)
        cases[name] = (root / name, message)
    writer = gguf.GGUFWriter(root / "unknown-arch.gguf", "notallama")
    writer.add_tensor("x.weight", np.zeros((32, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    cases["unknown-arch"] = (root / "unknown-arch.gguf", "unknown model architecture: 'notallama'")
    return cases


def _edit_json(path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


@pytest.fixture(scope="module")
def bad_inputs(tiny_pair_paths, tmp_path_factory):
    return _bad_inputs(tmp_path_factory.mktemp("bad-inputs"), tiny_pair_paths.target)


@pytest.mark.parametrize("case", ["missing", "junk", "empty", "no-config", "gpt2", "bad-config", "bad-weights", "rope", "unknown-arch"])
def test_a_bad_input_is_one_error_line_and_leaves_nothing(bad_inputs, case, tmp_path, capsys):
    target, message = bad_inputs[case]
    assert main(["make-draft", "--target", str(target), "--type", "q4_0", "--out", str(tmp_path / "draft.gguf")]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("specdec: error:")]
    assert len(errors) == 1 and re.search(message, errors[0]), errors
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_type_is_refused_before_any_work(tiny_pair_paths, tmp_path, capsys):
    assert main(["make-draft", "--target", str(tiny_pair_paths.target), "--type", "q3_x", "--out", str(tmp_path / "d.gguf")]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (
        "specdec: error: unknown quantization type 'q3_x': "
        "choose one of f32, f16, bf16, q8_0, q6_k, q5_k_m, q5_0, q4_k_m, q4_1, q4_0, iq4_nl"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_command_writes_the_draft_under_the_models_directory_and_prints_its_path(tiny_pair_paths, tmp_path):
    env = {**os.environ, "SPECDEC_MODELS_DIR": str(tmp_path / "models"), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "specdec.cli", "make-draft", "--target", str(tiny_pair_paths.target), "--type", "q8_0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    out = tmp_path / "models" / "target-q8_0.gguf"
    assert run.stdout.startswith(f"{out}  (") and run.stdout.count("\n") == 1
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert "Traceback" not in run.stderr and "llama_" not in run.stderr  # llama.cpp's log stays captured
