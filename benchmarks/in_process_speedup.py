"""Speculation on vs off in one process (no gRPC, no HTTP): what the split deployment is compared with.

    python benchmarks/in_process_speedup.py [--target T --draft D] [--prompts 8] [--max-tokens 64] [--k 1]
        [--prompt-lookup --min-ngram 2 --model-tokens 1]

Spec-Bench first turns, every 37th question (a spread over the categories), greedy, batch 1.
"""

from __future__ import annotations

import json
import time

from pair_args import pair_parser

from specdec.cli.bench import DEFAULT_PROMPTS
from specdec.default_models import pair_or_default
from specdec.drafters import ModelDrafter
from specdec.drafters.prompt_lookup import LookupSettings, PromptLookupDrafter
from specdec.engines.hf import load_model
from specdec.generation import SpeculativeGenerator
from specdec.prompts import encode_chat
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams


def main() -> None:
    parser = pair_parser(__doc__)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=1)
    parser.add_argument("--prompt-lookup", action="store_true", help="prompt lookup first, then the draft model")
    parser.add_argument("--min-ngram", type=int, default=2)
    parser.add_argument("--model-tokens", type=int, help="most draft-model candidates per block (lookup blocks: up to --k)")
    args = parser.parse_args()
    target, draft = (load_model(path) for path in pair_or_default(args.target, args.draft))
    questions = [json.loads(line) for line in DEFAULT_PROMPTS.read_text().splitlines()][::37][: args.prompts]
    drafter = ModelDrafter(draft.model)
    if args.prompt_lookup:
        drafter = PromptLookupDrafter(
            drafter, LookupSettings(min_ngram=args.min_ngram, max_ngram=max(3, args.min_ngram), model_tokens=args.model_tokens)
        )
    tokens, seconds, accepted, drafted = {"on": 0, "off": 0}, {"on": 0.0, "off": 0.0}, 0, 0
    for question in questions:
        prompt_ids = encode_chat(target.tokenizer, [{"role": "user", "content": question["turns"][0]}])
        for mode in ("on", "off"):
            request = GenerationRequest(
                prompt_ids=prompt_ids,
                max_tokens=args.max_tokens,
                sampling=SamplingParams(temperature=0),
                num_draft_tokens=args.k,
                speculative=mode == "on",
            )
            started = time.perf_counter()
            result = SpeculativeGenerator(target, drafter if mode == "on" else None).generate(request)
            seconds[mode] += time.perf_counter() - started
            tokens[mode] += len(result.token_ids)
            accepted, drafted = accepted + result.stats.accepted_tokens, drafted + result.stats.draft_tokens
    rate = {mode: tokens[mode] / seconds[mode] for mode in tokens}
    label = f"lookup(min {args.min_ngram}, model {args.model_tokens or args.k})+" if args.prompt_lookup else ""
    print(
        f"in-process {label}K={args.k}: on {rate['on']:.1f} tok/s, off {rate['off']:.1f} tok/s, speedup {rate['on'] / rate['off']:.2f}, "
        f"acceptance {accepted / max(drafted, 1):.3f}"
    )


if __name__ == "__main__":
    main()
