"""Scaled dot-product attention, built from its parts (lesson 02).

    scores  = q @ k^T / sqrt(d_k)          (..., n_q, n_k)
    weights = softmax(scores) over keys     each row sums to 1
    output  = weights @ v                   (..., n_q, d_v)

Masks are boolean and mean **True = may attend**, as in
`torch.nn.functional.scaled_dot_product_attention` (and the opposite of `nn.MultiheadAttention`,
see lesson 05). A query row whose keys are all masked gets zero weights and a zero output, never
NaN.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .validation import check_bool_mask, check_floating, check_same_last_dim, check_tensor

__all__ = ["softmax", "scaled_dot_product_attention", "self_attention", "distance_biased_attention"]


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Numerically stable softmax: exp(x - max) / sum(exp(x - max)) along `dim`.

    Subtracting the maximum changes nothing mathematically (it cancels in the ratio) but keeps
    exp from overflowing to inf for large inputs such as 1000.
    """
    check_tensor(x, "x", min_ndim=1, allow_empty=True)
    check_floating(x, "x")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for x with {x.dim()} dimensions")
    shifted = x - x.amax(dim=dim, keepdim=True)
    exp = shifted.exp()
    return exp / exp.sum(dim=dim, keepdim=True)


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    check_tensor(q, "q", min_ndim=2, shape_hint="(..., n_q, d_k)")
    check_tensor(k, "k", min_ndim=2, shape_hint="(..., n_k, d_k)")
    check_tensor(v, "v", min_ndim=2, shape_hint="(..., n_k, d_v)")
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        check_floating(t, name)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    check_same_last_dim(q, "q", k, "k", "d_k")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k has n_k={k.shape[-2]} keys but v has {v.shape[-2]} values; every key needs one "
            f"value (shapes {tuple(k.shape)} and {tuple(v.shape)})"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of q {tuple(q.shape[:-2])}, k {tuple(k.shape[:-2])} and "
            f"v {tuple(v.shape[:-2])} do not broadcast"
        ) from None


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d_k)) v.

    q: (..., n_q, d_k), k: (..., n_k, d_k), v: (..., n_k, d_v),
    mask: bool, broadcastable to (..., n_q, n_k), True = may attend.
    Returns (output (..., n_q, d_v), weights (..., n_q, n_k)).
    """
    _check_qkv(q, k, v)
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., n_q, n_k)
    if mask is None:
        weights = softmax(scores, dim=-1)
    else:
        check_bool_mask(mask, "mask", scores.shape, "(..., n_q, n_k)")
        scores = scores.masked_fill(~mask, float("-inf"))
        # A row with every key masked would be softmax(all -inf) = 0/0 = NaN. Give such rows
        # finite scores, then zero their weights: no NaN forward, and none in the gradient.
        any_key = mask.any(dim=-1, keepdim=True)
        weights = softmax(scores.masked_fill(~any_key, 0.0), dim=-1).masked_fill(~mask, 0.0)
    return weights @ v, weights  # (..., n_q, d_v), (..., n_q, n_k)


def self_attention(
    x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Self-attention with learned projections: q = x W_Q, k = x W_K, v = x W_V.

    x: (..., n, d_model); w_q, w_k: (d_model, d_k); w_v: (d_model, d_v).
    Returns (output (..., n, d_v), weights (..., n, n)).
    """
    check_tensor(x, "x", min_ndim=2, shape_hint="(..., n, d_model)")
    for w, name in ((w_q, "w_q"), (w_k, "w_k"), (w_v, "w_v")):
        check_tensor(w, name, ndim=2, shape_hint="(d_model, d_out)")
        if w.shape[0] != x.shape[-1]:
            raise ValueError(
                f"{name} has {w.shape[0]} rows but x has d_model={x.shape[-1]}; {name} must be "
                f"(d_model, d_out) so that x @ {name} works (got {tuple(w.shape)})"
            )
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (..., n, d_k), (..., n, d_k), (..., n, d_v)
    return scaled_dot_product_attention(q, k, v, mask)


def distance_biased_attention(q: Tensor, k: Tensor, v: Tensor, slope: float
                              ) -> tuple[Tensor, Tensor]:
    """Attention with an additive penalty on distance (the idea of ALiBi, Press et al. 2022).

    scores[i, j] = q_i . k_j / sqrt(d_k) - slope * |i - j|, with query i at position i and key j
    at position j (both counted from 0), then softmax over the keys and a weighted sum of v.
    slope = 0 is plain scaled dot-product attention; a larger slope favours nearby keys.
    q: (..., n_q, d_k), k: (..., n_k, d_k), v: (..., n_k, d_v), slope >= 0.
    Returns (output (..., n_q, d_v), weights (..., n_q, n_k)).
    """
    _check_qkv(q, k, v)
    if isinstance(slope, bool) or not isinstance(slope, (int, float)) or slope < 0:
        raise ValueError(f"slope must be a number >= 0, got {slope!r}")
    n_q, n_k = q.shape[-2], k.shape[-2]
    i = torch.arange(n_q, device=q.device)[:, None]  # (n_q, 1) query positions
    j = torch.arange(n_k, device=q.device)[None, :]  # (1, n_k) key positions
    bias = -slope * (i - j).abs().to(q.dtype)  # (n_q, n_k): 0 on the diagonal, more negative away
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias  # (..., n_q, n_k)
    weights = softmax(scores, dim=-1)
    return weights @ v, weights
