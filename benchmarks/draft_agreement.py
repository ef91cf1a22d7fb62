"""How often each way of drafting proposes the target's own next token (K = 1 greedy acceptance).

    python benchmarks/draft_agreement.py [--target T --draft D] [--prompts 26] [--max-tokens 64]

The target answers Spec-Bench first turns greedily (2 per category, round-robin); then, at every
answer position, the draft model (teacher-forced), prompt lookup over the sequence so far
(min n-gram 1 and 2) and lookup-then-model each propose one token, and the share that equals the
target's is counted per category. This is the measurement behind `model.prompt_lookup`.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch

from specdec.bench import DEFAULT_PROMPTS, load_prompts
from specdec.default_models import pair_or_default
from specdec.drafters.ngram import lookup_continuation
from specdec.models import load_model
from specdec.prompts import encode_chat

WAYS = ("draft model", "lookup min 1", "lookup min 2", "lookup 1 + model", "lookup 2 + model")


def proposals(target_ids: list[int], prompt_len: int, draft_argmax: torch.Tensor) -> dict[str, list[bool]]:
    """Per way, whether its proposal at each answer position after the first equals the target's token."""
    hits = defaultdict(list)
    for position in range(prompt_len + 1, len(target_ids)):
        prefix, truth = target_ids[:position], target_ids[position]
        model = int(draft_argmax[position - 1]) == truth
        hits["draft model"].append(model)
        for min_ngram in (1, 2):
            looked_up = lookup_continuation(prefix, 1, 3, min_ngram)
            hits[f"lookup min {min_ngram}"].append(bool(looked_up) and looked_up[0] == truth)
            hits[f"lookup {min_ngram} + model"].append(looked_up[0] == truth if looked_up else model)
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--prompts", type=int, default=26)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    target, draft = (load_model(path, device="cpu", dtype="float32") for path in pair_or_default(args.target, args.draft))
    by_category: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for prompt in load_prompts(DEFAULT_PROMPTS, None, args.prompts):  # round-robin over the categories, as bench takes them
        prompt_ids = torch.tensor([encode_chat(target.tokenizer, prompt.messages)])
        with torch.no_grad():
            sequence = target.model.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids), max_new_tokens=args.max_tokens,
                                              do_sample=False, pad_token_id=target.tokenizer.pad_token_id)[0]
            draft_argmax = draft.model(sequence[None]).logits[0].argmax(-1)
        for way, hits in proposals(sequence.tolist(), prompt_ids.shape[1], draft_argmax).items():
            by_category[prompt.category][way] += hits
            by_category["all"][way] += hits
    print("| category | " + " | ".join(WAYS) + " |")
    print("|---" * (len(WAYS) + 1) + "|")
    for category, ways in sorted(by_category.items(), key=lambda item: item[0] == "all"):
        print(f"| {category} | " + " | ".join(f"{sum(ways[w]) / len(ways[w]):.3f}" for w in WAYS) + " |")


if __name__ == "__main__":
    main()
