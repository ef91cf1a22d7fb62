"""Shared fixtures: one tiny random (target, draft) pair per test session, loaded once."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")


@pytest.fixture(scope="session")
def tiny_pair_paths(tmp_path_factory):
    from specdec.tiny_pair import make_tiny_pair

    return make_tiny_pair(tmp_path_factory.mktemp("tiny-pair"))


@pytest.fixture(scope="session")
def tiny_target(tiny_pair_paths):
    from specdec.models import load_model

    return load_model(tiny_pair_paths.target, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tiny_draft(tiny_pair_paths):
    from specdec.models import load_model

    return load_model(tiny_pair_paths.draft, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def foreign_tokenizer():
    """Same special tokens as the tiny pair, BPE trained on other text: the ids mean other things."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = ["Zebras vex quartz jukeboxes; 0123456789 + 9876543210 = 9999999999.\n"] * 10
    corpus += ["Pack my box with five dozen liquor jugs, whizzing klaxons buzz nightly.\n"] * 10
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
