"""Gumbel noise keyed by (seed, absolute position, token id): the basis of coupled sampling.

Target-only sampling with a seed is x_t = argmax_v(log p_t(v) + G(seed, t, v)). Because G is a
pure function of its key (no generator state), a drafter and the verifier that agree on the seed
draw the *same* noise at every position, whatever was proposed or rejected before, and the same
bits come out on CPU and CUDA: the hash uses only exact integer arithmetic.
"""

from __future__ import annotations

from functools import lru_cache

import torch

_MASK32 = 0xFFFFFFFF
_TWO_POW_32 = float(2**32)


def _mix32(values: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xorshift-multiply, bijective on [0, 2**32)).

    NOTE: both multipliers are odd and below 2**31, so value * multiplier < 2**63 never
    overflows int64: the result is exact, hence identical on every device.
    """
    values = values ^ (values >> 16)
    values = (values * 0x7FEB352D) & _MASK32
    values = values ^ (values >> 15)
    values = (values * 0x2C1B3C6D) & _MASK32
    return values ^ (values >> 16)


@lru_cache(maxsize=8)
def _token_keys(vocab_size: int, device: torch.device) -> torch.Tensor:  # [vocab]
    token_ids = torch.arange(vocab_size, dtype=torch.int64, device=device)
    return _mix32(_mix32(token_ids ^ 0x5BD1E995) ^ 0x68E31DA4)


def _position_keys(seed: int, positions: torch.Tensor) -> torch.Tensor:  # [n, 1]
    seed_bits = seed & 0xFFFFFFFFFFFFFFFF
    key = _mix32(torch.tensor([seed_bits & _MASK32], dtype=torch.int64))
    key = _mix32(key ^ (seed_bits >> 32)).to(positions.device)
    return _mix32(_mix32(key ^ (positions.long() & _MASK32)) + 0x9E3779B9 & _MASK32).unsqueeze(-1)


def keyed_uniform(
    seed: int,
    positions: torch.Tensor,  # [n] absolute positions in the token sequence
    vocab_size: int,
) -> torch.Tensor:  # [n, vocab] float64 in the open interval (0, 1)
    bits = _mix32(_position_keys(seed, positions) ^ _token_keys(vocab_size, positions.device))
    return (bits.double() + 0.5) / _TWO_POW_32


def keyed_gumbel(
    seed: int,
    positions: torch.Tensor,  # [n]
    vocab_size: int,
) -> torch.Tensor:  # [n, vocab] float64, standard Gumbel
    return -torch.log(-torch.log(keyed_uniform(seed, positions, vocab_size)))


def keyed_gumbel_at(
    seed: int,
    position: int,
    token_ids: torch.Tensor,  # [n] int64 token ids
) -> torch.Tensor:  # [n] float64: keyed_gumbel(seed, [position], vocab)[0, token_ids]
    """The keyed noise at a few token ids only (a sparse draft distribution's support)."""
    token_keys = _mix32(_mix32(token_ids.long() ^ 0x5BD1E995) ^ 0x68E31DA4)
    bits = _mix32(_position_keys(seed, torch.tensor([position], device=token_ids.device))[0] ^ token_keys)
    return -torch.log(-torch.log((bits.double() + 0.5) / _TWO_POW_32))


def gumbel_argmax(
    probs: torch.Tensor,  # [n, vocab]
    gumbel: torch.Tensor,  # [n, vocab]
) -> torch.Tensor:  # [n] int64
    """argmax_v(log probs + G): an exact sample of `probs` when G is standard Gumbel noise.

    NOTE: tokens with probability 0 have log-probability -inf and can never win.
    """
    scores = torch.log(probs.double()) + gumbel.to(probs.device)
    return scores.argmax(dim=-1)
