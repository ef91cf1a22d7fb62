"""The real `python -m specdec.cli` process: commands, output formats, and one-line errors.

Each process spends seconds importing torch/transformers, so the module fixture runs every
invocation up front, one per CPU at a time, and the tests read their results.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from transformers import AutoTokenizer

TIMEOUT_S = 180
GENERATE = ("generate", "--prompt", "hello", "--max-tokens", "8", "--seed", "1")
SEED_YAML = """\
model: {target_path: /models/target-model, draft_path: /models/draft-model}
speculative: {enabled: true, draft_tokens: 5, verification: tree, acceptance_sampling: true}
serving: {host: 0.0.0.0, port: 8080, max_batch_size: 8, max_concurrent_requests: 64}
observability: {metrics_port: 9090, log_level: info}
"""


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def _run_cli(args: tuple[str, ...]) -> Run:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPECDEC_")}
    # One thread each: the processes run side by side, and oversubscribed BLAS threads thrash.
    env.update(HF_HUB_OFFLINE="1", TQDM_DISABLE="1", PYTHONIOENCODING="utf-8", OMP_NUM_THREADS="1")
    # Bytes, decoded below: text mode would turn a generated "\r" into "\n".
    done = subprocess.run([sys.executable, "-m", "specdec.cli", *args], capture_output=True, env=env, timeout=TIMEOUT_S)
    return Run(done.returncode, done.stdout.decode("utf-8"), done.stderr.decode("utf-8"))


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory, tiny_pair_paths, foreign_tokenizer, tiny_ggufs) -> Path:
    root = tmp_path_factory.mktemp("cli")
    (root / "seed.yaml").write_text(SEED_YAML)
    for name, model in (("foreign-draft", tiny_pair_paths.draft), ("foreign-target", tiny_pair_paths.target)):
        shutil.copytree(model, root / name)
        foreign_tokenizer.save_pretrained(root / name)
    (root / "truncated.gguf").write_bytes(tiny_ggufs.draft.read_bytes()[:4096])
    (root / "empty-model").mkdir()  # what an empty model mount looks like
    return root


@pytest.fixture(scope="module")
def runs(tiny_pair_paths, work_dir, tiny_ggufs) -> dict[str, Run]:
    target, draft = str(tiny_pair_paths.target), str(tiny_pair_paths.draft)
    with_target = (*GENERATE, "--target", target)
    gguf = ("--draft-method", "gguf", "--gguf-threads", "1")
    commands = {
        "make_tiny_pair": ("make-tiny-pair", str(work_dir / "pair")),
        "model_json": (*with_target, "--draft", draft, "--json"),
        "model_human": (*with_target, "--draft", draft),
        "layer_skip_json": (*with_target, "--draft-method", "layer_skip", "--json"),
        "ngram_json": (*with_target, "--draft-method", "ngram", "--json"),
        "no_speculation_json": (*with_target, "--draft", draft, "--no-speculation", "--json"),
        "adaptive_coupled_json": (*with_target, "--draft", draft, "--adaptive-k", "--acceptance", "coupled", "--json"),
        "negative_temperature": (*with_target, "--draft", draft, "--temperature", "-1"),
        "zero_top_p": (*with_target, "--draft", draft, "--top-p", "0"),
        "big_top_p": (*with_target, "--draft", draft, "--top-p", "1.5"),
        "zero_draft_tokens": (*with_target, "--draft", draft, "--num-draft-tokens", "0"),
        "missing_target": (*GENERATE, "--target", "/nonexistent/path", "--draft-method", "ngram"),
        # `up` with a target and no draft: the draft service starts first, and used to fail about the missing draft.
        "up_missing_target": ("up", "--target", "/nonexistent/target"),
        "foreign_draft": (*with_target, "--draft", str(work_dir / "foreign-draft")),
        "model_method_without_draft": (*with_target, "--draft-method", "model"),
        "unparsable_max_tokens": (*with_target, "--max-tokens", "many"),
        "config_show": ("config", "show", "--config", str(work_dir / "seed.yaml")),
        "serve_draft_missing": ("serve", "draft", "--draft", "/nonexistent/draft", "--port", "0", "--metrics-port", "0"),
        "serve_verify_empty_target": (
            "serve",
            "verify",
            "--target",
            str(work_dir / "empty-model"),
            "--no-draft",
            "--port",
            "0",
            "--metrics-port",
            "0",
        ),
        "gguf_json": (*with_target, *gguf, "--draft", str(tiny_ggufs.draft), "--json"),
        "gguf_missing": (*with_target, *gguf, "--draft", str(work_dir / "missing.gguf")),
        "gguf_truncated": (*with_target, *gguf, "--draft", str(work_dir / "truncated.gguf")),
        "gguf_foreign_target": (*GENERATE, "--target", str(work_dir / "foreign-target"), *gguf, "--draft", str(tiny_ggufs.draft)),
    }
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip(commands, pool.map(_run_cli, commands.values())))


@pytest.fixture(scope="module")
def tokenizer(tiny_pair_paths):
    return AutoTokenizer.from_pretrained(tiny_pair_paths.target)


def _succeeded(run: Run) -> None:
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr


def _json_result(run: Run, max_tokens: int = 8) -> dict:
    _succeeded(run)
    result = json.loads(run.stdout)
    assert isinstance(result["text"], str)
    assert 1 <= len(result["token_ids"]) <= max_tokens
    stats = result["stats"]
    assert 0 <= stats["accepted_tokens"] <= stats["draft_tokens"]
    expected_rate = stats["accepted_tokens"] / stats["draft_tokens"] if stats["draft_tokens"] else 0.0
    assert stats["acceptance_rate"] == pytest.approx(expected_rate, abs=1e-6)
    return result


def _one_line_error(run: Run, *needles: str) -> str:
    assert run.returncode == 1, (run.returncode, run.stderr)
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("specdec: error:"), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_make_tiny_pair_writes_both_models(runs, work_dir, tiny_pair_paths):
    _succeeded(runs["make_tiny_pair"])
    for name in ("target", "draft"):
        written = work_dir / "pair" / name
        assert (written / "config.json").is_file()
        assert (written / "tokenizer.json").is_file()
        # Default seed 0, like the fixture's pair: the same weights byte for byte.
        fixture_weights = (getattr(tiny_pair_paths, name) / "model.safetensors").read_bytes()
        assert (written / "model.safetensors").read_bytes() == fixture_weights


def test_generate_json_with_draft_model(runs, tokenizer):
    result = _json_result(runs["model_json"])
    stats = result["stats"]
    assert stats["rounds"] >= 1 and stats["draft_tokens"] >= stats["rounds"]
    assert stats["accepted_tokens"] > 0  # the tiny draft is a truncation of the target
    assert result["seed"] == 1
    assert result["finish_reason"] == "length" and len(result["token_ids"]) == 8
    assert result["text"] == tokenizer.decode(result["token_ids"], skip_special_tokens=True)


def test_generate_json_with_layer_skip(runs):
    stats = _json_result(runs["layer_skip_json"])["stats"]
    assert stats["rounds"] >= 1 and stats["accepted_tokens"] > 0


def test_generate_json_with_ngram_needs_no_draft(runs):
    stats = _json_result(runs["ngram_json"])["stats"]
    assert stats["fallback"] is False


def test_no_speculation_runs_no_rounds(runs):
    stats = _json_result(runs["no_speculation_json"])["stats"]
    assert stats["rounds"] == 0 and stats["draft_tokens"] == 0


def test_generate_with_adaptive_k_is_token_identical_to_target_only_in_coupled_mode(runs):
    adaptive = _json_result(runs["adaptive_coupled_json"])
    assert adaptive["stats"]["draft_tokens"] > 0
    assert adaptive["token_ids"] == _json_result(runs["no_speculation_json"])["token_ids"]


def test_a_seeded_generate_is_the_seeds_text_with_speculation_on_and_off(runs):
    """--seed and no --acceptance: coupled (specdec.acceptance_modes.requested_acceptance), so every
    drafter gives the target-only text for the seed (GENERATE samples at the default temperature, 1.0)."""
    reference = _json_result(runs["no_speculation_json"])["token_ids"]
    for name in ("model_json", "layer_skip_json", "ngram_json", "gguf_json"):
        assert _json_result(runs[name])["token_ids"] == reference, name


def test_human_output_is_text_then_stats_on_stderr(runs):
    human, as_json = runs["model_human"], _json_result(runs["model_json"])
    _succeeded(human)
    assert human.stdout == as_json["text"] + "\n"  # same seed, same text
    assert "acceptance_rate=" in human.stderr
    assert f"rounds={as_json['stats']['rounds']}" in human.stderr


@pytest.mark.parametrize(
    ("name", "flag"),
    [
        ("negative_temperature", "--temperature"),
        ("zero_top_p", "--top-p"),
        ("big_top_p", "--top-p"),
        ("zero_draft_tokens", "--num-draft-tokens"),
    ],
)
def test_out_of_range_flag_is_one_line_naming_it(runs, name, flag):
    _one_line_error(runs[name], f"{flag}:")


def test_missing_target_is_one_line_naming_flag_and_path(runs):
    _one_line_error(runs["missing_target"], "/nonexistent/path")
    _one_line_error(runs["missing_target"], "--target")


def test_up_names_a_missing_target_before_starting_anything(runs):
    line = _one_line_error(runs["up_missing_target"], "--target /nonexistent/target: no such file or directory")
    assert "draft" not in line


@pytest.mark.parametrize(
    "name, needle",
    [
        ("serve_draft_missing", "--draft: model path not found: /nonexistent/draft"),
        ("serve_verify_empty_target", "empty-model is a directory without config.json"),
    ],
)
def test_a_service_whose_model_fails_to_load_ends_with_one_line(runs, name, needle):
    """What a container with a bad model mount prints: its start-up log lines, then the error, no traceback."""
    run = runs[name]
    assert run.returncode == 1 and "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr
    lines = run.stderr.strip().splitlines()
    assert lines[-1].startswith("specdec: error:") and needle in lines[-1], lines[-1]
    assert all(json.loads(line)["level"] == "info" for line in lines[:-1]), "only start-up log lines before it"


def test_incompatible_draft_vocabulary_is_one_line(runs):
    _one_line_error(runs["foreign_draft"], "incompatible")


def test_generate_json_with_a_gguf_draft(runs):
    assert _json_result(runs["gguf_json"])["stats"]["draft_tokens"] > 0


def test_missing_or_truncated_gguf_draft_is_one_line_naming_the_flag(runs, work_dir):
    _one_line_error(runs["gguf_missing"], "--draft:", "GGUF file not found", str(work_dir / "missing.gguf"))
    _one_line_error(runs["gguf_truncated"], "--draft:", "llama.cpp could not load", str(work_dir / "truncated.gguf"))


def test_gguf_draft_of_another_vocabulary_is_one_line_naming_both_files(runs, work_dir, tiny_ggufs):
    _one_line_error(runs["gguf_foreign_target"], str(tiny_ggufs.draft), str(work_dir / "foreign-target"))


def test_model_draft_method_without_draft_names_the_flag(runs):
    line = _one_line_error(runs["model_method_without_draft"])
    assert re.search(r"--draft(?![-\w])", line), line


def test_unparsable_value_is_an_argparse_usage_error(runs):
    run = runs["unparsable_max_tokens"]
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("specdec generate: error: argument --max-tokens")


def test_config_show_prints_the_effective_yaml(runs):
    run = runs["config_show"]
    _succeeded(run)
    assert "verification: tree" in run.stdout
    shown = yaml.safe_load(run.stdout)
    assert shown["speculative"]["draft_tokens"] == 5
    assert shown["model"]["target_path"] == "/models/target-model"
