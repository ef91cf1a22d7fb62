"""`specdec distill --target T --out DIR`: teacher data, a reduced-vocabulary student, training, export.

Everything lands under DIR, which ends up a loadable draft model directory:
  DIR/data/shard-*.pt           the target's answers with its top-k log-probs (resumable)
  DIR/checkpoints/latest.pt     training state (resumable)
  DIR/config.json, model.safetensors, tokenizer files, README.md (the model card)
Run the same command again to resume after an interruption.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from specdec.distill.card import write_model_card
from specdec.distill.data import TeacherDataOptions, generate_teacher_data, load_shards
from specdec.distill.student import build_student, choose_vocabulary, coverage
from specdec.distill.train import TrainOptions, train_student
from specdec.engines.hf import LoadedModel, load_model
from specdec.errors import SpecdecError

log = logging.getLogger(__name__)


@dataclass
class DistillOptions:
    target: str
    out: Path
    num_layers: int = 2
    draft_vocab_size: int = 6144
    heldout_shards: int = 1
    device: str = "auto"
    data: TeacherDataOptions = field(default_factory=TeacherDataOptions)
    train: TrainOptions = field(default_factory=TrainOptions)


def run_distill(options: DistillOptions) -> dict:
    started = time.monotonic()
    target = load_model(options.target, device=options.device, dtype="float32")
    shards = generate_teacher_data(target.model, target.tokenizer, options.out / "data", options.data)
    if len(shards) <= options.heldout_shards:
        raise SpecdecError(f"need more than {options.heldout_shards} data shard(s): raise --prompts")
    train = load_shards(shards[: -options.heldout_shards])
    heldout = load_shards(shards[-options.heldout_shards :])
    vocabulary = choose_vocabulary(train, options.draft_vocab_size, sorted(target.eos_token_ids | _special_ids(target)), target.vocab_size)
    student = build_student(target.model, vocabulary, options.num_layers).to(target.device)
    result = train_student(student, train, heldout, options.out / "checkpoints" / "latest.pt", options.train)
    summary = {
        "target": options.target,
        "layers": options.num_layers,
        "draft_vocab_size": options.draft_vocab_size,
        "teacher_mass_covered_heldout": round(coverage(heldout, vocabulary, target.vocab_size), 4),
        "train_sequences": len(train),
        "train_answer_tokens": sum(len(s.answer_ids) for s in train),
        "heldout_sequences": len(heldout),
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(result).items()},
        "wall_minutes_this_run": round((time.monotonic() - started) / 60, 1),
        "data_options": asdict(options.data),
        "train_options": asdict(options.train),
    }
    _export(student, target, options.out, summary)
    return summary


def _minify_json(path: Path) -> None:
    if path.is_file():
        path.write_text(
            json.dumps(json.loads(path.read_text(encoding="utf-8")), separators=(",", ":"), ensure_ascii=False), encoding="utf-8"
        )


def _special_ids(target: LoadedModel) -> set[int]:
    return set(target.tokenizer.all_special_ids)


def _export(student, target: LoadedModel, out: Path, summary: dict) -> None:
    """Weights in bfloat16 (half the bytes; loaded back at the serving dtype), tokenizer, card."""
    student.to(torch.bfloat16).save_pretrained(out)
    target.tokenizer.save_pretrained(out)
    _minify_json(out / "tokenizer.json")  # pretty-printed it is twice the size: the draft ships in the repository
    (out / "distill_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_model_card(out, summary)
    log.info("wrote the draft to %s", out)
