"""The tokenizer in a converted GGUF: llama.cpp's pre-tokenizer named from tokenizer.json, token
types, and the tokenization check that refuses a GGUF llama.cpp would split differently."""

from __future__ import annotations

import json
import shutil

import gguf
import pytest
from transformers import AutoTokenizer

from specdec.errors import DraftConversionError
from specdec.make_draft import hf_vocab, make_draft

GPT2 = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
DIGITS = {"type": "Digits", "individual_digits": True}
LLAMA3 = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": hf_vocab._LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}


@pytest.mark.parametrize(
    "pre,name",
    [
        (GPT2, "gpt-2"),
        ({"type": "Sequence", "pretokenizers": [DIGITS, GPT2]}, "smollm"),
        (LLAMA3, "llama-bpe"),
    ],
    ids=["gpt-2", "smollm", "llama-bpe"],
)
def test_the_pre_tokenizer_is_named_from_its_rules(pre, name):
    assert hf_vocab._pre_tokenizer_name({"pre_tokenizer": pre}) == name


@pytest.mark.parametrize(
    "pre",
    [
        {"type": "Metaspace", "replacement": "▁"},
        {"type": "ByteLevel", "use_regex": False},  # no splitting at all: no llama.cpp rule does that
        {**GPT2, "add_prefix_space": True},
        {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": False}, GPT2]},
    ],
)
def test_an_unknown_pre_tokenizer_is_refused(pre):
    with pytest.raises(DraftConversionError, match="unsupported pre-tokenizer"):
        hf_vocab._pre_tokenizer_name({"pre_tokenizer": pre})


@pytest.mark.parametrize(
    "spec,message",
    [
        ({"model": {"type": "Unigram"}, "normalizer": None}, "unsupported tokenizer"),
        ({"model": {"type": "BPE"}, "normalizer": {"type": "NFC"}}, "unsupported tokenizer"),
        (None, "no tokenizer.json"),
    ],
)
def test_tokenizers_other_than_byte_level_bpe_are_refused(tmp_path, spec, message):
    if spec is not None:
        (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(DraftConversionError, match=message):
        hf_vocab._tokenizer_json(tmp_path)


def test_tokens_keep_the_hf_spelling_and_unused_rows_are_padded(tiny_target):
    tokenizer = tiny_target.tokenizer
    tokens, types = hf_vocab._tokens(tokenizer, len(tokenizer) + 3)
    by_id = {token_id: token for token, token_id in tokenizer.get_vocab().items()}
    assert tokens[: len(tokenizer)] == [by_id[i] for i in range(len(tokenizer))]
    assert tokens[-3:] == [f"[PAD{len(tokenizer) + i}]" for i in range(3)] and types[-3:] == [gguf.TokenType.UNUSED] * 3
    assert {types[i] for i in tokenizer.all_special_ids} == {gguf.TokenType.CONTROL}
    assert types[tokenizer.convert_tokens_to_ids("Ġthe")] == gguf.TokenType.NORMAL
    with pytest.raises(DraftConversionError, match="beyond the model's vocab_size"):
        hf_vocab._tokens(tokenizer, len(tokenizer) - 1)


@pytest.fixture(scope="module")
def digit_splitting_dir(tiny_pair_paths, tmp_path_factory):
    """The tiny target with SmolLM's pre-tokenizer: digits one by one, then GPT-2's rules."""
    model_dir = tmp_path_factory.mktemp("digits") / "target"
    shutil.copytree(tiny_pair_paths.target, model_dir)
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [DIGITS, spec["pre_tokenizer"]]}
    (model_dir / "tokenizer.json").write_text(json.dumps(spec))
    return model_dir


def test_a_smollm_style_tokenizer_converts_and_llama_cpp_splits_digits_alike(digit_splitting_dir, tmp_path):
    import llama_cpp

    made = make_draft(digit_splitting_dir, "f32", tmp_path / "digits.gguf", threads=1)
    tokenizer = AutoTokenizer.from_pretrained(digit_splitting_dir)
    expected = tokenizer.encode("year 2024", add_special_tokens=False)
    assert tokenizer.convert_ids_to_tokens(expected)[-4:] == ["2", "0", "2", "4"]
    llama = llama_cpp.Llama(model_path=str(made.path), vocab_only=True, verbose=False)
    try:
        assert llama.tokenize(b"year 2024", add_bos=False, special=True) == expected
    finally:
        llama.close()


def test_a_gguf_that_llama_cpp_would_split_differently_is_refused(tiny_pair_paths, tmp_path, monkeypatch):
    # A tokenizer that adds a space before the first word, which no llama.cpp "gpt2" rule does: were it
    # named gpt-2 (monkeypatched here, the naming refuses it), the check must catch the difference.
    model_dir = tmp_path / "prefix-space"
    shutil.copytree(tiny_pair_paths.target, model_dir)
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    spec["pre_tokenizer"]["add_prefix_space"] = True
    (model_dir / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(DraftConversionError, match="unsupported pre-tokenizer"):
        make_draft(model_dir, "f32", tmp_path / "refused.gguf", threads=1)
    monkeypatch.setattr(hf_vocab, "_pre_tokenizer_name", lambda spec: "gpt-2")
    with pytest.raises(DraftConversionError, match="splits .* differently from the HF tokenizer"):
        make_draft(model_dir, "f32", tmp_path / "wrong.gguf", threads=1)
    assert not (tmp_path / "wrong.gguf").exists() and not list(tmp_path.glob(".make-draft-*"))
