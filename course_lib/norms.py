"""LayerNorm and the residual connection around a sub-layer (lesson 07).

Every sub-layer of a Transformer layer (self-attention, lesson 06's cross-attention, the
feed-forward) is wrapped the same way, in one of two orders:

    post-norm (original, norm_first=False):  x = LayerNorm(x + dropout(Sublayer(x)))
    pre-norm  (modern,   norm_first=True):   x = x + dropout(Sublayer(LayerNorm(x)))

`residual` is that wrapping, written once: `blocks` (encoder and decoder layers) and
`cross_attention` (the decoder's cross-attention sub-layer) both call it, with this module's
`LayerNorm`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .validation import (
    at_the_door,
    check_eps,
    check_features,
    check_flag,
    check_floating,
    check_positive_int,
    check_tensor,
    door,
)

__all__ = ["layer_norm", "LayerNorm", "residual"]


@door
def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor | None, eps: float = 1e-5) -> Tensor:
    """Normalise each vector along the last dimension, then scale and shift.

    x (..., d), gamma (d,), beta (d,) or None -> (..., d):
        (x - mean) / sqrt(var + eps) * gamma + beta, with the biased variance (divide by d),
    the statistics taken per token, over its d features.
    """
    if at_the_door():
        check_tensor(x, "x", min_ndim=1, shape_hint="(..., d)")
        check_floating(x, "x")
        d = x.shape[-1]
        for t, name in ((gamma, "gamma"), (beta, "beta")):
            if t is None and name == "beta":
                continue
            check_tensor(t, name, ndim=1, shape_hint=f"(d={d},)")
            if t.shape[0] != d:
                raise ValueError(
                    f"{name} has {t.shape[0]} entries but x has d={d} features in its last "
                    f"dimension (x shape {tuple(x.shape)}); {name} needs one entry per feature"
                )
        check_eps(eps)
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # (..., 1), biased: divide by d
    out = (x - mean) / torch.sqrt(var + eps) * gamma  # (..., d)
    return out if beta is None else out + beta


class LayerNorm(nn.Module):
    """`layer_norm` with learned `weight` (gamma, ones at init) and `bias` (beta, zeros).

    Same parameter names and results as `torch.nn.LayerNorm(d_model)`. The forward pass runs
    PyTorch's fused kernel (`F.layer_norm`), which computes what `layer_norm` above spells
    out, up to float rounding (tests/test_blocks.py checks it), in one kernel instead of ten
    separate operations, forward and backward (lesson 07 times the two on one CPU thread).
    """

    def __init__(self, d_model: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        check_positive_int(d_model, "d_model")
        self.d_model, self.eps = d_model, check_eps(eps)
        check_flag(bias, "bias")
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None

    @door
    def forward(self, x: Tensor) -> Tensor:
        if at_the_door():
            check_features(x, "x", self.d_model, "this LayerNorm", weights=self.weight)
        return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


def residual(
    x: Tensor,
    sublayer: Callable[[Tensor], Tensor],
    norm: nn.Module,
    dropout: nn.Module,
    norm_first: bool,
) -> Tensor:
    """One sub-layer with its residual connection and LayerNorm, pre-norm or post-norm.

    x (..., d_model) -> (..., d_model). `sublayer` maps (..., d_model) to (..., d_model);
    `dropout` acts on its output, before the residual sum.
    """
    if norm_first:  # x + Sublayer(LayerNorm(x))
        return x + dropout(sublayer(norm(x)))
    return norm(x + dropout(sublayer(x)))  # LayerNorm(x + Sublayer(x))
