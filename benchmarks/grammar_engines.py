"""Grammar engines compared by their cost per token on this CPU: llguidance, xgrammar, outlines-core.

For each engine and each constraint (JSON mode, a JSON schema) it compiles the grammar for the
default pair's tokenizer (SmolLM2, 49,152 tokens), then walks a valid output token by token:
compute the next-token mask, consume the token. Reported: compile time, and the mean / p50 / p99
mask time per token (mask computation + consume, what the verifier pays per position).

    PYTHONPATH=$PWD python benchmarks/grammar_engines.py [--tokenizer DIR] [--repeats 5]

Engines that are not installed are reported as such; the project itself depends only on llguidance.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from transformers import AutoTokenizer

from specdec.default_models import default_pair

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "email", "tags", "address"],
    "additionalProperties": False,
}
OUTPUT = {
    "name": "Ada Lovelace",
    "age": 36,
    "email": "ada@example.org",
    "tags": ["math", "engines", "poetry"],
    "address": {"city": "London", "zip": "W1"},
}

# An engine: (tokenizer, vocab_size, schema or None for JSON mode) -> a fresh walker with
# `mask()` (compute the next mask) and `consume(token_id)`.
Walker = tuple[Callable[[], None], Callable[[int], None]]


def llguidance_engine(tokenizer, vocab_size: int) -> Callable[[dict | None], Walker]:
    import llguidance
    import llguidance.hf
    import llguidance.torch

    ll_tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
    bitmask = llguidance.torch.allocate_token_bitmask(1, vocab_size)

    def build(schema: dict | None) -> Walker:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema if schema is not None else {"type": "object"}, defaults={"whitespace_flexible": False}
        )
        matcher = llguidance.LLMatcher(ll_tokenizer, grammar)
        return (lambda: llguidance.torch.fill_next_token_bitmask(matcher, bitmask)), (lambda token: matcher.consume_token(token))

    return build


def xgrammar_engine(tokenizer, vocab_size: int) -> Callable[[dict | None], Walker]:
    import xgrammar

    compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size))
    bitmask = xgrammar.allocate_token_bitmask(1, vocab_size)

    def build(schema: dict | None) -> Walker:
        compiled = (
            compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
            if schema is not None
            else compiler.compile_builtin_json_grammar()
        )
        matcher = xgrammar.GrammarMatcher(compiled)
        return (lambda: matcher.fill_next_token_bitmask(bitmask)), (lambda token: matcher.accept_token(token))

    return build


def outlines_core_engine(tokenizer, vocab_size: int) -> Callable[[dict | None], Walker]:
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    eos = tokenizer.eos_token_id
    by_text: dict[str, list[int]] = {}
    for token_id in range(len(tokenizer)):
        if token_id != eos:
            by_text.setdefault(tokenizer.convert_tokens_to_string([tokenizer.convert_ids_to_tokens(token_id)]), []).append(token_id)
    vocabulary = Vocabulary(eos, {text: ids for text, ids in by_text.items() if text})
    mask = torch.zeros(1, (vocab_size + 31) // 32, dtype=torch.int32)

    def build(schema: dict | None) -> Walker:
        if schema is None:
            raise NotImplementedError("outlines-core has no JSON mode (only schemas and regexes)")
        guide = Guide(Index(build_regex_from_schema(json.dumps(schema), whitespace_pattern=""), vocabulary))
        return (lambda: guide.write_mask_into(mask.data_ptr(), mask.numel(), mask.element_size())), (lambda token: guide.advance(token))

    return build


ENGINES = {"llguidance": llguidance_engine, "xgrammar": xgrammar_engine, "outlines-core": outlines_core_engine}


def measure(build: Callable[[dict | None], Walker], schema: dict | None, token_ids: list[int], repeats: int) -> dict:
    started = time.perf_counter()
    build(schema)
    compile_ms = (time.perf_counter() - started) * 1000
    per_token = []
    for _ in range(repeats):
        mask, consume = build(schema)
        for token_id in token_ids:
            started = time.perf_counter()
            mask()
            consume(token_id)
            per_token.append((time.perf_counter() - started) * 1e6)
    per_token.sort()
    return {
        "compile_ms": round(compile_ms, 1),
        "mean_us": round(statistics.fmean(per_token), 1),
        "p50_us": round(per_token[len(per_token) // 2], 1),
        "p99_us": round(per_token[int(len(per_token) * 0.99)], 1),
        "tokens": len(token_ids),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the default pair's target)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or default_pair()[0])
    vocab_size = len(tokenizer)
    token_ids = tokenizer.encode(json.dumps(OUTPUT, separators=(",", ":")), add_special_tokens=False)
    print(f"torch threads {torch.get_num_threads()}, vocabulary {vocab_size}, output {len(token_ids)} tokens")
    for name, engine in ENGINES.items():
        try:
            build = engine(tokenizer, vocab_size)
        except ImportError as error:
            print(json.dumps({"engine": name, "error": f"not installed: {error}"}))
            continue
        for label, schema in (("json_object", None), ("json_schema", SCHEMA)):
            try:
                result = measure(build, schema, token_ids, args.repeats)
            except Exception as error:  # noqa: BLE001 -- one engine's failure is a result, not a crash
                result = {"error": f"{type(error).__name__}: {error}"}
            print(json.dumps({"engine": name, "constraint": label, **result}))


if __name__ == "__main__":
    main()
