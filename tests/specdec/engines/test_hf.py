"""load_model, resolve_device/dtype, check_vocab_compatible and int8 drafts."""

import pytest
import torch
from torch import nn

from specdec.engines.hf import LoadedModel, check_vocab_compatible, load_model, resolve_device, resolve_dtype
from specdec.errors import IncompatibleVocabularyError, ModelLoadError
from specdec.quantization import Int8WeightOnlyLinear

SENTENCE = "Once upon a time the people who lived by the river walked to the market and talked about the weather."


def test_loads_tiny_hf_directory(tiny_target):
    tokenizer = tiny_target.tokenizer
    assert tiny_target.device == torch.device("cpu")
    assert next(tiny_target.model.parameters()).dtype == torch.float32
    assert tiny_target.vocab_size == len(tokenizer) == 512
    assert tiny_target.eos_token_ids == frozenset({tokenizer.convert_tokens_to_ids("<|endoftext|>")})
    assert tiny_target.max_context == 512
    assert not tiny_target.model.training


@pytest.mark.parametrize("kind", ["missing_path", "dir_without_config", "missing_gguf", "hub_id"])
def test_unloadable_source_raises_model_load_error_naming_it(tmp_path, kind):
    source = {
        "missing_path": str(tmp_path / "no-such-model"),
        "dir_without_config": str(tmp_path),
        "missing_gguf": str(tmp_path / "model.Q4_0.gguf"),
        "hub_id": "nonexistent-org-xyz/model",  # conftest sets HF_HUB_OFFLINE=1
    }[kind]
    with pytest.raises(ModelLoadError) as caught:
        load_model(source, device="cpu")
    assert source in str(caught.value)


def test_cuda_device_needs_cuda():
    if torch.cuda.is_available():
        assert resolve_device("cuda:0") == torch.device("cuda:0")
    else:
        with pytest.raises(ModelLoadError, match="cuda:0"):
            resolve_device("cuda:0")


def test_auto_device_and_dtype():
    device = resolve_device("auto")
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16


def test_bad_dtype_raises(tiny_pair_paths):
    with pytest.raises(ModelLoadError, match="float8"):
        load_model(tiny_pair_paths.draft, device="cpu", dtype="float8")


def test_tiny_pair_vocabularies_are_compatible(tiny_target, tiny_draft):
    check_vocab_compatible(tiny_target, tiny_draft)


def test_draft_with_differently_mapped_tokenizer_is_refused(tiny_target, tiny_draft, foreign_tokenizer):
    tokenizer = foreign_tokenizer
    assert tokenizer.get_vocab() != tiny_target.tokenizer.get_vocab()
    draft = LoadedModel(model=tiny_draft.model, tokenizer=tokenizer, source="x")
    with pytest.raises(IncompatibleVocabularyError, match="incompatible"):
        check_vocab_compatible(tiny_target, draft)


@pytest.fixture(scope="module")
def int8_draft(tiny_pair_paths):
    return load_model(tiny_pair_paths.draft, device="cpu", dtype="float32", quantize="int8")


def test_int8_replaces_every_linear(int8_draft, tiny_draft):
    num_linear = sum(isinstance(module, nn.Linear) for module in tiny_draft.model.modules())
    quantized = [module for module in int8_draft.model.modules() if isinstance(module, Int8WeightOnlyLinear)]
    assert num_linear > 0
    assert not any(isinstance(module, nn.Linear) for module in int8_draft.model.modules())
    assert len(quantized) == num_linear
    for module in quantized:
        buffers = dict(module.named_buffers())
        assert buffers["weight_int8"].dtype == torch.int8
        assert "weight" not in dict(module.named_parameters())


@torch.no_grad()
def test_int8_logits_stay_close(int8_draft, tiny_draft):
    ids = tiny_draft.tokenizer(SENTENCE, return_tensors="pt")["input_ids"]
    reference = tiny_draft.model(ids).logits[0]
    quantized = int8_draft.model(ids).logits[0]
    assert (quantized - reference).abs().max() < 0.05 * reference.abs().max()
    assert (quantized.argmax(-1) == reference.argmax(-1)).float().mean() > 0.9


def test_unsupported_quantization_raises(tiny_pair_paths):
    with pytest.raises(ModelLoadError, match="int4"):
        load_model(tiny_pair_paths.draft, device="cpu", quantize="int4")
