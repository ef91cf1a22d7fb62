"""What a generation emits: stopping rules applied to verified tokens, text deltas, logprobs."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specdec.engines.hf import LoadedModel
from specdec.enums import TokenSource
from specdec.request import GenerationRequest
from specdec.text import IncrementalDetokenizer, StopStringMatcher


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)  # (token id, logprob), best first


@dataclass(frozen=True)
class RoundInfo:
    """One verification round: how many candidates, how many kept, and where the time went."""

    num_candidates: int
    num_accepted: int
    draft_ms: float = 0.0  # the drafter's own compute
    target_ms: float = 0.0  # target forward pass + acceptance
    transport_ms: float = 0.0  # propose wall time minus draft compute (network, queues)
    fallback: bool = False
    chosen_k: int | None = None  # candidates the loop asked the drafter for; None when no drafter was open
    drafter: str | None = None  # which drafter's block the round verified (a TokenSource value); None: no candidates


@dataclass
class GenerationChunk:
    """What one round adds to the output."""

    token_ids: list[int]
    text: str
    finish_reason: str | None = None  # "stop" | "length" once finished
    logprobs: list[TokenLogprob] = field(default_factory=list)
    round: RoundInfo | None = None
    # Per token: the part of `text` released when it was verified (joined, they are `text`, except
    # that a chunk with no token may still release held-back text), and where the token came from.
    token_texts: list[str] = field(default_factory=list)
    sources: list[TokenSource] = field(default_factory=list)


class OutputTracker:
    """Applies EOS, stop strings and max_tokens to the verified tokens, in order.

    EOS never comes before min_tokens (the target's distribution bans it, specdec.min_tokens); with
    ignore_eos it is an ordinary token."""

    def __init__(self, target: LoadedModel, request: GenerationRequest) -> None:
        self.request = request
        self.eos_ids = frozenset() if request.ignore_eos else target.eos_token_ids
        self.detokenizer = IncrementalDetokenizer(target.tokenizer)
        self.stop_matcher = StopStringMatcher(request.stop)
        self.num_generated = 0
        self.finish_reason: str | None = None

    @property
    def remaining(self) -> int:
        return self.request.max_tokens - self.num_generated

    def push(self, token_ids: list[int]) -> GenerationChunk:
        kept, texts = [], []
        for token_id in token_ids:
            if token_id in self.eos_ids:
                self.finish_reason = "stop"
                break
            kept.append(token_id)
            self.num_generated += 1
            text = self.detokenizer.push(token_id)
            # As vLLM: stop strings are looked for only in the text of the tokens after the first min_tokens.
            texts.append(self.stop_matcher.push(text) if self.num_generated > self.request.min_tokens else text)
            if self.stop_matcher.stopped:
                self.finish_reason = "stop"
                break
            if self.remaining <= 0:
                self.finish_reason = "length"
                break
        tail = ""
        if self.finish_reason is not None and not self.stop_matcher.stopped:
            tail = self.stop_matcher.push(self.detokenizer.flush()) + self.stop_matcher.flush()
            if texts:  # text held back until the end is released by the last token
                texts[-1], tail = texts[-1] + tail, ""
        return GenerationChunk(kept, "".join(texts) + tail, self.finish_reason, token_texts=texts)


def token_logprobs(
    logits: torch.Tensor,  # [n, vocab] the target's raw logits at the emitted positions
    token_ids: list[int],  # [n]
    top_n: int,
) -> list[TokenLogprob]:
    """Log-probabilities under the model's own distribution (before sampling transforms)."""
    if not token_ids:
        return []
    logprobs = torch.log_softmax(logits[: len(token_ids)].float(), dim=-1).cpu()
    chosen = logprobs[torch.arange(len(token_ids)), torch.tensor(token_ids)].tolist()
    tops = torch.topk(logprobs, top_n, dim=-1) if top_n > 0 else None
    return [
        TokenLogprob(token_id, chosen[row], list(zip(tops.indices[row].tolist(), tops.values[row].tolist())) if tops is not None else [])
        for row, token_id in enumerate(token_ids)
    ]
