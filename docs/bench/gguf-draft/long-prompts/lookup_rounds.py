"""Offline: how many rounds prompt lookup alone would save on the target's greedy answers to long prompts.

    PYTHONPATH=$PWD python docs/bench/gguf-draft/long-prompts/lookup_rounds.py summarization,rag 12

The target's answers (64 tokens, greedy) come from a verify service on localhost:18082 once, then from
target-answers.json beside this file. Each round looks up up to K tokens after the latest earlier
match of the sequence's last n-gram (specdec/drafters/ngram.py) and keeps the prefix that equals
the answer, plus the target's own token.
"""
import json
import sys
from pathlib import Path

from transformers import AutoTokenizer

from specdec.cli.bench import load_prompts
from specdec.cli.client import VerifyClient
from specdec.default_models import ensure_default_target, models_dir
from specdec.drafters.ngram import lookup_continuation

tokenizer = AutoTokenizer.from_pretrained(ensure_default_target(models_dir()))
categories, limit = sys.argv[1].split(","), int(sys.argv[2])
prompts = load_prompts(Path(__file__).parents[4] / "benchmarks/spec-bench/question.jsonl", categories, limit)
answers_file = Path(__file__).with_name("target-answers.json")
if not answers_file.exists():
    with VerifyClient("localhost:18082") as client:
        answers = [list(client.generate(p.messages, max_tokens=64, temperature=0, speculative=False).token_ids) for p in prompts]
    answers_file.write_text(json.dumps(answers))
answers = json.loads(answers_file.read_text())
data = [(list(tokenizer.apply_chat_template(p.messages, add_generation_prompt=True, return_dict=True)["input_ids"]), answer)
        for p, answer in zip(prompts, answers)]
print("prompt tokens", [len(prompt) for prompt, _ in data])


def simulate(prompt, answer, k, max_ngram, min_ngram):
    position, rounds, drafted, accepted, wasted = 0, 0, 0, 0, 0
    while position < len(answer):
        candidates = lookup_continuation(prompt + answer[:position], k, max_ngram, min_ngram)
        matched = 0
        while matched < len(candidates) and position + matched < len(answer) and candidates[matched] == answer[position + matched]:
            matched += 1
        drafted, accepted, wasted = drafted + len(candidates), accepted + matched, wasted + (bool(candidates) and not matched)
        position, rounds = position + matched + 1, rounds + 1
    return rounds, drafted, accepted, wasted


for max_ngram, min_ngram, k in [(3, 2, 4), (4, 3, 4), (5, 4, 4), (3, 1, 4), (8, 3, 8)]:
    totals = [sum(column) for column in zip(*(simulate(prompt, answer, k, max_ngram, min_ngram) for prompt, answer in data))]
    print(f"max_ngram {max_ngram} min_ngram {min_ngram} K {k}: {totals[0]} rounds for {sum(len(a) for _, a in data)} tokens; "
          f"drafted {totals[1]}, accepted {totals[2]}, rounds whose whole block was rejected {totals[3]}")
