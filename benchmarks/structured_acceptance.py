"""Acceptance under a JSON schema with the draft masked by the grammar and unmasked (default pair, in-process).

    PYTHONPATH=$PWD python benchmarks/structured_acceptance.py [--prompts 6] [--max-tokens 120] [--threads 2]

The target is SmolLM2-135M-Instruct; the draft is its own Q4_1 GGUF run by llama.cpp (the default
pair, as `specdec up` runs it). Each prompt asks for a JSON object under one schema; the verifier
always masks the target by the grammar (that is the output's definition). "masked" gives the draft
the grammar too (what the services do); "unmasked" hides it from the draft, whose candidates then
leave the grammar and are rejected. Reported per mode and setting: acceptance rate (accepted /
drafted), tokens per round, tokens/s; the output text is checked identical across draft modes for
greedy and coupled (lossless either way: only speed may differ).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

from specdec.constraints.grammars import json_schema_grammar
from specdec.default_models import default_draft_gguf, ensure_default_target, models_dir
from specdec.drafters.base import DraftRequest
from specdec.drafters.gguf import GgufDrafter
from specdec.engines.gguf_model import GgufOptions, load_gguf
from specdec.engines.hf import load_model
from specdec.generation import SpeculativeGenerator
from specdec.prompts import encode_chat
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "city", "age", "hobbies"],
    "properties": {
        "name": {"type": "string"},
        "city": {"type": "string"},
        "age": {"type": "integer"},
        "hobbies": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    },
}
SUBJECTS = [
    "a retired sailor",
    "a young painter",
    "a chess champion",
    "a baker from Lyon",
    "an astronaut",
    "a beekeeper",
    "a jazz drummer",
    "a marine biologist",
]
SETTINGS = {
    "greedy": {"sampling": SamplingParams(temperature=0)},
    "coupled T=0.7": {"sampling": SamplingParams(temperature=0.7), "acceptance": "coupled", "seed": 1},
    "rejection T=0.7": {"sampling": SamplingParams(temperature=0.7), "acceptance": "rejection", "seed": 1},
}


class UnmaskedDrafter:
    """The drafter with the grammar hidden from it: its sessions draft as if unconstrained."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, f"{inner.name} (unmasked)"

    def open(self, request: DraftRequest):
        return self.inner.open(dataclasses.replace(request, constraint=None))

    def batched(self, options):
        return UnmaskedDrafter(self.inner.batched(options))


def run(generator: SpeculativeGenerator, prompts: list[list[int]], grammar: str, max_tokens: int, setting: dict) -> dict:
    drafted = accepted = rounds = tokens = 0
    texts, started = [], time.perf_counter()
    for prompt_ids in prompts:
        result = generator.generate(
            GenerationRequest(prompt_ids=prompt_ids, grammar=grammar, max_tokens=max_tokens, num_draft_tokens=5, **setting)
        )
        json.loads(result.text) if result.finish_reason == "stop" else None  # a stopped output must parse
        texts.append(result.text)
        drafted, accepted = drafted + result.stats.draft_tokens, accepted + result.stats.accepted_tokens
        rounds, tokens = rounds + result.stats.rounds, tokens + len(result.token_ids)
    seconds = time.perf_counter() - started
    return {
        "acceptance": round(accepted / max(drafted, 1), 3),
        "tokens_per_round": round(tokens / max(rounds, 1), 2),
        "tokens_per_s": round(tokens / seconds, 1),
        "tokens": tokens,
        "texts": texts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    root = models_dir()
    target = load_model(str(ensure_default_target(root)), device="cpu", dtype="float32")
    draft = load_gguf(default_draft_gguf(root), GgufOptions(threads=args.threads, context_tokens=4096, max_sequences=2, device="cpu"))
    grammar = json_schema_grammar(SCHEMA, "schema")
    prompts = [
        encode_chat(
            target.tokenizer, [{"role": "user", "content": f"Describe {subject} as a JSON object with name, city, age and hobbies."}]
        )
        for subject in SUBJECTS[: args.prompts]
    ]
    drafters = {"masked": GgufDrafter(draft), "unmasked": UnmaskedDrafter(GgufDrafter(draft))}
    try:
        for label, setting in SETTINGS.items():
            results = {
                mode: run(SpeculativeGenerator(target, drafter), prompts, grammar, args.max_tokens, setting)
                for mode, drafter in drafters.items()
            }
            same = results["masked"].pop("texts") == results["unmasked"].pop("texts")
            print(json.dumps({"setting": label, **{mode: result for mode, result in results.items()}, "identical_text": same}))
    finally:
        draft.close()


if __name__ == "__main__":
    main()
