"""How often each way of drafting proposes the target's own next token (K = 1 greedy acceptance), and what a draft token costs.

    python benchmarks/draft_agreement.py [--target T --draft D] [--gguf LABEL=FILE ...] [--prompts 26] [--max-tokens 64]

The target answers the prompts greedily (Spec-Bench first turns, 2 per category, round-robin, or a
`--prompt-file` as `specdec bench` takes them); then, at every answer position, each draft
(teacher-forced: the distilled draft model, and each `--gguf` file run by llama.cpp), prompt lookup
over the sequence so far (min n-gram 1 and 2) and lookup-then-draft each propose one token, and the
share that equals the target's is counted per category. This is the measurement behind
`model.prompt_lookup` and the default pair's draft. Then the cost of one draft token after the
first answer (median over `--repeats` single-token steps, rolled back each time) with
`--threads` threads.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch
from pair_args import pair_parser

from specdec.cli.bench import DEFAULT_PROMPTS, load_prompts
from specdec.default_models import pair_or_default
from specdec.drafters.gguf import GgufDrafter
from specdec.drafters.ngram import lookup_continuation
from specdec.engines.gguf_model import GgufOptions, load_gguf
from specdec.engines.hf import load_model
from specdec.engines.llama_cpp import GgufSequence
from specdec.kv_cache import CachedSequence, PrefixCache
from specdec.prompts import encode_chat

DISTILLED = "distilled draft"


def proposals(target_ids: list[int], prompt_len: int, draft_argmax: dict[str, torch.Tensor]) -> dict[str, list[bool]]:
    """Per way, whether its proposal at each answer position after the first equals the target's token."""
    hits = defaultdict(list)
    for position in range(prompt_len + 1, len(target_ids)):
        prefix, truth = target_ids[:position], target_ids[position]
        looked_up = {min_ngram: lookup_continuation(prefix, 1, 3, min_ngram) for min_ngram in (1, 2)}
        for min_ngram, found in looked_up.items():
            hits[f"lookup min {min_ngram}"].append(bool(found) and found[0] == truth)
        for name, argmax in draft_argmax.items():
            model = int(argmax[position - 1]) == truth
            hits[name].append(model)
            for min_ngram, found in looked_up.items():
                hits[f"lookup {min_ngram} + {name}"].append(found[0] == truth if found else model)
    return hits


def step_ms(lm: PrefixCache, prefix: list[int], repeats: int) -> float:
    """Median time of one draft token after `prefix` (cached), rolled back each time."""
    lm.advance(prefix)
    times = []
    for repeat in range(repeats + 2):
        started = time.perf_counter()
        lm.advance([*prefix, 10 + repeat])
        if repeat >= 2:
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = pair_parser(__doc__)
    parser.add_argument("--gguf", action="append", default=[], metavar="LABEL=FILE", help="a GGUF draft run by llama.cpp (repeatable)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads of the GGUF drafts")
    parser.add_argument("--prompt-file", type=Path, default=DEFAULT_PROMPTS)
    parser.add_argument("--prompts", type=int, default=26)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    target, draft = (load_model(path, device="cpu", dtype="float32") for path in pair_or_default(args.target, args.draft))
    options = GgufOptions(threads=args.threads, context_tokens=4096, max_sequences=1, device="cpu")
    ggufs = {label: load_gguf(path, options) for label, path in (item.split("=", 1) for item in args.gguf)}
    drafts = {DISTILLED: lambda: CachedSequence(draft.model), **{label: _gguf_sequence_factory(model) for label, model in ggufs.items()}}
    by_category: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    first_sequence = None
    for prompt in load_prompts(args.prompt_file, None, args.prompts):  # round-robin over the categories, as bench takes them
        prompt_ids = torch.tensor([encode_chat(target.tokenizer, prompt.messages)])
        sequence = target.model.generate(
            prompt_ids,
            attention_mask=torch.ones_like(prompt_ids),
            max_new_tokens=args.max_tokens,
            do_sample=False,
            pad_token_id=target.tokenizer.pad_token_id,
        )[0].tolist()
        first_sequence = first_sequence or sequence
        draft_argmax = {}
        for name, open_sequence in drafts.items():
            lm = open_sequence()
            draft_argmax[name] = lm.advance(sequence, num_logits=len(sequence)).argmax(-1)
            lm.release()
        for way, hits in proposals(sequence, prompt_ids.shape[1], draft_argmax).items():
            by_category[prompt.category][way] += hits
            by_category["all"][way] += hits
    _print_agreement(by_category, [*drafts])
    print(f"\n| draft | ms per draft token ({args.threads} llama.cpp thread(s); torch: {torch.get_num_threads()}) |\n|---|---|")
    for name, open_sequence in drafts.items():
        lm = open_sequence()
        print(f"| {name} | {step_ms(lm, first_sequence, args.repeats):.2f} |")
        lm.release()


def _gguf_sequence_factory(model):
    drafter = GgufDrafter(model)
    return lambda: GgufSequence(model, model.take_seat(4096, timeout_s=1), drafter.scheduler)


def _print_agreement(by_category: dict[str, dict[str, list[bool]]], drafts: list[str]) -> None:
    ways = ["lookup min 1", "lookup min 2", *drafts, *(f"lookup {n} + {d}" for d in drafts for n in (1, 2))]
    print("| category | " + " | ".join(ways) + " |")
    print("|---" * (len(ways) + 1) + "|")
    for category, results in sorted(by_category.items(), key=lambda item: item[0] == "all"):
        print(f"| {category} | " + " | ".join(f"{sum(results[w]) / len(results[w]):.3f}" for w in ways) + " |")


if __name__ == "__main__":
    main()
