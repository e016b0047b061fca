"""Positional information (lesson 04): sinusoidal encodings, learned positions and RoPE.

Attention alone is permutation-equivariant: shuffle the tokens and the outputs are shuffled the
same way, so "dog bites man" and "man bites dog" give the same set of vectors. Positions must be
put in by hand. Three ways:

- `sinusoidal_positional_encoding` / `SinusoidalPositionalEncoding` (the original Transformer):
  pair (2i, 2i+1) of the encoding is (sin, cos) of position * 10000^(-2i/d_model). The frequency
  changes across the *dimensions* (columns), from 1 down to nearly 1/10000; every position uses
  all of them. Shifting the position by k rotates each pair by a fixed angle:
  `relative_shift_matrix`.
- `LearnedPositionalEmbedding` (BERT, GPT-2): one trained vector per position, nothing beyond
  max_len.
- `apply_rope` (rotary embeddings, most modern LLMs): rotate q and k themselves, so that the
  score q·k depends only on the offset between the two positions.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor, nn

from .validation import (
    at_the_door,
    check_dropout,
    check_even,
    check_floating,
    check_positions_input,
    check_positive_int,
    check_size,
    check_tensor,
    door,
    is_number,
)

__all__ = [
    "sinusoid_frequencies",
    "sinusoidal_positional_encoding",
    "relative_shift_matrix",
    "apply_rope",
    "apply_rope_half",
    "rope_half_permutation",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
]

BASE = 10000.0


def _check_base(base: object) -> None:
    """The base of the angles (10000 unless given) must be a number greater than 1."""
    if not is_number(base) or not base > 1:
        raise ValueError(f"base must be a number > 1 (10000 by default), got {base!r}")


@door
def sinusoid_frequencies(d_model: int, base: float = BASE) -> Tensor:
    """(d_model / 2,) float64: the angular frequency base^(-2i/d_model) of pair (2i, 2i+1).

    Pair 0 turns by 1 radian per position (wavelength 2π); the last pair turns slowest
    (wavelength close to base·2π; base is 10000 unless given).
    """
    if at_the_door():
        check_even(d_model)
        _check_base(base)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model / 2,) = 0, 2, 4, ...
    return float(base) ** (-two_i / d_model)


def sinusoidal_positional_encoding(
    seq_len: int, d_model: int, *, dtype: torch.dtype = torch.float32, device=None
) -> Tensor:
    """(seq_len, d_model): row p is the encoding of position p (positions start at 0).

    PE[p, 2i] = sin(p * 10000^(-2i/d_model)) and PE[p, 2i+1] = cos(p * 10000^(-2i/d_model)).
    Computed in float64, returned as `dtype` (float32 by default).
    """
    check_positive_int(seq_len, "seq_len")
    check_even(d_model)
    positions = torch.arange(seq_len, dtype=torch.float64)  # (seq_len,)
    angles = positions[:, None] * sinusoid_frequencies(d_model)[None, :]  # (seq_len, d_model/2)
    pe = torch.empty(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)  # even columns
    pe[:, 1::2] = torch.cos(angles)  # odd columns
    return pe.to(dtype=dtype, device=device)


def relative_shift_matrix(
    offset: int | float, d_model: int, *, dtype: torch.dtype = torch.float32, device=None
) -> Tensor:
    """(d_model, d_model) M with PE[p + offset] = PE[p] @ M.T for every position p.

    M is block-diagonal: for pair (2i, 2i+1), with angle a = offset * 10000^(-2i/d_model),
    the block is [[cos a, sin a], [-sin a, cos a]] (a rotation; it does not depend on p).
    """
    if not is_number(offset):
        raise TypeError(
            f"offset must be an int or float (a shift in positions), got {type(offset).__name__}"
        )
    if not math.isfinite(offset):
        raise ValueError(f"offset must be finite, got {offset}")
    check_even(d_model)
    angles = offset * sinusoid_frequencies(d_model)  # (d_model / 2,)
    cos, sin = torch.cos(angles), torch.sin(angles)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    even = torch.arange(0, d_model, 2)
    m[even, even] = cos
    m[even, even + 1] = sin
    m[even + 1, even] = -sin
    m[even + 1, even + 1] = cos
    return m.to(dtype=dtype, device=device)


@functools.lru_cache(maxsize=64)
def _rope_table(seq_len: int, d: int, base: float, device: torch.device, dtype: torch.dtype):
    """cos and sin (seq_len, d / 2) of the angles p * base^(-2i/d) for p = 0 .. seq_len - 1,
    computed once per length, width, base, device and dtype (every layer of a model reuses them)."""
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * sinusoid_frequencies(d, base)
    return torch.cos(angles).to(device, dtype), torch.sin(angles).to(device, dtype)


@door
def apply_rope(x: Tensor, positions: Tensor | None = None, base: float = BASE) -> Tensor:
    """Rotary position embedding: (..., seq, d) -> (..., seq, d), same dtype as x.

    Pair (2i, 2i+1) of the vector at position p is rotated by the angle
    p * base^(-2i/d):  (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos).
    `positions` is a 1-D tensor of length seq (ints or floats), or None for 0, 1, ..., seq-1.
    `base` is 10000 as in Su et al. (RoFormer) and Llama 1-2; Llama 3 uses 500000, and a larger
    base turns the slow pairs more slowly, for longer contexts. Apply it to queries and keys
    (not values): then q·k depends only on the offset.
    """
    if at_the_door():
        check_tensor(x, "x", min_ndim=2, shape_hint="(..., seq, d)")
        check_floating(x, "x")
        seq_len, d = x.shape[-2], x.shape[-1]
        check_even(d, "the last dimension d of x")
        _check_base(base)
        if positions is not None:
            check_tensor(positions, "positions", ndim=1, shape_hint="(seq,)")
            why = f"x has seq={seq_len} (x has shape {tuple(x.shape)}); give one position per token"
            check_size(positions, "positions", 0, seq_len, "entries", why)
            if positions.dtype == torch.bool or positions.is_complex():
                raise TypeError(f"positions must hold ints or floats, got {positions.dtype}")
    seq_len, d = x.shape[-2], x.shape[-1]
    if positions is None:  # 0, 1, ..., seq-1: the table is computed once and kept
        cos, sin = _rope_table(seq_len, d, float(base), x.device, x.dtype)  # (seq, d / 2) each
    else:  # computed where x is, with no copy from the CPU
        freqs = sinusoid_frequencies(d, base).to(x.device)  # (d / 2,) float64
        angles = positions.detach().to(x.device, torch.float64)[:, None] * freqs  # (seq, d / 2)
        cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]  # (..., seq, d / 2) each
    rotated = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)  # (..., seq, d/2, 2)
    return rotated.flatten(-2)  # (..., seq, d), pairs interleaved again


def apply_rope_half(x: Tensor, positions: Tensor | None = None, base: float = BASE) -> Tensor:
    """RoPE in the rotate-half layout of GPT-NeoX and Llama: (..., seq, d) -> (..., seq, d).

    Feature i is paired with feature i + d/2 (not 2i with 2i+1), and pair i at position p is
    rotated by p * base^(-2i/d) (base 10000 unless given):
    (x_i, x_{i+d/2}) -> (x_i cos - x_{i+d/2} sin, x_i sin + x_{i+d/2} cos).
    It is `apply_rope` up to a fixed permutation of the features:
    apply_rope_half(x)[..., perm] == apply_rope(x[..., perm]) with perm =
    rope_half_permutation(d), so q·k still depends only on the offset.
    """
    check_tensor(x, "x", min_ndim=2, shape_hint="(..., seq, d)")
    check_floating(x, "x")
    d = x.shape[-1]
    check_even(d, "the last dimension d of x")
    perm = rope_half_permutation(d).to(x.device)
    inverse = torch.argsort(perm)
    return apply_rope(x[..., perm], positions, base)[..., inverse]


def rope_half_permutation(d: int) -> Tensor:
    """(d,) long: the feature order [0, d/2, 1, d/2 + 1, ...] that turns the rotate-half layout
    into the interleaved one (pair (i, i + d/2) becomes pair (2i, 2i+1))."""
    check_even(d, "d")
    return torch.arange(d).view(2, d // 2).t().reshape(d)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal encoding to token embeddings (the original Transformer).

    forward(x, start_pos=0): x (batch, seq, d_model) -> x + PE[start_pos : start_pos + seq],
    then dropout. No parameters: the table is a buffer (not saved in the state_dict).
    `start_pos` lets a decoder with a KV cache encode a new token at its true position.
    """

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        check_even(d_model)
        check_positive_int(max_len, "max_len")
        check_dropout(dropout)
        self.d_model, self.max_len = d_model, max_len
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False
        )  # (max_len, d_model)

    @door
    def forward(self, x: Tensor, start_pos: int = 0) -> Tensor:
        if at_the_door():
            check_positions_input(x, self.d_model, self.max_len, start_pos)
        seq_len = x.shape[1]
        pe = self.pe[start_pos : start_pos + seq_len].to(x.dtype)  # (seq, d_model)
        return self.dropout(x + pe)  # (batch, seq, d_model), PE broadcast over the batch

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


class LearnedPositionalEmbedding(nn.Module):
    """Adds one trained vector per position (BERT, GPT-2); nothing exists beyond max_len.

    forward(x, start_pos=0): x (batch, seq, d_model) -> x + P[start_pos : start_pos + seq],
    where P = self.embedding.weight (max_len, d_model), initialised N(0, 0.02²).
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        check_positive_int(max_len, "max_len")
        check_positive_int(d_model, "d_model")
        self.d_model, self.max_len = d_model, max_len
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=0.02)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a bare nn.Embedding's name ("weight") loads too: it is the same table
        if prefix + "weight" in state_dict:
            state_dict[prefix + "embedding.weight"] = state_dict.pop(prefix + "weight")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @door
    def forward(self, x: Tensor, start_pos: int = 0) -> Tensor:
        if at_the_door():
            check_positions_input(x, self.d_model, self.max_len, start_pos)
        seq_len = x.shape[1]
        positions = torch.arange(start_pos, start_pos + seq_len, device=x.device)  # (seq,)
        return x + self.embedding(positions).to(x.dtype)  # (batch, seq, d_model)
