"""Build a tiny, correlated (target, draft) Llama pair for offline tests.

The pair is written as two ordinary Hugging Face directories so that code
under test can load them exactly like real checkpoints, with no hub access.
The draft is literally a truncation of the target, so speculative decoding
gets a realistic, well-above-zero acceptance rate.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

EOS = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [EOS, IM_START, IM_END]
VOCAB_SIZE = 512

TARGET_LAYERS = 4
DRAFT_LAYERS = 2
# Damping the target's upper layers keeps its predictions close to the
# draft's (which lacks them) without making the two models identical.
UPPER_LAYER_SCALE = 0.1
# Default init (std 0.02) gives near-uniform logits over the vocab; a wide
# lm_head makes the distribution peaked, like a trained model's.
LM_HEAD_STD = 0.5

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Embedded so tokenizer training needs no files or network, and so the
# merges (and hence token ids) are identical on every run.
CORPUS = """\
The quick brown fox jumps over the lazy dog. A small model can still learn
the shape of language: common words, spaces, and punctuation appear again and
again, so a byte pair encoder merges them into single tokens.

Speculative decoding lets a small draft model propose several tokens, which a
larger target model then checks in one forward pass. When the draft agrees
with the target, many tokens are accepted at once and generation is faster.
When it disagrees, the target's own token is used and nothing is lost.

Once upon a time there was a little house by the river. Every morning the
people who lived there walked to the market, bought bread and fruit, and came
home to cook. In the evening they sat outside and talked about the weather,
their work, and the stories they had heard from their friends.

Hello! How are you today? I am fine, thank you. What would you like to do?
Let us write some code, read a book, or go for a walk in the park. The sun is
shining and the sky is blue, so it is a good day to be outside.
"""


@dataclass(frozen=True)
class TinyPairPaths:
    target: Path
    draft: Path


def _train_tokenizer() -> PreTrainedTokenizerFast:
    # Byte-level pre-tokenization + the full 256-byte initial alphabet means
    # any unicode string encodes (as bytes) and decodes back losslessly.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer=trainer)
    # bos is aliased to eos only so configs have a valid id; no post-processor
    # is installed, so nothing is ever prepended implicitly.
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        bos_token=EOS,
        pad_token=EOS,
        additional_special_tokens=[IM_START, IM_END],
        chat_template=CHAT_TEMPLATE,
    )


def _llama_config(tokenizer: PreTrainedTokenizerFast, num_layers: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


def _generation_config(tokenizer: PreTrainedTokenizerFast) -> GenerationConfig:
    return GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


@torch.no_grad()
def _build_target(tokenizer: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    # fork_rng: seed for reproducibility without clobbering the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(_llama_config(tokenizer, TARGET_LAYERS))
        model.lm_head.weight.normal_(0.0, LM_HEAD_STD)
    # Shrink only what the upper layers *write* into the residual stream, so
    # the hidden state reaching the final norm is dominated by layers 0-1.
    for layer in model.model.layers[DRAFT_LAYERS:]:
        layer.self_attn.o_proj.weight.mul_(UPPER_LAYER_SCALE)
        layer.mlp.down_proj.weight.mul_(UPPER_LAYER_SCALE)
    return model.eval()


def _is_shared_with_draft(name: str) -> bool:
    if name.startswith("model.layers."):
        return int(name.split(".")[2]) < DRAFT_LAYERS
    return True  # embed_tokens, final norm, lm_head


@torch.no_grad()
def _build_draft(target: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    with torch.random.fork_rng(devices=[]):  # its random init is overwritten
        draft = LlamaForCausalLM(_llama_config(tokenizer, DRAFT_LAYERS))
    shared = {k: v for k, v in target.state_dict().items() if _is_shared_with_draft(k)}
    # strict=True proves every draft weight came from the target.
    draft.load_state_dict(shared, strict=True)
    return draft.eval()


def _save(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, path: Path) -> None:
    model.generation_config = _generation_config(tokenizer)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def _make_world_readable(root: Path) -> None:
    """0755 directories, 0644 files: containers read the pair as another uid (safetensors writes 0600)."""
    for directory, _, files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o644)


def make_tiny_pair(out_dir: str | Path, seed: int = 0) -> TinyPairPaths:
    """Write `out_dir/target` and `out_dir/draft` as loadable HF model dirs, readable by every user."""
    out = Path(out_dir)
    created = not out.exists()
    paths = TinyPairPaths(target=out / "target", draft=out / "draft")
    tokenizer = _train_tokenizer()
    target = _build_target(tokenizer, seed)
    draft = _build_draft(target, tokenizer)
    _save(target, tokenizer, paths.target)
    _save(draft, tokenizer, paths.draft)
    for path in (paths.target, paths.draft):
        _make_world_readable(path)
    if created:  # a directory the caller already had keeps its mode
        out.chmod(0o755)
    return paths
