"""Rejection against coupled acceptance at T=0.8 and T=1.0 on chat prompts, in one process (issue 29,
item 3: a request with a seed runs coupled by default; what does that cost against rejection?).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/seeded_acceptance.py [--target T --draft D] [--prompts 24]
        [--seeds 1] [--max-tokens 128] [--k K] [--threads N] [--gguf-threads N] [--target-only] [--json OUT]

The pair is the default pair as `specdec up` serves it on this host (SmolLM2-135M-Instruct drafted by
its own Q4_1 GGUF through llama.cpp, no prompt lookup, K from the CPU tuning; the distilled draft where
llama-cpp-python is missing), built by the engine `specdec generate` uses; --target / --draft name
another pair (a .gguf draft runs through llama.cpp, a directory as a draft model with prompt lookup in
front, as the config defaults). Prompts: benchmarks/chat-prompts.jsonl. For every prompt and seed both
temperatures run both modes back to back, the order alternating from prompt to prompt, so a change in
the host's load falls on both alike; the 1-minute load average is sampled before each prompt.
No load-aware policy (every round drafts): the figures are the modes' own.

Reported per temperature and mode: mean accepted tokens per round (accepted candidates / rounds),
tokens per round (with the target's own token each round), acceptance rate (accepted / drafted),
tokens/s (all tokens / all seconds), and tokens/s relative to rejection at that temperature;
--target-only adds speculation off (the coupled reference) for the speedups.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pair_args import pair_parser

PROMPTS = Path(__file__).resolve().parent / "chat-prompts.jsonl"
TEMPERATURES = (0.8, 1.0)
MODES = ("rejection", "coupled")


@dataclass
class Tally:
    requests: int = 0
    tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    seconds: float = 0.0

    def add(self, result, seconds: float) -> None:
        self.requests += 1
        self.tokens += len(result.token_ids)
        self.rounds += result.stats.rounds
        self.drafted += result.stats.draft_tokens
        self.accepted += result.stats.accepted_tokens
        self.seconds += seconds

    def figures(self) -> dict:
        return {
            "requests": self.requests,
            "tokens": self.tokens,
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "seconds": round(self.seconds, 3),
            "accepted_per_round": self.accepted / self.rounds if self.rounds else 0.0,
            "tokens_per_round": self.tokens / self.rounds if self.rounds else 0.0,
            "acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0,
            "tokens_per_s": self.tokens / self.seconds if self.seconds else 0.0,
        }


def pair_config(args):
    """The SpecdecConfig of the pair (the default pair as `specdec up` runs it, unless --target/--draft) and its description."""
    from specdec.cli.launcher import GGUF_TUNING, default_pair_paths, default_pair_tuning
    from specdec.serving.config import load_config

    if args.target and args.draft:
        target, draft, tuning = args.target, args.draft, None  # the config's defaults
    else:
        pair = default_pair_paths()
        target, draft = args.target or pair.target, args.draft or pair.draft
    method = "gguf" if draft.endswith(".gguf") else "model"
    if not (args.target and args.draft):
        tuning = default_pair_tuning(method)
    lookup, k = method != "gguf", args.k or (tuning.num_draft_tokens if tuning else 5)  # a gguf draft: as the default pair, no lookup
    gguf_threads = args.gguf_threads or (int(GGUF_TUNING.draft_flags[0].split("=")[1]) if method == "gguf" else None)
    model = {
        "target_path": target,
        "draft_path": draft,
        "draft_method": method,
        "prompt_lookup": lookup,
        **({"gguf_threads": gguf_threads} if method == "gguf" else {}),
    }
    config = load_config(None, {"model": model, "speculative": {"enabled": True, "draft_tokens": k, "adaptive_k": False}})
    return config, f"target {target}, draft {draft} ({method}{', prompt lookup first' if lookup else ''}), K={k}" + (
        f", {gguf_threads} llama.cpp thread(s)" if method == "gguf" else ""
    )


def main() -> None:
    parser = pair_parser(__doc__)
    parser.add_argument("--prompts", type=int, default=24, help="how many of the chat prompts (24 in all)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per prompt (seed = prompt index * 1000 + i)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--k", type=int, help="candidates per round (default: the pair's tuning)")
    parser.add_argument("--threads", type=int, help="torch threads of the target (default: torch's)")
    parser.add_argument("--gguf-threads", type=int, help="llama.cpp threads of a gguf draft (default: the default pair's)")
    parser.add_argument("--target-only", action="store_true", help="also run speculation off at each temperature")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    import torch

    from specdec.assembly import build_generator
    from specdec.prompts import encode_chat
    from specdec.request import GenerationRequest
    from specdec.sampling import SamplingParams

    if args.threads:
        torch.set_num_threads(args.threads)
    config, described = pair_config(args)
    generator = build_generator(config)
    tokenizer = generator.target.tokenizer
    questions = [json.loads(line)["prompt"] for line in PROMPTS.read_text().splitlines() if line.strip()][: args.prompts]
    prompts = [encode_chat(tokenizer, [{"role": "user", "content": question}]) for question in questions]
    modes = MODES + (("off",) if args.target_only else ())

    def request(prompt_ids: list[int], temperature: float, seed: int, mode: str) -> GenerationRequest:
        acceptance = {"acceptance": mode} if mode != "off" else {}
        return GenerationRequest(
            prompt_ids=prompt_ids,
            max_tokens=args.max_tokens,
            sampling=SamplingParams(temperature=temperature),
            seed=seed,
            num_draft_tokens=config.speculative.draft_tokens,
            draft_top_k=config.speculative.draft_top_k,
            speculative=mode != "off",
            **acceptance,
        )

    for mode in modes:  # warm-up, not counted: first calls pay for lazy initialisation
        generator.generate(request(prompts[0], 1.0, 0, mode).model_copy(update={"max_tokens": 8}))
    tallies = {(temperature, mode): Tally() for temperature in TEMPERATURES for mode in modes}
    loads, started = [], time.time()
    for index, prompt_ids in enumerate(prompts):
        loads.append(os.getloadavg()[0])
        for seed in range(index * 1000, index * 1000 + args.seeds):
            for temperature in TEMPERATURES:
                order = modes if index % 2 == 0 else tuple(reversed(modes))
                for mode in order:
                    begun = time.perf_counter()
                    result = generator.generate(request(prompt_ids, temperature, seed, mode))
                    tallies[(temperature, mode)].add(result, time.perf_counter() - begun)
        print(f"prompt {index + 1}/{len(prompts)} done, load average {loads[-1]:.2f}", file=sys.stderr)
    loads.append(os.getloadavg()[0])

    figures = {f"T={temperature} {mode}": tally.figures() for (temperature, mode), tally in tallies.items()}
    load = {"min": min(loads), "mean": sum(loads) / len(loads), "max": max(loads), "cpus": os.cpu_count()}
    print(
        f"# Rejection vs coupled acceptance, in-process\n\n{described}; {len(prompts)} chat prompts x {args.seeds} seed(s), "
        f"max_tokens {args.max_tokens}, torch threads {torch.get_num_threads()}; {time.time() - started:.0f} s; "
        f"1-minute load average min {load['min']:.2f} / mean {load['mean']:.2f} / max {load['max']:.2f} on {load['cpus']} CPUs\n"
    )
    print(
        "| T | acceptance | requests | tokens | rounds | accepted tokens / round | tokens / round | acceptance rate | tokens/s "
        "| tokens/s vs rejection |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for temperature in TEMPERATURES:
        base = tallies[(temperature, "rejection")].figures()["tokens_per_s"]
        for mode in modes:
            f = tallies[(temperature, mode)].figures()
            relative = f"{f['tokens_per_s'] / base:.2f}x" if base else "-"
            label = "target only" if mode == "off" else mode
            per_round = (
                f"{f['accepted_per_round']:.2f} | {f['tokens_per_round']:.2f} | {f['acceptance_rate']:.3f}" if f["rounds"] else "- | - | -"
            )
            print(
                f"| {temperature} | {label} | {f['requests']} | {f['tokens']} | {f['rounds']} | {per_round} | "
                f"{f['tokens_per_s']:.1f} | {relative} |"
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"pair": described, "args": vars(args), "load_average": load, "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
