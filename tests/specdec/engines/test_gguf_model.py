"""llama.cpp under the gguf drafter: the tiny target's logits, rollback without re-feeding, batched
sequences, clear load errors and a vocabulary check that names both files."""

from __future__ import annotations

import shutil
import threading

import pytest
import torch
from gguf_support import load_draft_gguf

from specdec.assembly import load_draft_side
from specdec.batching import BatchingOptions
from specdec.drafters.gguf import GgufDrafter
from specdec.engines.llama_cpp import GgufSequence
from specdec.errors import IncompatibleVocabularyError, ModelLoadError
from specdec.serving.config import SpecdecConfig

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


@pytest.fixture(scope="module")
def prompt_ids(tiny_target):
    return tiny_target.tokenizer(PROMPT)["input_ids"]


def _sequence(model, options: BatchingOptions | None = None) -> GgufSequence:
    drafter = GgufDrafter(model, options)
    return GgufSequence(model, model.take_seat(64, timeout_s=1), drafter.scheduler)


class _CountingDecode:
    """Wraps GgufModel.decode to record what each pass fed."""

    def __init__(self, model) -> None:
        self.model, self.decode, self.rows = model, model.decode, []

    def __call__(self, rows):
        self.rows.append([(row.seat.seq_id, row.start, list(row.input_ids)) for row in rows])
        return self.decode(rows)


def _hf_logits(tiny_target, ids: list[int]) -> torch.Tensor:  # [len(ids), vocab]
    with torch.inference_mode():
        return tiny_target.model(input_ids=torch.tensor([ids])).logits[0]


def test_the_tiny_target_as_gguf_gives_the_hf_logits(tiny_gguf_target, tiny_target, prompt_ids):
    assert tiny_gguf_target.vocab_size == tiny_target.vocab_size and tiny_gguf_target.max_context == tiny_target.max_context
    sequence = _sequence(tiny_gguf_target)
    try:
        logits = sequence.advance(prompt_ids, num_logits=len(prompt_ids))
    finally:
        sequence.release()
    assert torch.allclose(logits, _hf_logits(tiny_target, prompt_ids), atol=1e-2)


def test_rollback_removes_only_the_rejected_tail(tiny_gguf_target, tiny_target, prompt_ids, monkeypatch):
    counting = _CountingDecode(tiny_gguf_target)
    monkeypatch.setattr(tiny_gguf_target, "decode", counting)
    sequence = _sequence(tiny_gguf_target)  # its scheduler calls the counting decode
    try:
        sequence.advance(prompt_ids)
        sequence.advance([*prompt_ids, 7, 8, 9])  # three candidates drafted
        rolled_back = sequence.advance([*prompt_ids, 7, 11])  # one accepted, then another token
    finally:
        sequence.release()
    ((_, start, fed),) = counting.rows[-1]
    assert (start, fed) == (len(prompt_ids) + 1, [11])  # never the prefix again
    assert torch.allclose(rolled_back[-1], _hf_logits(tiny_target, [*prompt_ids, 7, 11])[-1], atol=1e-2)


def test_sessions_share_passes_and_each_gets_its_own_logits(tiny_gguf_target, tiny_target, prompt_ids):
    batch_sizes = []
    options = BatchingOptions(max_batch_size=4, max_wait_s=0.2, on_batch=lambda rows: batch_sizes.append(len(rows)))
    prompts = [prompt_ids[:n] for n in (5, 9, 13)]
    drafter = GgufDrafter(tiny_gguf_target, options)
    sequences = [GgufSequence(tiny_gguf_target, tiny_gguf_target.take_seat(64, 1), drafter.scheduler) for _ in prompts]
    results: dict[int, torch.Tensor] = {}

    def run(index: int) -> None:
        results[index] = sequences[index].advance(prompts[index])[-1]

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for sequence in sequences:
        sequence.release()
    assert max(batch_sizes) > 1
    for index, prompt in enumerate(prompts):
        assert torch.allclose(results[index], _hf_logits(tiny_target, prompt)[-1], atol=1e-2)


def test_released_sequences_free_their_id_and_cells(tiny_gguf_target):
    free_before = tiny_gguf_target.budget.free_tokens
    seats = [tiny_gguf_target.take_seat(16, timeout_s=1) for _ in range(tiny_gguf_target.max_sequences)]
    with pytest.raises(Exception, match="sequences of .* are in use"):
        tiny_gguf_target.take_seat(16, timeout_s=0.05)
    for seat in seats:
        tiny_gguf_target.release(seat)
    assert tiny_gguf_target.budget.free_tokens == free_before
    tiny_gguf_target.release(tiny_gguf_target.take_seat(16, timeout_s=1))


def test_a_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="GGUF file not found: .*missing.gguf"):
        load_draft_gguf(tmp_path / "missing.gguf")


def test_a_file_that_is_not_gguf_is_refused_before_llama_cpp_sees_it(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_text("{}")
    with pytest.raises(ModelLoadError, match="is not a GGUF file"):
        load_draft_gguf(path)


def test_a_truncated_gguf_names_llama_cpp_s_reason(tiny_ggufs, tmp_path):
    path = tmp_path / "truncated.gguf"
    path.write_bytes(tiny_ggufs.target.read_bytes()[:4096])
    with pytest.raises(ModelLoadError, match=r"llama.cpp could not load .*truncated.gguf: \S") as error:
        load_draft_gguf(path)
    assert "\n" not in str(error.value)


def _gguf_config(draft_path, target_path) -> SpecdecConfig:
    return SpecdecConfig(
        model={
            "draft_method": "gguf",
            "draft_path": str(draft_path),
            "target_path": str(target_path),
            "gguf_threads": 1,
            "gguf_context_tokens": 1024,
        }
    )


def test_the_draft_service_loads_the_gguf_behind_prompt_lookup(tiny_ggufs, tiny_pair_paths):
    side = load_draft_side(_gguf_config(tiny_ggufs.target, tiny_pair_paths.target))
    drafter, model = side.drafter, side.model
    try:
        assert drafter.name == "prompt_lookup+gguf" and model.source == str(tiny_ggufs.target)
    finally:
        model.close()


def test_a_gguf_with_another_vocabulary_is_refused_naming_both_files(tiny_ggufs, tiny_pair_paths, foreign_tokenizer, tmp_path):
    foreign_target = tmp_path / "foreign-target"
    shutil.copytree(tiny_pair_paths.target, foreign_target)
    foreign_tokenizer.save_pretrained(foreign_target)  # the same model, another token -> id map
    with pytest.raises(IncompatibleVocabularyError) as error:
        load_draft_side(_gguf_config(tiny_ggufs.target, foreign_target))
    assert str(tiny_ggufs.target) in str(error.value) and str(foreign_target) in str(error.value)


def test_a_sequence_released_after_its_model_closed_touches_nothing_freed(tiny_ggufs, prompt_ids):
    # A session closed after the model (a test's teardown, an overlap thread finishing late) was a use
    # after free in llama.cpp: a segfault, now and then, at the end of a run.
    from specdec.errors import DraftUnavailableError

    model = load_draft_gguf(tiny_ggufs.target)
    sequence = _sequence(model)
    sequence.advance(prompt_ids, 1)
    seat = model.take_seat(16, timeout_s=1)
    model.close()
    model.release(seat)  # nothing to free: the context went with the model
    sequence.release()
    with pytest.raises(DraftUnavailableError, match="is closed"):
        _sequence(model).advance(prompt_ids, 1)
