"""Teacher data: the target's own answers to the distillation prompts, with its top-k log-probs.

Written as one shard per batch of prompts (atomic rename), so an interrupted run resumes at the
first missing shard and a finished one is never redone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from specdec.distill.prompts import distill_prompts


@dataclass
class TeacherDataOptions:
    num_prompts: int = 1200
    batch_size: int = 24
    max_new_tokens: int = 160
    top_k: int = 16  # teacher log-probs kept per position: the soft targets of the loss
    # Alternate greedy and sampled batches: greedy is what benchmarks run, sampling widens the contexts seen.
    sample_temperature: float = 0.7
    seed: int = 0


@dataclass
class TeacherSequence:
    """One answer: prompt ids, answer ids (ending in EOS when the teacher stopped), and soft targets."""

    prompt_ids: torch.Tensor  # [prompt_len] long
    answer_ids: torch.Tensor  # [answer_len] long
    top_ids: torch.Tensor  # [answer_len, top_k] long: the teacher's top-k at each answer position
    top_logprobs: torch.Tensor  # [answer_len, top_k] float: their log-probabilities (temperature 1)


def shard_path(directory: Path, index: int) -> Path:
    return directory / f"shard-{index:05d}.pt"


def generate_teacher_data(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: Path, options: TeacherDataOptions
) -> list[Path]:
    """Write every missing shard under `directory` and return all shard paths in order."""
    directory.mkdir(parents=True, exist_ok=True)
    prompts = [text for _kind, text in distill_prompts(options.num_prompts, options.seed)]
    batches = [prompts[i : i + options.batch_size] for i in range(0, len(prompts), options.batch_size)]
    paths = [shard_path(directory, index) for index in range(len(batches))]
    missing = [index for index, path in enumerate(paths) if not path.is_file()]
    for index in tqdm(missing, desc="teacher answers", unit="batch", initial=len(paths) - len(missing), total=len(paths), disable=None):
        temperature = options.sample_temperature if index % 2 else 0.0
        torch.manual_seed(options.seed * 100_003 + index)
        sequences = _answer_batch(model, tokenizer, batches[index], temperature, options)
        _save_atomically([vars(sequence) for sequence in sequences], paths[index])
    return paths


def load_shards(paths: list[Path]) -> list[TeacherSequence]:
    return [TeacherSequence(**record) for path in paths for record in torch.load(path)]


@torch.no_grad()
def _answer_batch(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[str], temperature: float, options: TeacherDataOptions
) -> list[TeacherSequence]:
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False) for p in prompts]
    tokenizer.padding_side = "left"
    encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else {"do_sample": False}
    output = model.generate(
        **encoded,
        max_new_tokens=options.max_new_tokens,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
        **sampling,
    )
    generated = output.sequences[:, encoded["input_ids"].shape[1] :]  # [batch, steps]
    logprobs = torch.stack(output.logits, dim=1).float().log_softmax(-1)  # [batch, steps, vocab]: raw, temperature 1
    top_logprobs, top_ids = logprobs.topk(options.top_k, dim=-1)
    eos_ids = set(_eos_ids(model, tokenizer))
    sequences = []
    for row in range(len(prompts)):
        length = _answer_length(generated[row].tolist(), eos_ids)
        prompt_ids = encoded["input_ids"][row][encoded["attention_mask"][row].bool()]
        sequences.append(
            TeacherSequence(
                prompt_ids.cpu(), generated[row, :length].cpu(), top_ids[row, :length].cpu(), top_logprobs[row, :length].half().cpu()
            )
        )
    return sequences


def _answer_length(token_ids: list[int], eos_ids: set[int]) -> int:
    """Tokens up to and including the first EOS (padding follows it in a batch)."""
    return next((i + 1 for i, token in enumerate(token_ids) if token in eos_ids), len(token_ids))


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    configured = model.generation_config.eos_token_id
    ids = configured if isinstance(configured, list) else [configured]
    return [i for i in [*ids, tokenizer.eos_token_id] if i is not None]


def _save_atomically(records: list[dict], path: Path) -> None:
    partial = path.with_suffix(".partial")
    torch.save(records, partial)
    partial.replace(path)
