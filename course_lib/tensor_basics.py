"""Tensor skills every later lesson leans on: broadcasting, batched matmul, gather by index.

The finished versions of the warm-up exercise set ex00.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .validation import check_batch_broadcast, check_floating, check_tensor

__all__ = ["batched_matmul", "pairwise_sq_distances", "last_token"]


def batched_matmul(a: Tensor, b: Tensor) -> Tensor:
    """(..., n, k) @ (..., k, m) -> (..., n, m), written with broadcasting and a sum.

    The leading batch dimensions broadcast as in `torch.matmul`.
    """
    check_tensor(a, "a", min_ndim=2, shape_hint="(..., n, k)")
    check_tensor(b, "b", min_ndim=2, shape_hint="(..., k, m)")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"a has k={a.shape[-1]} columns but b has k={b.shape[-2]} rows; "
            f"a (..., n, k) and b (..., k, m) must agree on k "
            f"(shapes {tuple(a.shape)} and {tuple(b.shape)})"
        )
    check_batch_broadcast(a, "a", b, "b")
    # (..., n, k, 1) * (..., 1, k, m) -> (..., n, k, m), summed over k -> (..., n, m)
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(dim=-2)


def pairwise_sq_distances(x: Tensor, y: Tensor) -> Tensor:
    """Squared Euclidean distances: x (..., n, d), y (..., m, d) -> (..., n, m)."""
    check_tensor(x, "x", min_ndim=2, shape_hint="(..., n, d)")
    check_tensor(y, "y", min_ndim=2, shape_hint="(..., m, d)")
    check_floating(x, "x")
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"x has d={x.shape[-1]} but y has d={y.shape[-1]}; they must share d")
    check_batch_broadcast(x, "x", y, "y")
    # (..., n, 1, d) - (..., 1, m, d) -> (..., n, m, d)
    diff = x.unsqueeze(-2) - y.unsqueeze(-3)
    return (diff * diff).sum(dim=-1)


def last_token(x: Tensor, lengths: Tensor) -> Tensor:
    """The last real (non-padding) vector of each sequence.

    x: (batch, seq, d); lengths: long (batch,), each in 1..seq  ->  (batch, d)
    """
    check_tensor(x, "x", ndim=3, shape_hint="(batch, seq, d)")
    check_tensor(
        lengths, "lengths", ndim=1, shape_hint="(batch,)", dtype=(torch.int64, torch.int32)
    )
    if lengths.shape[0] != x.shape[0]:
        raise ValueError(f"lengths has {lengths.shape[0]} entries but x has batch={x.shape[0]}")
    if (lengths < 1).any() or (lengths > x.shape[1]).any():
        raise ValueError(f"every length must be in 1..{x.shape[1]} (seq), got {lengths.tolist()}")
    batch_index = torch.arange(x.shape[0], device=x.device)
    return x[batch_index, lengths.long() - 1]  # (batch, d)
