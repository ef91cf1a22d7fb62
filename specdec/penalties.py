"""Penalties and logit_bias: a request's transform of the logits, position by position.

They define the target distribution itself (README, What "lossless" means here): at each
position p' = normalise(transform(logits, tokens before the position)), then the usual sampling
transforms (specdec.sampling). The verifier applies the transform at every position of a candidate
block, from prompt + generated tokens + the candidates on the path to that position; drafters
apply it to their own q so their candidates are accepted more often (correctness never depends
on it). In order, as vLLM does:
- logit_bias: logits[t] += bias[t];
- repetition_penalty r (Hugging Face / CTRL): for tokens in the prompt or generated so far,
  logits[t] / r when logits[t] > 0, else logits[t] * r;
- frequency_penalty f and presence_penalty a (OpenAI): logits[t] -= f * c[t] + a * (c[t] > 0),
  where c[t] counts t among the *generated* tokens before the position (the prompt is not counted).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from specdec.errors import InvalidRequestError
from specdec.fields import FrequencyPenalty, PresencePenalty, RepetitionPenalty
from specdec.limits import MAX_LOGIT_BIAS_ENTRIES
from specdec.tree import ancestor_mask


class Penalties(BaseModel):
    """A request's penalties; the defaults change nothing."""

    model_config = ConfigDict(frozen=True)

    presence_penalty: PresencePenalty = 0.0
    frequency_penalty: FrequencyPenalty = 0.0
    repetition_penalty: RepetitionPenalty = 1.0
    logit_bias: dict[int, float] = Field(default_factory=dict, description="token id -> bias in [-100, 100]")

    @field_validator("logit_bias")
    @classmethod
    def _bias_in_range(cls, value: dict[int, float]) -> dict[int, float]:
        if len(value) > MAX_LOGIT_BIAS_ENTRIES:
            raise ValueError(f"at most {MAX_LOGIT_BIAS_ENTRIES} entries, got {len(value)}")
        for token_id, bias in value.items():
            if token_id < 0:
                raise ValueError(f"token id {token_id} is negative")
            if not (math.isfinite(bias) and -100.0 <= bias <= 100.0):
                raise ValueError(f"the bias of token {token_id} is {bias}; it must be in [-100, 100]")
        return value

    @property
    def is_identity(self) -> bool:
        return (
            self.presence_penalty == 0.0
            and self.frequency_penalty == 0.0
            and self.repetition_penalty == 1.0
            and not any(self.logit_bias.values())
        )

    def check_vocab(self, vocab_size: int, field: str) -> None:
        """Refuse logit_bias ids the model does not have, naming `field`."""
        bad = next((token_id for token_id in self.logit_bias if token_id >= vocab_size), None)
        if bad is not None:
            raise InvalidRequestError(field, f"token id {bad} is outside the vocabulary [0, {vocab_size})")


def apply_penalties(
    logits: torch.Tensor,  # [n, vocab] raw logits at n positions
    generated_counts: torch.Tensor,  # [n, vocab] times each token was generated before each position
    seen: torch.Tensor,  # [n, vocab] bool: the token is in the prompt or was generated before the position
    bias: torch.Tensor | None,  # [vocab] dense logit_bias; None: no bias
    penalties: Penalties,
) -> torch.Tensor:  # [n, vocab] transformed logits (float32 at least)
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits.clone()
    if bias is not None:
        logits += bias.to(logits)
    if penalties.repetition_penalty != 1.0:
        penalised = torch.where(logits > 0, logits / penalties.repetition_penalty, logits * penalties.repetition_penalty)
        logits = torch.where(seen, penalised, logits)
    if penalties.frequency_penalty:
        logits -= penalties.frequency_penalty * generated_counts.to(logits)
    if penalties.presence_penalty:
        logits -= penalties.presence_penalty * (generated_counts > 0).to(logits)
    # NOTE: -inf logits (vocabulary padding) stay -inf: x / r and x * r keep the sign of infinity,
    # and the additive terms are finite, so no NaN enters the distribution.
    return logits


def path_rows(parents: Sequence[int]) -> torch.Tensor:  # [n + 1, n] bool
    """rows[r, j]: node j is on the path before position r of a block's verification.

    Row 0 is the position after the committed tokens (no node before it); row i + 1 the position
    after node i, preceded by node i and its ancestors. A chain's parents give the lower triangle.
    """
    return torch.cat([torch.zeros(1, len(parents), dtype=torch.bool), ancestor_mask(parents)])


class LogitsTransform:
    """One request's penalties over one vocabulary, applied at any positions after any prefix.

    The counts of the committed sequence are kept incrementally; a sequence that is not an
    extension of the last one (a drafter's rollback) is counted afresh.
    """

    def __init__(self, penalties: Penalties, prompt_ids: Sequence[int], vocab_size: int, device: torch.device | str = "cpu") -> None:
        self.penalties = penalties
        self.prompt_length = len(prompt_ids)
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self.prompt_seen = self._counts(prompt_ids) > 0  # [vocab]
        self.bias = None  # [vocab]
        if penalties.logit_bias:
            self.bias = torch.zeros(vocab_size, device=self.device)
            self.bias[torch.tensor(list(penalties.logit_bias), device=self.device)] = torch.tensor(
                list(penalties.logit_bias.values()), device=self.device
            )
        self._sequence: list[int] = list(prompt_ids)
        self._generated = torch.zeros(vocab_size, device=self.device)  # [vocab] counts of sequence[prompt_length:]

    @staticmethod
    def for_request(
        penalties: Penalties, prompt_ids: Sequence[int], vocab_size: int, device: torch.device | str = "cpu"
    ) -> LogitsTransform | None:
        """The transform, or None when the penalties change nothing (no work per position)."""
        return None if penalties.is_identity else LogitsTransform(penalties, prompt_ids, vocab_size, device)

    def __call__(
        self,
        logits: torch.Tensor,  # [m, vocab] logits at m positions after `sequence`
        sequence: Sequence[int],  # the committed tokens, prompt first
        node_ids: Sequence[int] = (),  # [n] candidate tokens after the committed ones
        paths: torch.Tensor | None = None,  # [m, n] bool: the nodes before each position (path_rows); None: none
    ) -> torch.Tensor:  # [m, vocab]
        counts = self._generated_counts(sequence).expand(logits.shape[0], -1)  # [m, vocab]
        if node_ids:
            one_hot = torch.zeros(len(node_ids), self.vocab_size, device=self.device)
            one_hot[torch.arange(len(node_ids)), torch.tensor(list(node_ids), device=self.device)] = 1.0  # [n, vocab]
            counts = counts + paths.to(one_hot) @ one_hot
        seen = self.prompt_seen | (counts > 0)
        return apply_penalties(logits, counts.to(logits.device), seen.to(logits.device), self.bias, self.penalties)

    def _generated_counts(self, sequence: Sequence[int]) -> torch.Tensor:  # [vocab]
        known = len(self._sequence)
        if len(sequence) < known or list(sequence[:known]) != self._sequence:
            self._sequence = list(sequence[: self.prompt_length])
            self._generated = torch.zeros(self.vocab_size, device=self.device)
            known = self.prompt_length
        if len(sequence) > known:
            self._generated += self._counts(sequence[known:])
            self._sequence.extend(sequence[known:])
        return self._generated

    def _counts(self, token_ids: Sequence[int]) -> torch.Tensor:  # [vocab] float
        ids = torch.tensor(list(token_ids), dtype=torch.long, device=self.device)
        return torch.bincount(ids, minlength=self.vocab_size)[: self.vocab_size].float()
