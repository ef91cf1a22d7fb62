"""Logit distillation: the student learns the teacher's next-token distribution on the teacher's answers.

Loss at each answer position: cross-entropy of the student's draft-vocabulary distribution
against the teacher's top-k probabilities (temperature 1), i.e. KL(teacher || student) up to a
constant. Checkpoints (model, optimizer, step, data order) let an interrupted run resume exactly.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from specdec.distill.data import TeacherSequence
from specdec.engines.reduced_vocab import ReducedVocabLlamaForCausalLM
from specdec.errors import SpecdecError

log = logging.getLogger(__name__)


@dataclass
class TrainOptions:
    epochs: float = 3.0
    batch_size: int = 8
    learning_rate: float = 1e-3
    warmup_steps: int = 30
    checkpoint_every: int = 100
    seed: int = 0


@dataclass
class TrainResult:
    steps: int
    final_loss: float
    heldout_top1_agreement: float  # student argmax == teacher argmax on held-out answers


def train_student(
    student: ReducedVocabLlamaForCausalLM,
    train: list[TeacherSequence],
    heldout: list[TeacherSequence],
    checkpoint: Path,
    options: TrainOptions,
) -> TrainResult:
    order = _batch_order(len(train), options)
    optimizer = torch.optim.AdamW(student.parameters(), lr=options.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_cosine(options.warmup_steps, len(order)))
    start = _resume(checkpoint, student, optimizer, schedule, options)
    student.train()
    loss = float("nan")
    progress = tqdm(range(start, len(order)), desc="distilling", unit="step", initial=start, total=len(order), disable=None)
    for step in progress:
        loss = _step(student, [train[i] for i in order[step]], optimizer, schedule)
        progress.set_postfix(loss=f"{loss:.3f}", lr=f"{schedule.get_last_lr()[0]:.1e}")
        if (step + 1) % options.checkpoint_every == 0 or step + 1 == len(order):
            _save_checkpoint(checkpoint, student, optimizer, schedule, step + 1, options)
            log.info("step %d: loss %.3f, held-out greedy agreement %.3f", step + 1, loss, top1_agreement(student, heldout))
            student.train()
    student.eval()
    return TrainResult(steps=len(order), final_loss=loss, heldout_top1_agreement=top1_agreement(student, heldout))


def _step(student: ReducedVocabLlamaForCausalLM, batch: list[TeacherSequence], optimizer: torch.optim.Optimizer, schedule) -> float:
    loss = distillation_loss(student, batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    return loss.item()


def distillation_loss(student: ReducedVocabLlamaForCausalLM, batch: list[TeacherSequence]) -> torch.Tensor:
    """Mean over answer positions of -sum_k teacher_prob_k * log student_prob(token_k)."""
    input_ids, attention_mask, answer_positions = _pack(batch, student.device)
    log_probs = student.draft_logits(input_ids, attention_mask=attention_mask).float().log_softmax(-1)  # [batch, seq, draft_vocab]
    losses = []
    for row, sequence in enumerate(batch):
        predicted = log_probs[row, answer_positions[row]]  # [answer_len, draft_vocab]
        draft_ids = student.target_to_draft[sequence.top_ids.to(student.device)]  # [answer_len, top_k]
        # NOTE: teacher tokens outside the draft vocabulary carry no target: the draft gives them q = 0.
        inside = draft_ids < student.draft_vocab_size
        teacher_probs = sequence.top_logprobs.to(student.device).float().exp() * inside
        gathered = predicted.gather(-1, draft_ids.clamp(max=student.draft_vocab_size - 1))
        losses.append(-(teacher_probs * gathered).sum(-1))
    return torch.cat(losses).mean()


@torch.no_grad()
def top1_agreement(student: ReducedVocabLlamaForCausalLM, sequences: list[TeacherSequence]) -> float:
    """How often the student's greedy token equals the teacher's: greedy acceptance, per position."""
    agree = total = 0
    for sequence in sequences:
        input_ids, attention_mask, answer_positions = _pack([sequence], student.device)
        logits = student(input_ids, attention_mask=attention_mask).logits[0, answer_positions[0]]  # [answer_len, target_vocab]
        agree += int((logits.argmax(-1).cpu() == sequence.top_ids[:, 0]).sum())
        total += len(sequence.answer_ids)
    return agree / max(total, 1)


def _pack(batch: list[TeacherSequence], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Right-padded prompt+answer ids, their mask, and per row the positions that predict each answer token."""
    rows = [torch.cat([s.prompt_ids, s.answer_ids]) for s in batch]
    width = max(len(r) for r in rows)
    input_ids = torch.zeros(len(rows), width, dtype=torch.long)
    attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, : len(row)] = row
        attention_mask[i, : len(row)] = 1
    # Position t predicts token t + 1: answer token j (at prompt_len + j) is predicted at prompt_len + j - 1.
    positions = [torch.arange(len(s.answer_ids)) + len(s.prompt_ids) - 1 for s in batch]
    return input_ids.to(device), attention_mask.to(device), positions


def _batch_order(count: int, options: TrainOptions) -> list[list[int]]:
    rng = random.Random(options.seed)
    batches: list[list[int]] = []
    total_batches = math.ceil(options.epochs * count / options.batch_size)
    while len(batches) < total_batches:
        indices = list(range(count))
        rng.shuffle(indices)
        batches += [indices[i : i + options.batch_size] for i in range(0, count, options.batch_size)]
    return batches[:total_batches]


def _warmup_cosine(warmup: int, total: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

    return factor


def _save_checkpoint(path: Path, student, optimizer, schedule, step: int, options: TrainOptions) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save(
        {
            "model": student.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "step": step,
            "options": asdict(options),
        },
        partial,
    )
    partial.replace(path)


def _resume(path: Path, student, optimizer, schedule, options: TrainOptions) -> int:
    if not path.is_file():
        return 0
    state = torch.load(path)
    if state["options"] != asdict(options):
        raise SpecdecError(f"{path} was written with other training options ({state['options']}); delete it or pass the same options")
    student.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    return int(state["step"])
