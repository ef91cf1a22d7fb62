"""`specdec bench --baseline hf`: Hugging Face generate(), target alone and assisted, on the same prompts.

In-process, batch 1, the same pair and prompts as the gateway run, so the table can set specdec's
speedup through the whole stack beside transformers' own assisted generation. Each prompt runs in
both modes back to back, the first mode alternating, like the gateway A/B.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specdec.cli.markdown import fmt, table
from specdec.errors import SpecdecError

HF_MODES = ("assisted", "target_only")


@dataclass
class HfRun:
    prompt: int
    category: str
    mode: str
    tokens: int
    seconds: float


def run_hf_baseline(prompts: list, target_path: str, draft_path: str, max_tokens: int, temperature: float, bar=None) -> dict:
    from specdec.engines.hf import check_vocab_compatible, load_model
    from specdec.prompts import encode_chat

    target, draft = load_model(target_path), load_model(draft_path)
    check_vocab_compatible(target, draft)
    if temperature != 0:
        raise SpecdecError("--baseline hf compares greedy decoding: use --temperature 0")
    runs: list[HfRun] = []
    for index, prompt in enumerate(prompts):
        input_ids = torch.tensor([encode_chat(target.tokenizer, prompt.messages)], device=target.device)
        for mode in HF_MODES if index % 2 == 0 else HF_MODES[::-1]:
            assistant = {"assistant_model": draft.model} if mode == "assisted" else {}
            tokens, seconds = _timed_generate(target, input_ids, max_tokens, assistant)
            runs.append(HfRun(index, prompt.category, mode, tokens, seconds))
            if bar is not None:
                bar.update(1)
    return summarize_hf(runs)


@torch.no_grad()
def _timed_generate(target, input_ids: torch.Tensor, max_tokens: int, assistant: dict) -> tuple[int, float]:
    started = time.perf_counter()
    output = target.model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=max_tokens,
        do_sample=False,
        eos_token_id=sorted(target.eos_token_ids),
        pad_token_id=target.tokenizer.pad_token_id,
        **assistant,
    )
    return output.shape[1] - input_ids.shape[1], time.perf_counter() - started


def summarize_hf(runs: list[HfRun]) -> dict:
    def tokens_per_s(subset: list[HfRun]) -> float | None:
        seconds = sum(r.seconds for r in subset)
        return sum(r.tokens for r in subset) / seconds if seconds else None

    def block(subset: list[HfRun]) -> dict:
        rates = {mode: tokens_per_s([r for r in subset if r.mode == mode]) for mode in HF_MODES}
        speedup = rates["assisted"] / rates["target_only"] if rates["assisted"] and rates["target_only"] else None
        return {"tokens_per_s": rates, "speedup": speedup, "prompts": len({r.prompt for r in subset})}

    categories = {}
    for run in runs:
        categories.setdefault(run.category, []).append(run)
    return {**block(runs), "categories": {name: block(subset) for name, subset in categories.items()}}


def hf_baseline(options, prompts: list, bar) -> dict:
    """The baseline for a `specdec bench` run: its options' pair (default: the default pair) and its prompts."""
    from specdec.default_models import pair_or_default

    target, draft = pair_or_default(options.target, options.draft)
    return {"target": target, "draft": draft, **run_hf_baseline(prompts, target, draft, options.max_tokens, options.temperature, bar)}


def render_hf(results: dict) -> list[str]:
    """specdec through the whole stack at concurrency 1 beside HF generate() in-process, per category."""
    hf = (results.get("baselines") or {}).get("hf")
    single = next((level for level in results["levels"] if level["concurrency"] == 1), None)
    if not hf or single is None:
        return []
    groups = [("overall", single, hf), *((name, entry, hf["categories"].get(name, {})) for name, entry in single["categories"].items())]
    rows = [
        [
            name,
            fmt(ours["modes"]["on"]["tokens_per_s"], 1),
            fmt(ours["modes"]["off"]["tokens_per_s"], 1),
            fmt(ours["speedup"]),
            fmt(theirs.get("tokens_per_s", {}).get("assisted"), 1),
            fmt(theirs.get("tokens_per_s", {}).get("target_only"), 1),
            fmt(theirs.get("speedup")),
        ]
        for name, ours, theirs in groups
    ]
    return [
        "",
        "## Hugging Face generate() baseline (in-process, batch 1, same pair and prompts)",
        *table(
            [
                "category",
                "specdec tok/s on",
                "specdec tok/s off",
                "specdec speedup",
                "HF assisted tok/s",
                "HF target-only tok/s",
                "HF assisted speedup",
            ],
            rows,
        ),
    ]
