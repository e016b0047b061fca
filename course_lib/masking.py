"""Masks (lesson 05). In course_lib a mask is boolean and **True = may attend**.

    causal_mask(4)                 padding_mask(ids, pad_id)   ids (batch, seq)
    [[T, F, F, F],                 -> (batch, 1, seq): True = a real token, False = padding;
     [T, T, F, F],                    the 1 broadcasts over the query axis
     [T, T, T, F],
     [T, T, T, T]]                 combine_masks(padding, causal) -> (batch, seq, seq)

A mask is applied to the scores *before* the softmax (blocked scores become -inf, so they get
weight exactly 0 and every row still sums to 1); see `course_lib.attention`.

PyTorch has both conventions. `F.scaled_dot_product_attention` takes True = may attend, like
course_lib; `nn.MultiheadAttention` (`attn_mask`, `key_padding_mask`) and `nn.Transformer*`
take True = blocked. Float masks are added to the scores (0 = attend, -inf = blocked).
`to_torch_blocked`, `from_torch_blocked` and `to_additive` convert between them.

`dependency_matrix(f, x)` tests what a mask is for: which input positions each output position
of a function reads. A causal model gives a lower triangle.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .validation import check_boolean, check_positive_int, check_tensor, check_token_id

__all__ = [
    "causal_mask",
    "padding_mask",
    "combine_masks",
    "prefix_lm_mask",
    "to_torch_blocked",
    "from_torch_blocked",
    "to_additive",
    "dependency_matrix",
]


def causal_mask(n: int, device: torch.device | str | None = None) -> Tensor:
    """(n, n) bool, True on and below the diagonal: position i may attend to positions <= i."""
    check_positive_int(n, "n")
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """ids (batch, seq) -> bool (batch, 1, seq), True = a real token (may be attended to).

    The middle 1 broadcasts over the query axis, so the mask applies to every query row.
    """
    check_tensor(ids, "ids", ndim=2, shape_hint="(batch, seq)", dtype=(torch.int64, torch.int32))
    check_token_id(pad_id, "pad_id", "the id of the padding token")
    return (ids != pad_id).unsqueeze(-2)  # (batch, 1, seq)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """A position may be attended to only if every mask allows it (logical AND, broadcast).

    None entries are skipped (no mask = everything allowed); all None gives None.
    E.g. padding (batch, 1, seq) & causal (seq, seq) -> (batch, seq, seq).
    """
    present = [check_boolean(m, f"masks[{i}]") for i, m in enumerate(masks) if m is not None]
    if not present:
        return None
    try:
        torch.broadcast_shapes(*(tuple(m.shape) for m in present))
    except RuntimeError:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(f"the masks' shapes {shapes} do not broadcast together") from None
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out


def prefix_lm_mask(ids: Tensor, prefix_lengths: Tensor, pad_id: int) -> Tensor:
    """The mask of a prefix language model (T5's prefix LM, UniLM), with padding.

    ids (batch, seq), prefix_lengths (batch,) ints in [0, seq] -> bool (batch, seq, seq),
    True = may attend. In row b, query i may attend key j when key j is a real token and
    either j < prefix_lengths[b] (the prefix is seen in full, in both directions) or j <= i
    (causal after the prefix). prefix 0 is the causal mask; prefix seq is bidirectional.
    """
    check_tensor(ids, "ids", ndim=2, shape_hint="(batch, seq)", dtype=(torch.int64, torch.int32))
    check_tensor(
        prefix_lengths,
        "prefix_lengths",
        ndim=1,
        shape_hint="(batch,)",
        dtype=(torch.int64, torch.int32),
    )
    batch, seq = ids.shape
    if prefix_lengths.shape[0] != batch:
        raise ValueError(
            f"prefix_lengths has {prefix_lengths.shape[0]} entries but ids has "
            f"batch={batch}; give one prefix length per row"
        )
    if ((prefix_lengths < 0) | (prefix_lengths > seq)).any():
        raise ValueError(
            f"prefix_lengths must lie in [0, seq={seq}], got {prefix_lengths.tolist()}"
        )
    keys = torch.arange(seq, device=ids.device)  # (seq,)
    in_prefix = keys < prefix_lengths.to(ids.device)[:, None, None]  # (batch, 1, seq)
    allowed = in_prefix | causal_mask(seq, device=ids.device)  # (batch, seq, seq)
    return allowed & padding_mask(ids, pad_id)  # keys that are padding: never


def to_torch_blocked(mask: Tensor | None) -> Tensor | None:
    """course_lib mask (True = may attend) -> nn.MultiheadAttention mask (True = blocked)."""
    return None if mask is None else ~check_boolean(mask, "mask")


def from_torch_blocked(mask: Tensor | None) -> Tensor | None:
    """An nn.MultiheadAttention/nn.Transformer mask -> course_lib's (True = may attend).

    Accepts PyTorch's boolean masks (True = blocked) and its float masks (0 = attend,
    -inf = blocked, as `nn.Transformer.generate_square_subsequent_mask` makes).
    """
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
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


def to_additive(mask: Tensor | None, dtype: torch.dtype = torch.float32) -> Tensor | None:
    """course_lib mask (True = may attend) -> float mask added to the scores: 0 or -inf.

    The form `nn.Transformer.generate_square_subsequent_mask` returns, and that every PyTorch
    attention accepts as a float `attn_mask`.
    """
    if mask is None:
        return None
    check_boolean(mask, "mask")
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point dtype, got {dtype}")
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, float("-inf")
    )


def dependency_matrix(f: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """Which input positions each output position of `f` depends on: lesson 05's causality
    test, for every position at once.

    f maps x (batch, seq, d) to a tensor (batch, seq, d_out) and gives the same output for the
    same input (a module in eval mode). Returns bool (seq, seq) on x's device: entry [i, j] is
    True when changing position j of x (in every batch row, every feature by its own amount)
    changes output position i in some batch row. A causal f gives a lower triangle; x is left
    as it was.
    """
    check_tensor(x, "x", ndim=3, shape_hint="(batch, seq, d)", dtype=(torch.float32, torch.float64))
    batch, seq, d = x.shape
    with torch.no_grad():
        before = f(x)
        if not isinstance(before, Tensor) or before.shape[:2] != (batch, seq):
            got = tuple(before.shape) if isinstance(before, Tensor) else type(before).__name__
            raise ValueError(f"f(x) must be a tensor (batch={batch}, seq={seq}, ...), got {got}")
        # a different amount for every feature: adding the same number to each could be undone
        # by a function that subtracts each position's mean, and scaling would miss a zero x
        change = torch.randn(batch, d, generator=torch.Generator().manual_seed(0), dtype=x.dtype)
        depends = torch.zeros(seq, seq, dtype=torch.bool, device=x.device)
        for j in range(seq):
            changed = x.clone()
            changed[:, j] += change.to(x.device)
            after = f(changed)
            moved = (after != before) & ~(after.isnan() & before.isnan())  # NaN stays NaN
            # (seq,): output i moved, in any row (an output of (batch, seq) has one feature)
            depends[:, j] = moved.reshape(batch, seq, -1).any(-1).any(0)
    return depends
