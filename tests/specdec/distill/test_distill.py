"""`specdec distill` end to end on the tiny pair: data, training, export, resume, lossless drafting."""

from __future__ import annotations

import json

import pytest
import torch

from specdec.distill.data import TeacherDataOptions, load_shards
from specdec.distill.run import DistillOptions, run_distill
from specdec.distill.train import TrainOptions, distillation_loss
from specdec.drafters import ModelDrafter
from specdec.engines.hf import check_vocab_compatible, load_model
from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

DRAFT_VOCAB = 96


def _options(tiny_pair_paths, out, epochs=12.0):
    return DistillOptions(
        target=str(tiny_pair_paths.target),
        out=out,
        num_layers=1,
        draft_vocab_size=DRAFT_VOCAB,
        device="cpu",
        data=TeacherDataOptions(num_prompts=12, batch_size=4, max_new_tokens=24, top_k=8),
        train=TrainOptions(epochs=epochs, batch_size=4, learning_rate=1e-2, warmup_steps=2, checkpoint_every=5),
    )


@pytest.fixture(scope="module")
def distilled(tiny_pair_paths, tmp_path_factory):
    out = tmp_path_factory.mktemp("distilled")
    return out, run_distill(_options(tiny_pair_paths, out))


def test_distill_writes_a_loadable_draft_with_a_model_card(distilled, tiny_target):
    out, summary = distilled
    draft = load_model(out, device="cpu", dtype="float32")
    check_vocab_compatible(tiny_target, draft)
    assert draft.vocab_size == tiny_target.vocab_size  # full-width logits towards the system
    assert draft.model.draft_vocab_size == DRAFT_VOCAB
    assert len(list((out / "data").glob("shard-*.pt"))) == 3
    assert summary["train_sequences"] == 8 and summary["heldout_sequences"] == 4
    assert 0.0 < summary["teacher_mass_covered_heldout"] <= 1.0
    card = (out / "README.md").read_text()
    assert str(summary["train_answer_tokens"]) in card and "Spec-Bench" in card
    assert json.loads((out / "distill_summary.json").read_text())["steps"] == summary["steps"]


def test_training_lowers_the_distillation_loss(distilled, tiny_pair_paths, tiny_target):
    out, _ = distilled
    from specdec.distill.student import build_student

    trained = load_model(out, device="cpu", dtype="float32").model
    untrained = build_student(tiny_target.model, trained.draft_to_target.clone(), num_layers=1)
    heldout = load_shards(sorted((out / "data").glob("shard-*.pt"))[-1:])
    with torch.no_grad():
        assert float(distillation_loss(trained, heldout)) < 0.9 * float(distillation_loss(untrained, heldout))


@pytest.mark.parametrize("acceptance,temperature", [("rejection", 0.0), ("coupled", 0.8)])
def test_distilled_draft_is_lossless(distilled, tiny_target, acceptance, temperature):
    out, _ = distilled
    drafter = ModelDrafter(load_model(out, device="cpu", dtype="float32").model)
    prompt_ids = tiny_target.tokenizer("Once upon a time there was a little house")["input_ids"]
    request = {
        "prompt_ids": prompt_ids,
        "max_tokens": 30,
        "ignore_eos": True,
        "sampling": SamplingParams(temperature=temperature),
        "seed": 3,
    }
    reference = SpeculativeGenerator(tiny_target, None).generate(GenerationRequest(**request, speculative=False))
    result = SpeculativeGenerator(tiny_target, drafter).generate(GenerationRequest(**request, acceptance=acceptance, num_draft_tokens=4))
    assert result.token_ids == reference.token_ids
    assert result.stats.accepted_tokens > 0


def test_rerun_resumes_without_redoing_work(distilled, tiny_pair_paths):
    out, summary = distilled
    shard_times = {p: p.stat().st_mtime_ns for p in (out / "data").glob("shard-*.pt")}
    again = run_distill(_options(tiny_pair_paths, out))
    assert {p: p.stat().st_mtime_ns for p in (out / "data").glob("shard-*.pt")} == shard_times
    assert again["steps"] == summary["steps"] and again["final_loss"] != again["final_loss"]  # NaN: no step ran


def test_resume_refuses_a_checkpoint_from_other_options(distilled, tiny_pair_paths):
    from specdec.errors import SpecdecError

    out, _ = distilled
    with pytest.raises(SpecdecError, match="other training options"):
        run_distill(_options(tiny_pair_paths, out, epochs=13.0))


def test_hugging_face_assisted_generation_accepts_the_distilled_draft(distilled, tiny_target):
    out, _ = distilled
    draft = load_model(out, device="cpu", dtype="float32")
    input_ids = torch.tensor([tiny_target.tokenizer("The quick brown fox")["input_ids"]])
    common = {"attention_mask": torch.ones_like(input_ids), "max_new_tokens": 20, "do_sample": False, "min_new_tokens": 20}
    alone = tiny_target.model.generate(input_ids, **common)
    assisted = tiny_target.model.generate(input_ids, assistant_model=draft.model, **common)
    assert assisted.tolist() == alone.tolist()
