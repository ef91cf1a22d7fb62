"""Behavioural tests for the tiny offline (target, draft) model pair."""

import os

# Must be set before transformers is imported: the pair must load with no hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec.cli.tiny_pair import TinyPairPaths, make_tiny_pair

SENTENCE = (
    "Once upon a time the people who lived by the river walked to the market, "
    "bought bread and fruit, and talked about the weather with their friends."
)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> TinyPairPaths:
    # Module scope: building is cheap but loading transformers models is not.
    return make_tiny_pair(tmp_path_factory.mktemp("tiny_pair"), seed=0)


@pytest.fixture(scope="module")
def loaded(pair):
    return {
        "target": AutoModelForCausalLM.from_pretrained(pair.target).eval(),
        "draft": AutoModelForCausalLM.from_pretrained(pair.draft).eval(),
        "tok_target": AutoTokenizer.from_pretrained(pair.target),
        "tok_draft": AutoTokenizer.from_pretrained(pair.draft),
    }


def test_directories_are_complete(pair):
    for path in (pair.target, pair.draft):
        for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json"):
            assert (path / name).is_file(), f"{path / name} missing"


def test_tokenizers_identical_and_match_models(loaded):
    tok = loaded["tok_target"]
    assert tok.get_vocab() == loaded["tok_draft"].get_vocab()
    for model in (loaded["target"], loaded["draft"]):
        assert model.config.vocab_size == len(tok)
        assert model.config.eos_token_id == tok.eos_token_id
        assert model.generation_config.eos_token_id == tok.eos_token_id


def test_draft_is_shallower(loaded):
    assert loaded["draft"].config.num_hidden_layers < loaded["target"].config.num_hidden_layers


@pytest.mark.parametrize("text", ["héllo 世界 🙂", "tabs\tand\nnewlines  ", "Ωμέγα ∑ 🚀🚀"])
def test_unicode_round_trip(loaded, text):
    tok = loaded["tok_target"]
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text


def test_chat_template(loaded):
    tok = loaded["tok_target"]
    messages = [{"role": "user", "content": "hi"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    # Chat markers must be single tokens, or prompts would be mis-split.
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")


@torch.no_grad()
def test_draft_agrees_with_target(loaded):
    ids = loaded["tok_target"](SENTENCE, return_tensors="pt")["input_ids"]
    target_logits = loaded["target"](ids).logits[0]
    draft_logits = loaded["draft"](ids).logits[0]
    agreement = (target_logits.argmax(-1) == draft_logits.argmax(-1)).float().mean().item()
    assert agreement > 0.3
    # Not identical models: otherwise acceptance tests would be vacuous.
    assert not torch.allclose(target_logits, draft_logits)


@torch.no_grad()
def test_target_distribution_is_peaked(loaded):
    ids = loaded["tok_target"](SENTENCE, return_tensors="pt")["input_ids"]
    top1 = loaded["target"](ids).logits[0].softmax(-1).max(-1).values
    assert top1.mean().item() > 10 / len(loaded["tok_target"])


def test_same_seed_is_deterministic(pair, tmp_path):
    again = make_tiny_pair(tmp_path, seed=0)
    for a, b in ((pair.target, again.target), (pair.draft, again.draft)):
        assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
        assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()


def test_output_is_world_readable_whatever_the_umask(tmp_path):
    # Containers read the pair as uid 10001; safetensors alone writes model.safetensors 0600.
    previous = os.umask(0o077)
    try:
        make_tiny_pair(tmp_path / "pair", seed=0)
    finally:
        os.umask(previous)
    modes = {path.relative_to(tmp_path).as_posix(): path.stat().st_mode & 0o777 for path in (tmp_path / "pair").rglob("*")}
    modes["pair"] = (tmp_path / "pair").stat().st_mode & 0o777
    assert "pair/target/model.safetensors" in modes and "pair/draft/model.safetensors" in modes
    wrong = {path: oct(mode) for path, mode in modes.items() if mode != (0o755 if (tmp_path / path).is_dir() else 0o644)}
    assert not wrong, f"not 0644 files / 0755 directories: {wrong}"


def test_an_existing_output_directory_keeps_its_mode(tmp_path):
    out = tmp_path / "mine"
    out.mkdir(mode=0o700)
    out.chmod(0o700)
    make_tiny_pair(out, seed=0)
    assert out.stat().st_mode & 0o777 == 0o700
    assert (out / "target" / "model.safetensors").stat().st_mode & 0o777 == 0o644
