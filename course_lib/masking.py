"""Masks (lesson 05). In course_lib a mask is boolean and **True = may attend**.

PyTorch has both conventions: `F.scaled_dot_product_attention` takes True = may attend, while
`nn.MultiheadAttention` and `nn.Transformer*` take True = blocked. `to_torch_blocked` and
`from_torch_blocked` convert between them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .validation import check_positive_int, check_tensor

__all__ = ["causal_mask", "padding_mask", "combine_masks", "to_torch_blocked", "from_torch_blocked"]


def causal_mask(n: int, device: torch.device | str | None = None) -> Tensor:
    """(n, n) bool, True on and below the diagonal: position i may attend to positions <= i."""
    check_positive_int(n, "n")
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """ids (batch, seq) -> bool (batch, 1, seq), True = a real token (may be attended to).

    The middle 1 broadcasts over the query axis, so the mask applies to every query row.
    """
    check_tensor(ids, "ids", ndim=2, shape_hint="(batch, seq)", dtype=(torch.int64, torch.int32))
    return (ids != pad_id).unsqueeze(-2)  # (batch, 1, seq)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """A position may be attended to only if every mask allows it (logical AND, broadcast)."""
    present = [m for m in masks if m is not None]
    if not present:
        return None
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out


def to_torch_blocked(mask: Tensor | None) -> Tensor | None:
    """course_lib mask (True = may attend) -> nn.MultiheadAttention mask (True = blocked)."""
    return None if mask is None else ~mask


def from_torch_blocked(mask: Tensor | None) -> Tensor | None:
    """An nn.MultiheadAttention/nn.Transformer mask -> course_lib's (True = may attend).

    Accepts PyTorch's boolean masks (True = blocked) and its float masks (0 = attend,
    -inf = blocked, as `nn.Transformer.generate_square_subsequent_mask` makes).
    """
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return ~mask
    if torch.is_floating_point(mask):
        if not ((mask == 0) | (mask == float("-inf"))).all():
            raise ValueError(
                "a float mask can be converted only when it holds 0 (attend) and -inf (blocked); "
                "other values are additive biases, not a mask"
            )
        return mask == 0
    raise TypeError(f"mask must be bool or float, got {mask.dtype}")
