"""The GPU check of the target engine: greedy on = off, and verify steps of 1-8 tokens, eager against compiled.

    bash benchmarks/device_check.sh            # on a CUDA host; under 8 minutes on an H100/H200
    python benchmarks/device_check.py --shape tiny --device cpu   # the same code paths, in seconds, anywhere

A randomly initialised model the shape of Llama-3-8B in bf16 (a device host has no model hub, so no
real weights), drafted by its own first 4 layers (layer-skip). It reports:
- greedy on = off over 64 tokens on 4 prompts (token-exact, or the first position they differ at:
  bf16 kernels are not batch-invariant on every device, and random weights make near-ties common);
- the median time of a forward over 1, 2, 3, 5 and 8 new tokens after 256 cached ones, eager, and
  compiled (torch.compile, default mode, dynamic shapes: one compile for every K); the first
  compiled call's time is reported apart.
Random weights: acceptance says nothing here; the step costs and the on/off check do.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from specdec.drafters import layer_skip_drafter
from specdec.engines.hf import LoadedModel
from specdec.generation import SpeculativeGenerator
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

SHAPES = {
    "llama-3-8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        max_position_embeddings=8192,
        rope_theta=500000.0,
    ),
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=2048,
    ),
}
NEW_TOKENS = (1, 2, 3, 5, 8)
CONTEXT = 256


class _NoTokenizer:
    """What the generator reads of a tokenizer when prompts are ids and no stop strings are set."""

    eos_token_id = None
    chat_template = None

    def decode(self, ids, **_):
        return " ".join(map(str, ids))

    def convert_ids_to_tokens(self, ids):
        return [str(i) for i in ids]


def _random_model(shape: str, device: torch.device) -> LlamaForCausalLM:
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**SHAPES[shape], torch_dtype="bfloat16")).to(torch.bfloat16)
    return model.eval()


def on_equals_off(target: LoadedModel, prompts: list[list[int]]) -> list[dict]:
    drafter = layer_skip_drafter(target.model, min(4, target.model.config.num_hidden_layers - 1))
    generator = SpeculativeGenerator(target, drafter)
    results = []
    for prompt in prompts:
        runs = {}
        for speculative in (False, True):
            request = GenerationRequest(
                prompt_ids=prompt,
                max_tokens=64,
                ignore_eos=True,
                sampling=SamplingParams(temperature=0),
                speculative=speculative,
                num_draft_tokens=4,
            )
            runs[speculative] = generator.generate(request).token_ids
        differ = next((i for i, (a, b) in enumerate(zip(runs[False], runs[True])) if a != b), None)
        results.append({"identical": runs[False] == runs[True], "first_difference": differ})
    return results


def _median_ms(forward, model, device, new_tokens: int, repeats: int) -> tuple[float, float]:
    """(first call ms, median of the rest) of a forward over `new_tokens` after CONTEXT cached tokens."""
    high = min(1000, model.config.vocab_size)
    ids = torch.randint(10, high, (1, CONTEXT), device=device)
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=ids, cache=cache, use_cache=True)
        times = []
        for repeat in range(repeats + 1):
            extra = torch.randint(10, high, (1, new_tokens), device=device)
            _sync(device)
            started = time.perf_counter()
            forward(input_ids=extra, cache=cache, use_cache=True, logits_to_keep=new_tokens)
            _sync(device)
            times.append((time.perf_counter() - started) * 1000)
            cache.crop(-new_tokens)  # NOTE: transformers >= 5 crops by a negative count of tokens to remove
    return times[0], statistics.median(times[1:])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_costs(model, device, repeats: int) -> dict:
    compiled = torch.compile(model, dynamic=True)
    report = {}
    for name, forward in (("eager", model), ("compiled", compiled)):
        report[name] = {}
        for n in NEW_TOKENS:
            first, median = _median_ms(forward, model, device, n, repeats)
            report[name][n] = {"first_ms": first, "median_ms": median}
            print(f"{name:8s} {n} new tokens: {median:8.2f} ms (first call {first:.0f} ms)", flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3-8b")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    started = time.perf_counter()
    model = _random_model(args.shape, device)
    print(
        f"{args.shape} random bf16 model on {device}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters "
        f"({time.perf_counter() - started:.0f} s)",
        flush=True,
    )
    target = LoadedModel(model=model, tokenizer=_NoTokenizer(), source=f"random {args.shape}")
    prompts = [list(range(10 + 7 * p, 10 + 7 * p + 32)) for p in range(4)]
    report = {"shape": args.shape, "device": str(device), "on_equals_off": on_equals_off(target, prompts)}
    print("greedy on = off:", report["on_equals_off"], flush=True)
    report["step_costs"] = step_costs(model, device, args.repeats)
    report["seconds"] = time.perf_counter() - started
    print(json.dumps(report, indent=2))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump(report, file, indent=2)


if __name__ == "__main__":
    main()
