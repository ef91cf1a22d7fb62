"""Core results -> GenerateResponse / VerifyResponse messages."""

from __future__ import annotations

from specdec.acceptance import RoundVerdict
from specdec.enums import TokenSource
from specdec.output import GenerationChunk, TokenLogprob
from specdec.request import GenerationRequest, GenerationStats
from specdec.serving.rpc.convert import source_to_proto
from specdec.target_session import TargetSession
from specdec.v1 import verify_pb2


def generate_response(
    chunk: GenerationChunk, request: GenerationRequest, stats: GenerationStats, completion_tokens: int, tokenizer, provenance: bool = False
) -> verify_pb2.GenerateResponse:
    message = verify_pb2.GenerateResponse(token_ids=chunk.token_ids, text=chunk.text, seed=request.seed)
    message.logprobs.extend(_logprob(entry, tokenizer) for entry in chunk.logprobs)
    if provenance:
        message.tokens.extend(
            verify_pb2.TokenProvenance(source=source_to_proto(source), text=text)
            for source, text in zip(chunk.sources, chunk.token_texts, strict=True)
        )
    if chunk.round is not None:
        info = chunk.round
        message.round.CopyFrom(
            verify_pb2.RoundStats(
                num_candidates=info.num_candidates,
                num_accepted=info.num_accepted,
                draft_ms=info.draft_ms,
                target_ms=info.target_ms,
                transport_ms=info.transport_ms,
                fallback=info.fallback,
            )
        )
    # Every message: the counts so far, so the gateway can stream usage (stream_options.continuous_usage_stats).
    message.usage.CopyFrom(_usage(len(request.prompt_ids), completion_tokens))
    message.usage.accepted_prediction_tokens = stats.accepted_prediction_tokens
    message.usage.rejected_prediction_tokens = stats.rejected_prediction_tokens
    if chunk.finish_reason is not None:
        message.finish_reason = chunk.finish_reason
        message.summary.CopyFrom(
            verify_pb2.SpeculativeSummary(
                enabled=request.speculative,
                rounds=stats.rounds,
                draft_tokens=stats.draft_tokens,
                accepted_tokens=stats.accepted_tokens,
                acceptance_rate=stats.acceptance_rate,
                fallback=stats.fallback,
                drafters=[
                    verify_pb2.DrafterSummary(
                        drafter=source_to_proto(TokenSource(name)),
                        blocks=counts.blocks,
                        draft_tokens=counts.draft_tokens,
                        accepted_tokens=counts.accepted_tokens,
                    )
                    for name, counts in stats.drafters.items()
                ],
            )
        )
    return message


def verify_response(session: TargetSession, verdict: RoundVerdict | None, chunk: GenerationChunk | None) -> verify_pb2.VerifyResponse:
    """The answer to `open` (verdict None: prompt ids, seed, budget) or to one candidate block."""
    request = session.request
    message = verify_pb2.VerifyResponse(seed=request.seed, max_candidates=0 if session.finished else session.draft_budget())
    if verdict is None:
        message.prompt_ids.extend(request.prompt_ids)
        return message
    message.num_accepted = verdict.num_accepted
    message.token_ids.extend(chunk.token_ids)
    message.text = chunk.text
    if chunk.finish_reason is not None:
        message.finish_reason = chunk.finish_reason
        message.usage.CopyFrom(_usage(len(request.prompt_ids), session.output.num_generated))
    return message


def _usage(prompt_tokens: int, completion_tokens: int) -> verify_pb2.Usage:
    return verify_pb2.Usage(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )


def _logprob(entry: TokenLogprob, tokenizer) -> verify_pb2.TokenLogprob:
    message = verify_pb2.TokenLogprob(token_id=entry.token_id, token=tokenizer.decode([entry.token_id]), logprob=entry.logprob)
    for token_id, logprob in entry.top:
        message.top.add(token_id=token_id, token=tokenizer.decode([token_id]), logprob=logprob)
    return message
