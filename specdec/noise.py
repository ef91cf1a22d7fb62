"""Gumbel noise keyed by (seed, absolute position, token id): the basis of coupled sampling.

Target-only sampling with a seed is x_t = argmax_v(log p_t(v) + G(seed, t, v)). Because G is a
pure function of its key (no generator state), a drafter and the verifier that agree on the seed
draw the *same* noise at every position, whatever was proposed or rejected before, and the same
bits come out on CPU and CUDA: the hash uses only exact integer arithmetic.
"""

from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF
_TWO_POW_53 = float(2**53)


def _mul32(values: torch.Tensor, constant: int) -> torch.Tensor:
    """(values * constant) mod 2**32 for values < 2**32, without overflowing int64."""
    low = (values & 0xFFFF) * constant
    high = ((values >> 16) * constant) & 0xFFFF
    return (low + (high << 16)) & _MASK32


def _mix32(values: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser: a bijection that scrambles every input bit."""
    values = values ^ (values >> 16)
    values = _mul32(values, 0x85EBCA6B)
    values = values ^ (values >> 13)
    values = _mul32(values, 0xC2B2AE35)
    return values ^ (values >> 16)


def _position_keys(seed: int, positions: torch.Tensor, stream: int) -> torch.Tensor:  # [n, 1]
    seed_bits = seed & 0xFFFFFFFFFFFFFFFF
    key = _mix32(torch.tensor([(seed_bits & _MASK32) ^ (stream * 0x9E3779B9 & _MASK32)], dtype=torch.int64))
    key = _mix32(key ^ (seed_bits >> 32))
    key = key.to(positions.device)
    return _mix32(key ^ _mix32(positions.long() & _MASK32)).unsqueeze(-1)


def keyed_uniform(
    seed: int,
    positions: torch.Tensor,  # [n] absolute positions in the token sequence
    vocab_size: int,
) -> torch.Tensor:  # [n, vocab] float64 in the open interval (0, 1)
    token_ids = torch.arange(vocab_size, dtype=torch.int64, device=positions.device)
    token_keys = _mix32(token_ids ^ 0x5BD1E995)
    # Two independent 32-bit hashes give 53 random bits, the full precision of a float64.
    high = _mix32(_position_keys(seed, positions, stream=1) ^ token_keys) >> 6  # 26 bits
    low = _mix32(_position_keys(seed, positions, stream=2) ^ token_keys) >> 5  # 27 bits
    bits = (high << 27) | low
    return (bits.double() + 0.5) / _TWO_POW_53


def keyed_gumbel(
    seed: int,
    positions: torch.Tensor,  # [n]
    vocab_size: int,
) -> torch.Tensor:  # [n, vocab] float64, standard Gumbel
    return -torch.log(-torch.log(keyed_uniform(seed, positions, vocab_size)))


def gumbel_argmax(
    probs: torch.Tensor,  # [n, vocab]
    gumbel: torch.Tensor,  # [n, vocab]
) -> torch.Tensor:  # [n] int64
    """argmax_v(log probs + G): an exact sample of `probs` when G is standard Gumbel noise.

    NOTE: tokens with probability 0 have log-probability -inf and can never win.
    """
    scores = torch.log(probs.double()) + gumbel.to(probs.device)
    return scores.argmax(dim=-1)
