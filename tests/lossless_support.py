"""The rejection test's statistics: the first two tokens of many seeded generations against the target's exact joint law."""

from __future__ import annotations

from collections.abc import Callable

import torch
from scipy import stats

from specdec.acceptance import RoundVerdict
from specdec.engines.base import TargetModel
from specdec.generation import SpeculativeGenerator
from specdec.penalties import LogitsTransform
from specdec.request import GenerationRequest
from specdec.sampling import SamplingParams, processed_probs

TRIALS = 1500
JOINT_SAMPLING = SamplingParams(temperature=1.0, top_k=4)


def always_accept(candidate_ids, draft_probs, target_probs, generator) -> RoundVerdict:
    """The negative control's verifier (monkeypatched over acceptance_rounds.rejection_accept): every
    candidate accepted, whatever the target says, then a bonus token; a lossless check must catch it."""
    bonus = int(torch.multinomial(target_probs[-1].double().cpu(), 1, generator=generator))
    return RoundVerdict(candidate_ids.tolist(), bonus, len(candidate_ids))


def exact_joint(
    target: TargetModel,
    prompt_ids: list[int],
    sampling: SamplingParams = JOINT_SAMPLING,
    transform: LogitsTransform | Callable | None = None,
) -> dict[tuple[int, int], float]:
    """P(first two tokens) under the target's processed distribution (after `transform`, if any)."""
    lm = target.open_sequence(len(prompt_ids) + 2)  # the engine's own passes, as the generations below run them

    def probs(sequence: list[int]):
        logits = lm.advance(sequence)[-1:].double()  # [1, vocab]
        return processed_probs((transform(logits, sequence) if transform is not None else logits)[0], sampling)

    try:
        first = probs(prompt_ids)
        joint = {}
        for token in first.nonzero().flatten().tolist():
            second = probs([*prompt_ids, token])
            for next_token in second.nonzero().flatten().tolist():
                joint[(token, next_token)] = float(first[token] * second[next_token])
    finally:
        lm.release()
    return joint


def joint_p_value(target, drafter, prompt_ids, trials: int = TRIALS, transform=None, **fields) -> float:
    """Chi-square p-value of the first two tokens over `trials` seeds (0.0 if a pair the target cannot produce appears).

    `transform(logits [1, vocab], sequence)` defines the expected law as the request `fields` (a grammar) define the generated one.
    """
    expected = exact_joint(target, prompt_ids, JOINT_SAMPLING, transform)
    counts = dict.fromkeys(expected, 0)
    generator = SpeculativeGenerator(target, drafter)
    for seed in range(trials):
        request = GenerationRequest(
            prompt_ids=prompt_ids,
            max_tokens=3,
            sampling=JOINT_SAMPLING,
            seed=seed,
            num_draft_tokens=3,
            **{"ignore_eos": not fields.get("grammar"), **fields},
        )
        pair = tuple(generator.generate(request).token_ids[:2])
        if pair not in counts:
            return 0.0  # a pair the target can never produce
        counts[pair] += 1
    observed = [counts[pair] for pair in expected]
    return float(stats.chisquare(observed, [expected[pair] * trials for pair in expected]).pvalue)
