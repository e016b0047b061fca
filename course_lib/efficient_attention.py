"""Attention that does not pay for the n x n matrix (lesson 10).

Full attention (lesson 02) builds a (n_q, n_k) matrix of scores: its memory grows as n^2.
Three answers, one exact and two approximate:

    tiled_attention           exact. Keys and values are visited a block at a time; an online
                              softmax (a running max m, a running sum l and a running output,
                              all rescaled by exp(m_old - m_new) when the max grows) gives the
                              same result as the full softmax. The idea of FlashAttention.
    sliding_window_attention  approximate (Longformer): each query sees only its neighbours,
                              |i - j| <= window. Computed on the band, never on a masked n x n.
    performer_attention       approximate (Performer): exp(q.k) ~ phi(q).phi(k) with positive
                              random features phi, so attention = phi(q) (phi(k)^T v), linear in n.

`sliding_window_mask` is the Longformer pattern as an ordinary (n, n) mask (True = may attend),
with optional global tokens, for use with `course_lib.attention.scaled_dot_product_attention`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from .validation import (
    check_non_negative_int,
    check_positive_int,
    check_qkv,
    check_size,
    check_tensor,
)

__all__ = [
    "tiled_attention",
    "sliding_window_mask",
    "sliding_window_attention",
    "random_feature_projection",
    "performer_features",
    "performer_attention",
]


def tiled_attention(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = False, block_size: int = 128
) -> Tensor:
    """softmax(q k^T / sqrt(d_k)) v, computed tile by tile: never an (n_q, n_k) matrix.

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> output (..., n_q, d_v), equal to
    full attention to float tolerance. causal=True: query i sees keys j <= i (the causal mask
    of lesson 05). The largest temporary is one (block_size, block_size) tile of scores per
    batch element.
    """
    check_qkv(q, k, v)
    check_positive_int(block_size, "block_size")
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = q.new_empty(*batch_shape, n_q, v.shape[-1])  # (..., n_q, d_v)
    for q_start in range(0, n_q, block_size):
        q_block = q[..., q_start : q_start + block_size, :] * scale  # (..., bq, d_k)
        rows = q_block.shape[-2]
        running_max = q.new_full((*batch_shape, rows, 1), float("-inf"))  # m
        running_sum = q.new_zeros((*batch_shape, rows, 1))  # l = sum of exp(score - m)
        acc = q.new_zeros((*batch_shape, rows, v.shape[-1]))  # sum of exp(score - m) v
        # a causal query block ends at q_start + rows - 1: later keys are all masked
        k_end = min(n_k, q_start + rows) if causal else n_k
        for k_start in range(0, k_end, block_size):
            k_block = k[..., k_start : k_start + block_size, :]  # (..., bk, d_k)
            v_block = v[..., k_start : k_start + block_size, :]  # (..., bk, d_v)
            scores = q_block @ k_block.transpose(-2, -1)  # (..., bq, bk): one tile
            if causal and k_start + scores.shape[-1] - 1 > q_start:
                query_pos = torch.arange(q_start, q_start + rows, device=q.device)[:, None]
                key_pos = torch.arange(k_start, k_start + scores.shape[-1], device=q.device)
                scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
            new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
            # a row with no allowed key yet keeps max -inf; exp(-inf - -inf) would be NaN
            safe_max = new_max.masked_fill(new_max == float("-inf"), 0.0)
            correction = (running_max - safe_max).exp()  # rescales what was summed so far
            p = (scores - safe_max).exp()  # (..., bq, bk)
            running_sum = running_sum * correction + p.sum(dim=-1, keepdim=True)
            acc = acc * correction + p @ v_block
            running_max = new_max
        out[..., q_start : q_start + rows, :] = acc / running_sum
    return out


def sliding_window_mask(
    n: int,
    window: int,
    causal: bool = False,
    global_tokens: Sequence[int] | Tensor | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Longformer's pattern: bool (n, n), True = query i may attend to key j.

    Key j is allowed when |i - j| <= window (so 2 * window + 1 keys in the middle of the
    sequence, fewer at its ends); causal=True keeps only i - window <= j <= i. Each index in
    `global_tokens` attends to every position and every position attends to it (still
    subject to the causal rule when causal=True).
    """
    check_positive_int(n, "n")
    check_non_negative_int(window, "window")
    positions = torch.arange(n, device=device)
    offset = positions[:, None] - positions[None, :]  # (n, n): i - j
    mask = offset.abs() <= window
    if global_tokens is not None:
        index = torch.as_tensor(global_tokens, dtype=torch.long, device=device).reshape(-1)
        if index.numel() and (index.min() < 0 or index.max() >= n):
            raise ValueError(f"global_tokens must be positions in [0, n={n}), got {index.tolist()}")
        mask[index, :] = True
        mask[:, index] = True
    if causal:
        mask &= offset >= 0
    return mask


def sliding_window_attention(
    q: Tensor, k: Tensor, v: Tensor, window: int, causal: bool = False
) -> Tensor:
    """Attention restricted to |i - j| <= window, computed on the band only.

    q, k (..., n, d_k), v (..., n, d_v) -> (..., n, d_v); equal to full attention with
    `sliding_window_mask(n, window, causal)`. Memory and time grow as n * (2 * window + 1),
    linearly in n: the scores are stored as (..., n, 2 * window + 1), one row of neighbours per
    query, never as (n, n).
    """
    check_qkv(q, k, v)
    check_non_negative_int(window, "window")
    n = q.shape[-2]
    if k.shape[-2] != n:
        raise ValueError(
            f"sliding-window attention is self-attention: q has n={n} positions "
            f"but k has {k.shape[-2]}"
        )
    width = 2 * window + 1
    pad = (0, 0, window, window)  # pad the sequence axis with `window` rows on both sides
    # (..., n, d, width): row i holds the keys i - window .. i + window (a strided view)
    k_band = torch.nn.functional.pad(k, pad).unfold(-2, width, 1)
    v_band = torch.nn.functional.pad(v, pad).unfold(-2, width, 1)
    scores = (q.unsqueeze(-2) @ k_band).squeeze(-2) / math.sqrt(q.shape[-1])  # (..., n, width)
    offset = torch.arange(-window, window + 1, device=q.device)  # j - i for each band column
    key_pos = torch.arange(n, device=q.device)[:, None] + offset  # (n, width)
    allowed = (key_pos >= 0) & (key_pos < n)  # the padding at the two ends is not a key
    if causal:
        allowed &= offset <= 0
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)  # (..., n, width)
    return (v_band @ weights.unsqueeze(-1)).squeeze(-1)  # (..., n, d_v)


def random_feature_projection(
    num_features: int,
    d_k: int,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """(num_features, d_k) Gaussian directions w for positive random features.

    orthogonal=True (Performer's choice) makes each block of d_k rows orthogonal, with row
    lengths drawn as for Gaussian vectors: same expectation, lower variance.
    """
    check_positive_int(num_features, "num_features")
    check_positive_int(d_k, "d_k")
    gaussian = torch.randn(num_features, d_k, generator=generator, dtype=torch.float64)
    if not orthogonal:
        return gaussian.to(dtype)
    blocks = []
    for start in range(0, num_features, d_k):
        square = torch.randn(d_k, d_k, generator=generator, dtype=torch.float64)
        basis, _ = torch.linalg.qr(square)  # orthonormal columns
        blocks.append(basis.T[: min(d_k, num_features - start)])
    directions = torch.cat(blocks)  # (num_features, d_k), unit rows
    return (directions * gaussian.norm(dim=-1, keepdim=True)).to(dtype)


def performer_features(x: Tensor, projection: Tensor, is_query: bool) -> Tensor:
    """Positive random features phi(x) (..., n, m) with E[phi(q).phi(k)] = exp(q.k).

    phi(x) = exp(w.x - |x|^2 / 2) / sqrt(m) for the m rows w of `projection`. Every feature is
    positive, so the approximate weights are never negative. A constant subtracted inside the
    exp (per query row, or one for all keys) cancels in the attention's normalisation and
    keeps exp from overflowing.
    """
    projected = x @ projection.T  # (..., n, m)
    exponent = projected - (x * x).sum(dim=-1, keepdim=True) / 2
    if is_query:
        exponent = exponent - exponent.amax(dim=-1, keepdim=True)
    else:
        exponent = exponent - exponent.amax(dim=(-2, -1), keepdim=True)
    return exponent.exp() / math.sqrt(projection.shape[0])


def performer_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    num_features: int = 256,
    generator: torch.Generator | None = None,
    projection: Tensor | None = None,
) -> Tensor:
    """Softmax attention approximated with positive random features, in time linear in n.

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v).
    With phi = `performer_features` of q / d_k^(1/4) and k / d_k^(1/4) (so that q.k is divided
    by sqrt(d_k) as in full attention):
        output = phi(q) (phi(k)^T v) / (phi(q) (phi(k)^T 1))
    The brackets are (m, d_v) and (m,): no (n_q, n_k) matrix. More features, smaller error.
    Pass `projection` (num_features, d_k) to reuse the same random directions.
    """
    check_qkv(q, k, v)
    d_k = q.shape[-1]
    if projection is None:
        projection = random_feature_projection(
            num_features, d_k, generator=generator, dtype=q.dtype
        ).to(q.device)
    else:
        check_tensor(projection, "projection", ndim=2, shape_hint="(num_features, d_k)")
        why = f"q has d_k={d_k}; it must be (num_features, d_k)"
        check_size(projection, "projection", 1, d_k, "columns", why)
        projection = projection.to(q.dtype)
    scale = d_k**-0.25
    phi_q = performer_features(q * scale, projection, is_query=True)  # (..., n_q, m)
    phi_k = performer_features(k * scale, projection, is_query=False)  # (..., n_k, m)
    kv = phi_k.transpose(-2, -1) @ v  # (..., m, d_v)
    normaliser = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # (..., n_q, 1)
    return (phi_q @ kv) / normaliser  # (..., n_q, d_v)
