"""What ex07's module tasks share: random weights under the exercise's names, the residual
sub-layers of a wrong encoder or decoder layer, and the hints both layers give."""

from __future__ import annotations

import torch
import torch.nn.functional as F
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
    "1e-6): create them with the default eps, LayerNorm(d_model) (or nn.LayerNorm(d_model))"
)
RELU_NOT_GELU = "activation='relu' (the default) is ReLU (F.relu), not GELU"
RELU_ONLY = "the feed-forward network of this layer uses ReLU (F.relu), not GELU"
ACTIVATION_IGNORED = (
    "the activation argument is ignored (ReLU whatever it says): apply the function it names, "
    "'relu', 'gelu', 'gelu_tanh' or 'relu2', between linear1 and linear2"
)
RELU2_AS_RELU = (
    "activation='relu2' is ReLU squared, F.relu(h) ** 2 (Primer's activation, and the course's "
    "Shakespeare checkpoint's), not plain ReLU"
)
GELU_TANH_AS_GELU = (
    "activation='gelu_tanh' is GELU's tanh approximation, F.gelu(h, approximate='tanh') "
    "(GPT-2's); the exact F.gelu differs from it by up to 5e-4, which the check sees"
)
GELU_AS_TANH = (
    "activation='gelu' is the exact GELU, F.gelu(h); the tanh approximation "
    "(approximate='tanh') is 'gelu_tanh'"
)

# The activations by name, as course_lib.blocks.FeedForward takes them.
ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda h: F.gelu(h, approximate="tanh"),
    "relu2": lambda h: F.relu(h) ** 2,
}


def activation_with(name: str, mistake: str):
    """The activation called `name`, with one of the activation mistakes where it bites."""
    if mistake == "activation_ignored" or (mistake == "relu2_as_relu" and name == "relu2"):
        return F.relu
    if mistake == "gelu" and name == "relu":
        return F.gelu
    if mistake == "gelu_tanh_as_gelu" and name == "gelu_tanh":
        return F.gelu
    if mistake == "gelu_as_tanh" and name == "gelu":
        return ACTIVATIONS["gelu_tanh"]
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


def layer_kwargs(activation: str = "relu", bias: bool = True) -> dict:
    """A case's activation and bias, as keyword arguments (none when they are the defaults, so
    the first cases read like the task's simplest form)."""
    kwargs: dict = {}
    if activation != "relu":
        kwargs["activation"] = activation
    if not bias:
        kwargs["bias"] = False
    return kwargs


def random_state(module: nn.Module, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """The module's parameter names with random values (LayerNorm gammas/betas too)."""
    return {
        exercise_name(name): 0.2 + 0.5 * randn(gen, *p.shape, dtype=p.dtype)
        for name, p in module.state_dict().items()
    }


def add_parts(layer, d_model, num_heads, d_ff, norm_first, *, cross=False, bias=True):
    """Give a wrong encoder (or, with `cross`, decoder) layer the task's sub-modules, under the
    task's names; its LayerNorms get another eps for the mistake "norm_eps"."""
    layer.norm_first = norm_first
    layer.self_attn = MultiHeadAttention(d_model, num_heads, bias=bias)
    if cross:
        layer.multihead_attn = MultiHeadAttention(d_model, num_heads, bias=bias)
    layer.linear1 = nn.Linear(d_model, d_ff, bias=bias)
    layer.linear2 = nn.Linear(d_ff, d_model, bias=bias)
    eps = 1e-6 if layer.mistake == "norm_eps" else 1e-5
    for i in range(1, 4 if cross else 3):
        setattr(layer, f"norm{i}", nn.LayerNorm(d_model, eps, bias=bias))


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
