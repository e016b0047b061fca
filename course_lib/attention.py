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
import torch.nn.functional as F
from torch import Tensor

from .validation import (
    at_the_door,
    check_bool_mask,
    check_dropout,
    check_flag,
    check_floating,
    check_qkv,
    check_same_dtype,
    check_tensor,
    door,
    is_number,
)

__all__ = ["softmax", "scaled_dot_product_attention", "self_attention", "distance_biased_attention"]


@door
def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Numerically stable softmax: exp(x - max) / sum(exp(x - max)) along `dim`.

    Subtracting the maximum changes nothing mathematically (it cancels in the ratio) but keeps
    exp from overflowing to inf for large inputs such as 1000.
    """
    if at_the_door():
        check_tensor(x, "x", min_ndim=1, allow_empty=True)
        check_floating(x, "x")
        if not -x.dim() <= dim < x.dim():
            raise ValueError(f"dim={dim} is out of range for x with {x.dim()} dimensions")
    shifted = x - x.amax(dim=dim, keepdim=True)
    exp = shifted.exp()
    return exp / exp.sum(dim=dim, keepdim=True)


@door
def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    need_weights: bool = True,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor | None]:
    """softmax(q k^T / sqrt(d_k)) v.

    q: (..., n_q, d_k), k: (..., n_k, d_k), v: (..., n_k, d_v),
    mask: bool, broadcastable to (..., n_q, n_k), True = may attend.
    is_causal=True (instead of a mask): query i is token n_k - n_q + i of the sequence and sees
    the keys up to itself (n_q = n_k is the usual causal mask; fewer queries than keys are the
    newest tokens after cached ones, lesson 09).
    Returns (output (..., n_q, d_v), weights (..., n_q, n_k)). need_weights=False computes the
    same output with PyTorch's fused kernel, which keeps no weights (faster, used for training)
    and returns (output, None). dropout_p drops attention weights (training only).
    """
    if at_the_door():
        check_qkv(q, k, v)
        check_flag(is_causal, "is_causal")
        check_flag(need_weights, "need_weights")
        target = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
        if mask is not None:
            check_bool_mask(mask, "mask", target, "(..., n_q, n_k)")
            if is_causal:
                raise ValueError(
                    "give either mask or is_causal=True, not both (combine the "
                    "causal mask into mask instead)"
                )
        if dropout_p:
            check_dropout(dropout_p, "dropout_p")
    n_q, n_k = q.shape[-2], k.shape[-2]
    if is_causal and (need_weights or n_q != n_k):
        if n_q == 1:  # the newest token sees every key: no mask at all
            is_causal = False
        elif not need_weights and n_q == n_k:
            pass  # the fused kernel skips the future keys without a mask tensor
        else:  # True on and below the diagonal, shifted right by the n_k - n_q earlier tokens
            mask = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril(n_k - n_q)
            is_causal = False
    # A row with every key masked would be softmax(all -inf) = 0/0 = NaN. Such rows attend to
    # every key instead (finite), then get zero weights and a zero output: no NaN forward, and
    # none in the gradient.
    any_key = None if mask is None else mask.any(dim=-1, keepdim=True)  # (..., n_q, 1)
    if not need_weights:
        attn_mask = None if mask is None else mask | ~any_key
        output = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal
        )
        return (output if any_key is None else output.masked_fill(~any_key, 0.0)), None
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., n_q, n_k)
    if mask is None:
        weights = softmax(scores, dim=-1)
    else:
        scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~any_key, 0.0)
        weights = softmax(scores, dim=-1).masked_fill(~mask, 0.0)
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    return dropped @ v, weights  # (..., n_q, d_v), (..., n_q, n_k)


def self_attention(
    x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Self-attention with learned projections: q = x W_Q, k = x W_K, v = x W_V.

    x: (..., n, d_model); w_q, w_k: (d_model, d_k); w_v: (d_model, d_v).
    Returns (output (..., n, d_v), weights (..., n, n)).
    """
    check_tensor(x, "x", min_ndim=2, shape_hint="(..., n, d_model)")
    check_floating(x, "x")
    for w, name in ((w_q, "w_q"), (w_k, "w_k"), (w_v, "w_v")):
        check_tensor(w, name, ndim=2, shape_hint="(d_model, d_out)")
        if w.shape[0] != x.shape[-1]:
            raise ValueError(
                f"{name} has {w.shape[0]} rows but x has d_model={x.shape[-1]}; {name} must be "
                f"(d_model, d_out) so that x @ {name} works (got {tuple(w.shape)})"
            )
        check_same_dtype(
            (w, x), (name, "x"), f"x @ {name} needs one dtype, e.g. {name}.to(x.dtype)"
        )
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (..., n, d_k), (..., n, d_k), (..., n, d_v)
    return scaled_dot_product_attention(q, k, v, mask)


def distance_biased_attention(
    q: Tensor, k: Tensor, v: Tensor, slope: float
) -> tuple[Tensor, Tensor]:
    """Attention with an additive penalty on distance (the idea of ALiBi, Press et al. 2022).

    scores[i, j] = q_i . k_j / sqrt(d_k) - slope * |i - j|, with query i at position i and key j
    at position j (both counted from 0), then softmax over the keys and a weighted sum of v.
    slope = 0 is plain scaled dot-product attention; a larger slope favours nearby keys.
    q: (..., n_q, d_k), k: (..., n_k, d_k), v: (..., n_k, d_v), slope >= 0.
    Returns (output (..., n_q, d_v), weights (..., n_q, n_k)).
    """
    check_qkv(q, k, v)
    if not is_number(slope) or slope < 0:
        raise ValueError(f"slope must be a number >= 0, got {slope!r}")
    n_q, n_k = q.shape[-2], k.shape[-2]
    i = torch.arange(n_q, device=q.device)[:, None]  # (n_q, 1) query positions
    j = torch.arange(n_k, device=q.device)[None, :]  # (1, n_k) key positions
    bias = -slope * (i - j).abs().to(q.dtype)  # (n_q, n_k): 0 on the diagonal, more negative away
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias  # (..., n_q, n_k)
    weights = softmax(scores, dim=-1)
    return weights @ v, weights
