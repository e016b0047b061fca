"""What ex07's module tasks share: random weights under the exercise's names, the residual
sub-layers of a wrong encoder or decoder layer, and the hints both layers give."""

from __future__ import annotations

import torch
from torch import nn

from ....multihead import MultiHeadAttention
from ...core import exercise_name
from ..common import randn

ALWAYS_POST_NORM = (
    "norm_first is ignored: your layer is post-norm even with norm_first=True, which asks "
    "for pre-norm, x = x + sublayer(norm(x)); keep self.norm_first = norm_first and branch on "
    "it in forward"
)
PRE_POST_SWAPPED = (
    "post-norm and pre-norm are swapped: norm_first=False (post-norm) is "
    "x = norm(x + sublayer(x)); norm_first=True (pre-norm) is "
    "x = x + sublayer(norm(x)) (a layer that is always pre-norm, whatever "
    "norm_first says, gets this hint too)"
)
MASK_INVERTED = (
    "the mask is inverted: here True means 'may attend' (nn.MultiheadAttention's masks mean "
    "the opposite), so pass the mask as it is, not ~mask"
)
LAYER_NORM_EPS = (
    "your LayerNorms use another eps than nn.LayerNorm's default 1e-5 (some tutorials use "
    "1e-6): create them as nn.LayerNorm(d_model)"
)
RELU_NOT_GELU = "the feed-forward network of this layer uses ReLU (F.relu), not GELU"


def random_state(module: nn.Module, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """The module's parameter names with random values (LayerNorm gammas/betas too)."""
    return {
        exercise_name(name): 0.2 + 0.5 * randn(gen, *p.shape, dtype=p.dtype)
        for name, p in module.state_dict().items()
    }


def add_parts(layer, d_model, num_heads, d_ff, norm_first, *, cross=False):
    """Give a wrong encoder (or, with `cross`, decoder) layer the task's sub-modules, under the
    task's names; its LayerNorms get another eps for the mistake "norm_eps"."""
    layer.norm_first = norm_first
    layer.self_attn = MultiHeadAttention(d_model, num_heads)
    if cross:
        layer.multihead_attn = MultiHeadAttention(d_model, num_heads)
    layer.linear1 = nn.Linear(d_model, d_ff)
    layer.linear2 = nn.Linear(d_ff, d_model)
    eps = 1e-6 if layer.mistake == "norm_eps" else 1e-5
    for i in range(1, 4 if cross else 3):
        setattr(layer, f"norm{i}", nn.LayerNorm(d_model, eps))


def sublayers(x, steps, norm_first, mistake):
    """Run `steps`, (norm, sublayer) pairs, each in a residual connection, post-norm
    (x = norm(x + sublayer(x))) or pre-norm (x = x + sublayer(norm(x))), with one named
    mistake where it bites."""
    pre = {"always_post": False, "pre_post_swapped": not norm_first}.get(mistake, norm_first)
    layer_input, last = x, len(steps) - 1
    for i, (norm, sublayer) in enumerate(steps):
        stale = (mistake, i) in {("ff_on_input", last), ("cross_reads_input", 1)}
        reads = layer_input if stale else x  # the sub-layer's input
        no_residual = mistake == "no_residual" or (mistake, i) in {
            ("no_attn_residual", 0),
            ("no_ff_residual", last),
        }
        if mistake == "residual_outside":  # one residual around the whole layer
            residual = layer_input if i == last else 0
        else:
            residual = 0 if no_residual else x
        if pre:
            h = norm(reads)
            normed_residual = mistake in ("residual_normed", "residual_of_normed")
            x = (h if normed_residual else residual) + sublayer(h)
        elif mistake in ("residual_normed", "normed_sublayer"):
            x = residual + norm(sublayer(reads))
        elif mistake == "no_final_norm" and i == last:
            x = residual + sublayer(reads)
        else:
            x = norm(residual + sublayer(reads))
    return x
