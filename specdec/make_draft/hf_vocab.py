"""A Hugging Face byte-level BPE tokenizer written into a GGUF, and checked against llama.cpp's reading of it.

As in llama.cpp's convert_hf_to_gguf.py (`_set_vocab_gpt2`): tokenizer model "gpt2", the tokens by
id exactly as the HF tokenizer spells them (so a vocabulary comparison against the target passes),
added tokens typed CONTROL (special) or USER_DEFINED, merges, special ids and the chat template
through gguf's SpecialVocab. The pre-tokenizer is named from the tokenizer.json's structure rather
than from a hash of known models, and `check_tokenization` proves the choice: llama.cpp must split
sample texts into the same ids as the HF tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf

from specdec.errors import DraftConversionError

_GPT2_SPLIT = {"type": "ByteLevel", "use_regex": True, "add_prefix_space": False}
_DIGITS = {"type": "Digits", "individual_digits": True}
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
# Texts whose ids llama.cpp must reproduce: words, digits, punctuation, whitespace runs, non-Latin
# scripts, emoji, code and the chat markers (special tokens, when the tokenizer has them).
SAMPLE_TEXTS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "It's 3.14159 and 2024-12-01, not 1,000,000; I'll say: 'don't' \"quote\" (x) [y] {z}.",
    "  leading spaces\n\ttabs\n\n\nnewlines   and   runs of    spaces  ",
    "naïve café Ünïcödé — Привет мир — 日本語のテキスト — 🙂🚀 ✅",
    "def f(x):\n    return x ** 2  # square\n\nprint(f(12345))",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
]


def add_tokenizer(writer: gguf.GGUFWriter, model_dir: Path, tokenizer, vocab_size: int) -> None:
    """Write `tokenizer` (loaded from `model_dir`) as llama.cpp's "gpt2" (byte-level BPE) vocabulary."""
    spec = _tokenizer_json(model_dir)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_pre_tokenizer_name(spec))
    tokens, token_types = _tokens(tokenizer, vocab_size)
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    special = gguf.SpecialVocab(model_dir, load_merges=True, n_vocab=len(tokens))
    # What the HF tokenizer really does, whatever its config files say.
    special.add_special_token.update(_added_specials(tokenizer))
    special.add_to_gguf(writer, quiet=True)


def _tokenizer_json(model_dir: Path) -> dict:
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise DraftConversionError(
            f"{model_dir} has no tokenizer.json: make-draft converts byte-level BPE tokenizers (fast tokenizer files) only"
        )
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DraftConversionError(f"cannot read {path}: {error}") from error
    model_type = (spec.get("model") or {}).get("type")
    if model_type != "BPE" or spec.get("normalizer") is not None:
        raise DraftConversionError(
            f"unsupported tokenizer in {path}: model {model_type}, normalizer "
            f"{(spec.get('normalizer') or {}).get('type')}; make-draft converts byte-level BPE without a normalizer"
        )
    return spec


def _pre_tokenizer_name(spec: dict) -> str:
    """llama.cpp's name for the pre-tokenizer whose splitting rules this tokenizer.json describes."""
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if len(steps) == 1 and _matches(steps[0], _GPT2_SPLIT):
        return "gpt-2"
    if len(steps) == 2 and _matches(steps[0], _DIGITS) and _matches(steps[1], _GPT2_SPLIT):
        return "smollm"  # digits one by one, then GPT-2's rules
    if (
        len(steps) == 2
        and steps[0].get("type") == "Split"
        and steps[0].get("pattern", {}).get("Regex") == _LLAMA3_REGEX
        and _matches(steps[1], {"type": "ByteLevel", "use_regex": False})
    ):
        return "llama-bpe"
    raise DraftConversionError(f"unsupported pre-tokenizer {json.dumps(pre)[:200]}: make-draft knows GPT-2's, SmolLM's and Llama 3's")


def _matches(step: dict, expected: dict) -> bool:
    defaults = {"use_regex": True, "add_prefix_space": False}  # the tokenizers library's, for keys a file leaves out
    return all(step.get(key, defaults.get(key)) == value for key, value in expected.items())


def _tokens(tokenizer, vocab_size: int) -> tuple[list[str], list[int]]:
    by_id = {token_id: token for token, token_id in tokenizer.get_vocab().items()}
    if max(by_id) >= vocab_size:
        raise DraftConversionError(f"the tokenizer has token id {max(by_id)}, beyond the model's vocab_size {vocab_size}")
    added = tokenizer.added_tokens_decoder
    tokens, token_types = [], []
    for token_id in range(vocab_size):
        if token_id not in by_id:  # rows of the embedding no token uses
            tokens.append(f"[PAD{token_id}]")
            token_types.append(gguf.TokenType.UNUSED)
        elif token_id in added:
            tokens.append(by_id[token_id])
            token_types.append(gguf.TokenType.CONTROL if added[token_id].special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[token_id])
            token_types.append(gguf.TokenType.NORMAL)
    return tokens, token_types


def _added_specials(tokenizer) -> dict[str, bool]:
    plain = tokenizer.encode("a", add_special_tokens=False)
    marked = tokenizer.encode("a", add_special_tokens=True)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    return {
        "bos": bos is not None and len(marked) > len(plain) and marked[0] == bos,
        "eos": eos is not None and len(marked) > len(plain) and marked[-1] == eos,
    }


def check_tokenization(gguf_path: Path, tokenizer) -> None:
    """llama.cpp must turn every sample text into the ids the HF tokenizer gives (special tokens parsed)."""
    from specdec.make_draft.quantize import LlamaLog, captured_llama_log, import_llama_cpp

    with captured_llama_log(LlamaLog()) as log:
        try:
            llama = import_llama_cpp().Llama(model_path=str(gguf_path), vocab_only=True, verbose=False)
        except ValueError as error:  # llama-cpp-python's "Failed to load model from file"
            raise DraftConversionError(f"llama.cpp cannot load {gguf_path}: {log.reason()}") from error
        try:
            for text in SAMPLE_TEXTS:
                expected = tokenizer.encode(text, add_special_tokens=False)
                _check_same_ids(text, llama.tokenize(text.encode(), add_bos=False, special=True), expected)
        finally:
            llama.close()


def _check_same_ids(text: str, got: list[int], expected: list[int]) -> None:
    if got != expected:
        at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        raise DraftConversionError(
            f"llama.cpp splits {text[:40]!r} differently from the HF tokenizer (first difference at "
            f"token {at}: {got[at : at + 3]} vs {expected[at : at + 3]}); the GGUF would not share its vocabulary"
        )
