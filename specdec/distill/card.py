"""The model card written next to a distilled draft."""

from __future__ import annotations

from pathlib import Path

CARD = """---
library_name: transformers
tags: [speculative-decoding, draft-model, distillation, specdec]
---
# Distilled draft for `{target}`

A {layers}-layer draft model for speculative decoding with specdec, trained by `specdec distill`
(logit distillation against the target). It scores a reduced vocabulary of the target's
{draft_vocab_size} most probable tokens (q = 0 elsewhere, which keeps speculative decoding exactly
lossless) and otherwise behaves as a causal LM over the target's full vocabulary.

## Data
The target's own answers ({train_sequences} training answers, {train_answer_tokens} answer tokens,
{heldout_sequences} held out) to specdec's distillation prompt set (`specdec/distill/prompts.py`:
templated writing, role-play, explanation, reasoning, math, coding, factual questions, translation
and passage tasks; never the Spec-Bench questions, which are the benchmark's test set). Batches
alternate greedy answers and answers sampled at temperature {sample_temperature}; at every answer
position the target's top-{top_k} log-probabilities (temperature 1) are the soft targets.

## Training
{steps} steps of batch {batch_size} ({epochs} epochs), AdamW at {learning_rate} with warm-up and
cosine decay; initialised from the target's first {layers} layers, final norm and the embedding
rows of the draft vocabulary.

## Measured
- Share of the target's probability mass inside the draft vocabulary (held out): {teacher_mass_covered_heldout}
- Greedy agreement with the target per position (held out, teacher-forced): {heldout_top1_agreement}
- Final training loss: {final_loss}
{extra}
## Use
`specdec up --target {target} --draft <this directory>`; see docs/benchmarks.md for speedups.
"""


def write_model_card(out: Path, summary: dict, extra: str = "") -> None:
    fields = {**summary, **summary["data_options"], **summary["train_options"], "extra": extra}
    (out / "README.md").write_text(CARD.format(**fields))
