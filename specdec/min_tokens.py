"""min_tokens (vLLM's extension): the model's stop tokens are banned until min_tokens tokens exist.

As vLLM's MinTokensLogitsProcessor: at a position with fewer than min_tokens generated tokens before
it, the logits of the stop-token ids (EOS: the tokenizer's and the generation config's) are -inf.
That changes the target distribution itself, so like penalties and the grammar (README, What
"lossless" means here) the verifier masks every position of a candidate block, each counting the
candidates on its own path, and target-only decoding goes through the same function; drafters mask
their q too, so they do not propose what the target refuses (correctness never depends on it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


def mask_stop_tokens(
    logits: torch.Tensor,  # [m, vocab] at m positions
    generated_before: torch.Tensor,  # [m] int: tokens generated before each position
    min_tokens: int,
    stop_ids: torch.Tensor,  # [s] int64 token ids
) -> torch.Tensor:  # [m, vocab], stop ids at -inf where fewer than min_tokens came before
    early = generated_before.to(logits.device) < min_tokens  # [m]
    stops = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
    stops[stop_ids.to(logits.device)] = True
    return logits.masked_fill(early.unsqueeze(-1) & stops, float("-inf"))


@dataclass(frozen=True)
class MinTokensMask:
    """One request's min_tokens over its prompt, applied at any positions after any sequence."""

    min_tokens: int
    prompt_length: int
    stop_ids: tuple[int, ...]

    @staticmethod
    def for_request(min_tokens: int, prompt_length: int, stop_ids: Iterable[int]) -> MinTokensMask | None:
        """The mask, or None when it bans nothing (no work per position)."""
        stops = tuple(sorted(set(stop_ids)))
        return MinTokensMask(min_tokens, prompt_length, stops) if min_tokens > 0 and stops else None

    def bans_after(self, sequence_length: int) -> bool:
        """Whether a position after a sequence of this length (prompt first) may still be masked."""
        return sequence_length - self.prompt_length < self.min_tokens

    def __call__(
        self,
        logits: torch.Tensor,  # [m, vocab] at m positions after a sequence of `sequence_length` tokens (prompt first)
        sequence_length: int,
        paths: torch.Tensor | None = None,  # [m, n] bool: the candidates before each position (penalties.path_rows); None: none
    ) -> torch.Tensor:  # [m, vocab]
        if not self.bans_after(sequence_length):  # past it: nothing to mask for the rest of the generation
            return logits
        before = torch.full((logits.shape[0],), sequence_length - self.prompt_length, dtype=torch.long)
        if paths is not None:
            before = before + paths.sum(dim=-1).cpu()
        return mask_stop_tokens(logits, before, self.min_tokens, torch.tensor(self.stop_ids, dtype=torch.long))
