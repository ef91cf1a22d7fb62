"""The distillation prompt set: templated chat requests across the kinds of task users send.

Never the Spec-Bench questions: those are the benchmark's test set (see prompt_parts).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from specdec.distill import prompt_parts as parts


def _fill_subject(rng: random.Random, templates: list[str]) -> str:
    subject, other = rng.sample(parts.SUBJECTS, 2)
    return rng.choice(templates).format(s=subject, t=other)


def _reasoning(rng: random.Random) -> str:
    a, b, c = rng.sample(parts.REASONING_WORDS, 3)
    return rng.choice(parts.REASONING).format(
        a=a, b=b, c=c, n=rng.randint(4, 40), m=rng.randint(2, 9), k=rng.choice([8, 10, 12, 16]), h=rng.randint(5, 20)
    )


def _math(rng: random.Random) -> str:
    return rng.choice(parts.MATH).format(
        p=rng.randint(2, 25), n=rng.randint(2, 30), m=rng.randint(2, 20), b=rng.choice([50, 100, 120, 200, 360, 500, 1000])
    )


def _coding(rng: random.Random) -> str:
    return rng.choice(parts.CODING).format(task=rng.choice(parts.CODING_TASKS))


def _qa(rng: random.Random) -> str:
    return rng.choice(parts.QA).format(country=rng.choice(parts.COUNTRIES), book=rng.choice(parts.BOOKS), person=rng.choice(parts.PEOPLE))


def _translation(rng: random.Random) -> str:
    language = rng.choice(sorted(parts.SENTENCES))
    return rng.choice(parts.TRANSLATION).format(lang=language, sentence=rng.choice(parts.SENTENCES[language]))


def _passage(rng: random.Random) -> str:
    passage, question = rng.choice(parts.PASSAGES)
    return rng.choice(parts.PASSAGE_TASKS).format(passage=passage, question=question)


KINDS: dict[str, Callable[[random.Random], str]] = {
    "writing": lambda rng: _fill_subject(rng, parts.WRITING),
    "roleplay": lambda rng: _fill_subject(rng, parts.ROLEPLAY),
    "explain": lambda rng: _fill_subject(rng, parts.EXPLAIN),
    "reasoning": _reasoning,
    "math": _math,
    "coding": _coding,
    "qa": _qa,
    "translation": _translation,
    "passage": _passage,
}


def distill_prompts(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """Up to `count` distinct (kind, user message) pairs, kinds in rotation; the same list for the same seed.

    A kind whose combinations run out stops contributing, so the list can be shorter than `count`.
    """
    rng = random.Random(seed)
    prompts: list[tuple[str, str]] = []
    seen: set[str] = set()
    exhausted: set[str] = set()
    kinds = list(KINDS)
    while len(prompts) < count and len(exhausted) < len(kinds):
        kind = kinds[len(prompts) % len(kinds)] if not exhausted else rng.choice([k for k in kinds if k not in exhausted])
        text = next((t for t in (KINDS[kind](rng) for _ in range(_MAX_DRAWS)) if t not in seen), None)
        if text is None:
            exhausted.add(kind)
            continue
        seen.add(text)
        prompts.append((kind, text))
    return prompts


_MAX_DRAWS = 50  # draws of one kind without a new prompt before that kind counts as exhausted
