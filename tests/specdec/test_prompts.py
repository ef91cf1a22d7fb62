"""specdec.prompts.max_prompt_chars: a prompt longer than it cannot fit, so it is refused untokenized."""

from __future__ import annotations

import random

import pytest
from transformers import AutoTokenizer

from specdec.prompts import max_prompt_chars

SMOLLM2_TOKENIZER = "specdec/assets/smollm2-135m-instruct-draft"  # byte-level BPE, 49,152 entries, the longest 81 characters


def _texts(rng: random.Random) -> list[str]:
    """Texts that make long tokens and short ones: whitespace runs, repeats, code, CJK, emoji, special tokens."""
    alphabet = "abc xyz\n\t    ####----====日本語émoji🙂<|im_start|>"
    texts = [" " * 300, "\n" + " " * 80, "#" * 500, "-" * 257, "<|im_start|>" * 20, "日本語" * 50, "🙂" * 40, "hello " * 200]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 400))) for _ in range(200)]
    return texts


@pytest.mark.parametrize("source", ["tiny", "smollm2"])
def test_no_token_covers_more_characters_than_the_longest_vocabulary_entry(source, tiny_pair_paths):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_pair_paths.target) if source == "tiny" else SMOLLM2_TOKENIZER)
    longest = max_prompt_chars(tokenizer, 1)
    for text in _texts(random.Random(0)):
        tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        # the bound max_prompt_chars relies on: len(text) <= longest * tokens, so more characters than
        # context * longest means more tokens than the context
        assert len(text) <= longest * tokens, (text[:40], tokens, longest)


def test_the_bound_scales_with_the_context(tiny_pair_paths):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_pair_paths.target))
    assert max_prompt_chars(tokenizer, 512) == 512 * max_prompt_chars(tokenizer, 1) == 512 * max(map(len, tokenizer.get_vocab()))
