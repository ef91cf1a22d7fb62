"""CUDA correctness and hot-path timings for the core engine (run on a GPU host).

    python benchmarks/core_cuda_check.py [--out results.json]

Checks on CUDA in float32 that speculative decoding is token-identical to target-only
decoding (greedy and coupled), that keyed noise is bit-identical on CPU and CUDA, then times
the hot paths in bfloat16 on a ~1B-parameter random Llama with a layer-skip draft, including the
packed (batched) pass against Hugging Face's forward and its time for 1, 8 and 32 sessions.
Random weights: acceptance rates here say nothing about real model pairs.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch
from tokenizers import Tokenizer, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specdec.acceptance import rejection_accept
from specdec.batching import BatchedRunner
from specdec.batching.packed_forward import PackedRow, model_parts, packed_forward
from specdec.cli.tiny_pair import make_tiny_pair
from specdec.drafters import ModelDrafter, NgramDrafter, layer_skip_drafter
from specdec.engines.hf import LoadedModel, load_model
from specdec.generation import SpeculativeGenerator
from specdec.kv_cache import CachedSequence
from specdec.noise import keyed_gumbel
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams, processed_probs, sparse_top_k

CUDA = torch.device("cuda:0")


def _timed(function, repeats: int = 20) -> float:
    """Median milliseconds of `function()` on the GPU."""
    for _ in range(3):
        function()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1000)
    return sorted(samples)[len(samples) // 2]


def check_tiny_pair_on_cuda() -> dict:
    paths = make_tiny_pair(tempfile.mkdtemp())
    target = load_model(paths.target, device="cuda:0", dtype="float32")
    draft = load_model(paths.draft, device="cuda:0", dtype="float32")
    prompt = target.tokenizer("The quick brown fox jumps over the lazy dog. The quick brown fox")["input_ids"]
    drafters = {"model": ModelDrafter(draft.model), "layer_skip": layer_skip_drafter(target.model, 2), "ngram": NgramDrafter()}
    results = {}
    for label, sampling, acceptance, seeds in (
        ("greedy", SamplingParams(temperature=0), "greedy", [0]),
        ("coupled_t0.7", SamplingParams(temperature=0.7), "coupled", [0, 1, 2]),
        ("coupled_t1.0", SamplingParams(temperature=1.0), "coupled", [0, 1, 2]),
    ):
        identical = total = 0
        for seed in seeds:
            base = GenerationRequest(prompt_ids=prompt, max_tokens=48, sampling=sampling, seed=seed, acceptance=acceptance, ignore_eos=True)
            reference = SpeculativeGenerator(target).generate(base.model_copy(update={"speculative": False})).token_ids
            for drafter in drafters.values():
                for k in (1, 3, 5, 8):
                    output = SpeculativeGenerator(target, drafter).generate(base.model_copy(update={"num_draft_tokens": k})).token_ids
                    identical += output == reference
                    total += 1
        results[label] = f"{identical}/{total} identical"
    positions = torch.arange(1000, 1009)
    results["keyed_noise_cpu_equals_cuda"] = bool(
        torch.equal(keyed_gumbel(123, positions, 50000), keyed_gumbel(123, positions.to(CUDA), 50000).cpu())
    )
    return results


def _numbered_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    vocab = {f"t{i} ": i for i in range(vocab_size)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0 ")), eos_token="t0 ")


def build_synthetic_target(vocab_size: int = 32000) -> LoadedModel:
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    with torch.device(CUDA):
        model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 0.5)
        for layer in model.model.layers[4:]:  # damped upper layers: the 4-layer draft agrees often
            layer.self_attn.o_proj.weight.mul_(0.05)
            layer.mlp.down_proj.weight.mul_(0.05)
    model.to(torch.bfloat16).eval()
    return LoadedModel(model=model, tokenizer=_numbered_tokenizer(vocab_size), source="synthetic-1b")


def time_hot_paths(target: LoadedModel) -> dict:
    vocab, k = 128256, 8
    logits = torch.randn(k + 1, vocab, device=CUDA)
    sampling = SamplingParams(temperature=0.8, top_p=0.95)
    target_probs = processed_probs(logits, sampling)
    draft_sparse = sparse_top_k(processed_probs(torch.randn(k, vocab, device=CUDA), sampling), 32)
    candidates = draft_sparse.token_ids[:, 0].cpu()
    generator = torch.Generator().manual_seed(0)
    lm = CachedSequence(target.model)
    prompt = list(range(1, 513))
    lm.advance(prompt)

    def verify_forward(num_tokens: int):
        sequence = prompt + list(range(100, 100 + num_tokens))
        return lambda: (lm.advance(sequence, num_tokens), lm.truncate(len(prompt)))

    return {
        "keyed_gumbel_9x128k_ms": _timed(lambda: keyed_gumbel(7, torch.arange(500, 509, device=CUDA), vocab)),
        "processed_probs_top_p_9x128k_ms": _timed(lambda: processed_probs(logits, sampling)),
        "rejection_accept_k8_128k_ms": _timed(lambda: rejection_accept(candidates, draft_sparse, target_probs, generator)),
        "target_forward_1_token_ctx512_ms": _timed(verify_forward(1)),
        "target_forward_9_tokens_ctx512_ms": _timed(verify_forward(9)),
    }


def check_packed_batching(target: LoadedModel) -> dict:
    """The packed pass against Hugging Face's forward on CUDA, and what batching sessions buys."""
    parts = model_parts(target.model)
    runner = BatchedRunner(parts)
    prompt = list(range(1, 513))
    reference = CachedSequence(target.model).advance(prompt + [7, 8], 3).float()
    packed = runner.open_sequence(600).advance(prompt + [7, 8], 3).float()
    caches = [runner.open_sequence(600) for _ in range(32)]
    for cache in caches:
        cache.advance(prompt)

    def batched_pass(num_rows: int):
        rows = [PackedRow(cache.kv, [5, 6], len(prompt), 2) for cache in caches[:num_rows]]
        return lambda: packed_forward(parts, rows)

    timings = {f"packed_{rows}x2_tokens_ctx512_ms": _timed(batched_pass(rows)) for rows in (1, 8, 32)}
    return {
        "max_abs_logit_diff_vs_hf": float((packed - reference).abs().max()),
        "argmax_equal": bool(torch.equal(packed.argmax(-1), reference.argmax(-1))),
        **timings,
    }


def time_end_to_end(target: LoadedModel) -> dict:
    drafter = layer_skip_drafter(target.model, 4)
    prompt = list(range(1, 129))
    results = {}
    for label, sampling, acceptance, speculative in (
        ("target_only", SamplingParams(temperature=0), "greedy", False),
        ("layer_skip_greedy_k5", SamplingParams(temperature=0), "greedy", True),
        ("layer_skip_rejection_t0.8_k5", SamplingParams(temperature=0.8), "rejection", True),
        ("layer_skip_coupled_t0.8_k5", SamplingParams(temperature=0.8), "coupled", True),
    ):
        request = GenerationRequest(
            prompt_ids=prompt, max_tokens=128, sampling=sampling, acceptance=acceptance, speculative=speculative, seed=1, ignore_eos=True
        )
        generator = SpeculativeGenerator(target, drafter)
        generator.generate(request.model_copy(update={"max_tokens": 8}))  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = generator.generate(request)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        results[label] = {
            "tokens_per_s": round(len(result.token_ids) / elapsed, 1),
            "acceptance_rate": round(result.stats.acceptance_rate, 3),
        }
    base = results["target_only"]["tokens_per_s"]
    for value in results.values():
        value["speedup"] = round(value["tokens_per_s"] / base, 2)
    return results


def bf16_coupled_agreement(target: LoadedModel) -> str:
    """How often bf16 speculative output equals bf16 target-only (near-ties may differ: see README, "What lossless means")."""
    drafter = layer_skip_drafter(target.model, 4)
    identical = 0
    for seed in range(5):
        request = GenerationRequest(
            prompt_ids=list(range(1, 65)),
            max_tokens=64,
            sampling=SamplingParams(temperature=0.8),
            acceptance="coupled",
            seed=seed,
            ignore_eos=True,
        )
        reference = SpeculativeGenerator(target).generate(request.model_copy(update={"speculative": False})).token_ids
        identical += SpeculativeGenerator(target, drafter).generate(request).token_ids == reference
    return f"{identical}/5 identical"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    args = parser.parse_args()
    report = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    report["correctness_float32"] = check_tiny_pair_on_cuda()
    print(json.dumps(report, indent=1), flush=True)
    target = build_synthetic_target()
    report["hot_paths_bf16"] = time_hot_paths(target)
    print(json.dumps(report["hot_paths_bf16"], indent=1), flush=True)
    report["packed_batching_bf16"] = check_packed_batching(target)
    print(json.dumps(report["packed_batching_bf16"], indent=1), flush=True)
    report["end_to_end_bf16_1b_random"] = time_end_to_end(target)
    report["bf16_coupled_agreement"] = bf16_coupled_agreement(target)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as file:
            file.write(text + "\n")


if __name__ == "__main__":
    main()
