"""make-draft end to end on real files: the tiny HF pair -> GGUF (f32, f16) -> q8_0 / q4_0, GGUF ->
re-quantized GGUF, and the default target's own Q4_1 GGUF. Every file is loaded by llama.cpp itself."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from contextlib import contextmanager

import gguf
import llama_cpp
import numpy as np
import pytest
import torch

from specdec.bundled import bundled_model_path
from specdec.make_draft import hf_gguf, make_draft
from specdec.make_draft.hf_vocab import SAMPLE_TEXTS

TYPES = ["f32", "f16", "q8_0", "q4_0"]
WEIGHT_TYPE = {
    "f32": gguf.GGMLQuantizationType.F32,
    "f16": gguf.GGMLQuantizationType.F16,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
}
PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time there was a little house"


@pytest.fixture(scope="module")
def tiny_ggufs(tiny_pair_paths, tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-ggufs")
    return {quant: make_draft(tiny_pair_paths.target, quant, out / f"target-{quant}.gguf", threads=1) for quant in TYPES}


@pytest.fixture(scope="module")
def hf_logits(tiny_target):
    ids = tiny_target.tokenizer.encode(PROMPT)
    with torch.no_grad():
        return ids, tiny_target.model(torch.tensor([ids])).logits[0].numpy()


def _llama_logits(path, ids) -> np.ndarray:  # [len(ids), vocab]
    # float32 KV cache: llama.cpp's default float16 cache alone moves logits by ~1e-3.
    llama = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=128,
        logits_all=True,
        n_threads=1,
        verbose=False,
        type_k=llama_cpp.GGML_TYPE_F32,
        type_v=llama_cpp.GGML_TYPE_F32,
    )
    try:
        llama.eval(ids)
        return np.array(llama.scores[: len(ids)])
    finally:
        llama.close()


def _weight_types(path) -> set:
    """The types of the attention and MLP matrices (llama.cpp keeps norms in f32 and may pick others for embeddings)."""
    return {t.tensor_type for t in gguf.GGUFReader(path).tensors if t.name.startswith("blk.") and "_norm" not in t.name}


def test_the_f32_gguf_computes_the_hf_models_logits(tiny_ggufs, hf_logits):
    ids, expected = hf_logits
    assert np.abs(_llama_logits(tiny_ggufs["f32"].path, ids) - expected).max() < 1e-4  # measured 5e-6 at logits up to 16


def test_without_the_rope_row_interleave_the_logits_differ(tiny_pair_paths, tmp_path, monkeypatch, hf_logits):
    # The negative control of the test above: llama.cpp's rope pairs adjacent rows, HF's the two halves.
    monkeypatch.setattr(hf_gguf, "_interleave_rope_halves", lambda weights, heads: weights)
    ids, expected = hf_logits
    wrong = make_draft(tiny_pair_paths.target, "f32", tmp_path / "wrong.gguf", threads=1)
    assert np.abs(_llama_logits(wrong.path, ids) - expected).max() > 0.1


def test_quantized_logits_stay_near_and_coarser_types_drift_further(tiny_ggufs, hf_logits):
    ids, expected = hf_logits
    error = {quant: np.abs(_llama_logits(tiny_ggufs[quant].path, ids) - expected).mean() for quant in TYPES}
    assert error["f32"] < error["f16"] < error["q8_0"] < error["q4_0"] < 0.25 * np.abs(expected).mean()


@pytest.mark.parametrize("quant", TYPES)
def test_each_type_is_written_as_that_type_readable_by_all(tiny_ggufs, quant):
    made = tiny_ggufs[quant]
    assert _weight_types(made.path) == {WEIGHT_TYPE[quant]}
    assert stat.S_IMODE(made.path.stat().st_mode) == 0o644
    assert made.size_bytes == made.path.stat().st_size and not list(made.path.parent.glob(".make-draft-*"))


def test_smaller_types_make_smaller_files(tiny_ggufs):
    sizes = [tiny_ggufs[quant].size_bytes for quant in TYPES]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 4 * sizes[-1]


@pytest.mark.parametrize("quant", TYPES)
def test_llama_cpp_reads_the_hf_vocabulary_and_splits_text_into_its_ids(tiny_ggufs, tiny_target, quant):
    tokenizer = tiny_target.tokenizer
    by_id = {token_id: token for token, token_id in tokenizer.get_vocab().items()}
    with _vocabulary(tiny_ggufs[quant].path) as llama:
        assert _token_texts(llama) == [by_id[i] for i in range(len(tokenizer))]
        assert llama.token_eos() == tokenizer.eos_token_id
        for text in SAMPLE_TEXTS:
            assert llama.tokenize(text.encode(), add_bos=False, special=True) == tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("start", ["f16", "q8_0"])  # q8_0 -> q4_0 needs llama.cpp's allow_requantize
def test_a_gguf_is_requantized(tiny_ggufs, tmp_path, hf_logits, start):
    made = make_draft(tiny_ggufs[start].path, "q4_0", tmp_path / "again.gguf", threads=1)
    assert _weight_types(made.path) == {gguf.GGMLQuantizationType.Q4_0}
    ids, expected = hf_logits
    assert np.abs(_llama_logits(made.path, ids) - expected).mean() < 0.25 * np.abs(expected).mean()


def test_the_default_targets_q4_1_gguf_becomes_a_q4_0_draft_with_its_vocabulary(tmp_path):
    source = bundled_model_path("smollm2-135m-instruct")
    made = make_draft(source, "q4_0", tmp_path / "smollm2-q4_0.gguf")
    assert gguf.GGMLQuantizationType.Q4_0 in _weight_types(made.path)
    with _vocabulary(source) as original, _vocabulary(made.path) as draft:
        assert _token_texts(draft) == _token_texts(original) and original.n_vocab() == 49152


@contextmanager
def _vocabulary(path) -> Iterator[llama_cpp.Llama]:
    llama = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        yield llama
    finally:
        llama.close()


def _token_texts(llama: llama_cpp.Llama) -> list[str]:
    return [llama._model.token_get_text(token_id) for token_id in range(llama.n_vocab())]


def test_an_iq4_nl_draft_is_written_as_iq4_nl_and_stays_near(tiny_pair_paths, tmp_path, hf_logits):
    """IQ4_NL: 4.5 bits as q4_0, on a non-linear grid, with repacked kernels on AVX2 CPUs (a faster draft step)."""
    made = make_draft(tiny_pair_paths.target, "iq4_nl", tmp_path / "target-iq4_nl.gguf", threads=1)
    assert _weight_types(made.path) == {gguf.GGMLQuantizationType.IQ4_NL}
    ids, expected = hf_logits
    assert np.abs(_llama_logits(made.path, ids) - expected).mean() < 0.25 * np.abs(expected).mean()
