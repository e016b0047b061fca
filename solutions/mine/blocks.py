"""Your own code from the exercises: the cells marked `# save in mine/blocks.py`.

Edit those cells in their notebook, not this file: running a marked cell rewrites its part
below (between its ">>> cell" and "<<< cell" lines) and keeps the others. Later exercises use
these pieces through `mine("exNN.name")`, which checks them first.
"""
# ruff: noqa
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.mine import mine


# >>> cell: layer_norm
# save in mine/blocks.py
def layer_norm(x, gamma, beta, eps=1e-5):
    """x (..., d), gamma (d,), beta (d,) -> (..., d), normalised over the last dimension."""
    ### BEGIN SOLUTION
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1), biased
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta
    ### END SOLUTION
# <<< cell: layer_norm


# >>> cell: LayerNorm
# save in mine/blocks.py
class LayerNorm(nn.Module):
    """x (..., d_model) -> (..., d_model): your layer_norm with a learned weight (gamma, ones at
    the start) and bias (beta, zeros; none with bias=False).
    """

    def __init__(self, d_model, eps=1e-5, bias=True):
        super().__init__()
        ### BEGIN SOLUTION
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        beta = torch.zeros_like(self.weight) if self.bias is None else self.bias
        return layer_norm(x, self.weight, beta, self.eps)  # (..., d_model)
        ### END SOLUTION
# <<< cell: LayerNorm


# >>> cell: FeedForward
# save in mine/blocks.py
def activate(h, name):
    """h (...) -> (...): the activation called `name`, "relu", "gelu", "gelu_tanh" or "relu2"."""
    ### BEGIN SOLUTION
    if name == "relu":
        return F.relu(h)
    if name == "gelu":
        return F.gelu(h)
    if name == "gelu_tanh":
        return F.gelu(h, approximate="tanh")
    if name == "relu2":
        return F.relu(h) ** 2
    raise ValueError(f"activation must be 'relu', 'gelu', 'gelu_tanh' or 'relu2', got {name!r}")
    ### END SOLUTION


class FeedForward(nn.Module):
    """x (..., d_model) -> (..., d_model): linear2(dropout(activation(linear1(x))))."""

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__()
        ### BEGIN SOLUTION
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        hidden = activate(self.linear1(x), self.activation)  # (..., d_ff)
        return self.linear2(self.dropout(hidden))  # (..., d_model)
        ### END SOLUTION
# <<< cell: FeedForward


# >>> cell: EncoderLayer
# save in mine/blocks.py
# yours from exercise 03 (until it passes its check, the course's stands in, named as borrowed)
MultiHeadAttention = mine("ex03.MultiHeadAttention")


class EncoderLayer(nn.Module):
    """x (batch, seq, d_model), bool mask (True = may attend) -> (batch, seq, d_model)."""

    def __init__(self, d_model, num_heads, d_ff, norm_first=False, activation="relu", bias=True):
        super().__init__()
        ### BEGIN SOLUTION
        self.norm_first = norm_first
        self.activation = activation
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=bias)
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.norm1 = LayerNorm(d_model, bias=bias)
        self.norm2 = LayerNorm(d_model, bias=bias)
        ### END SOLUTION

    def forward(self, x, mask=None):
        ### BEGIN SOLUTION
        def attend(h):  # self-attention: (batch, seq, d_model) -> same
            return self.self_attn(h, h, h, mask=mask)[0]

        def feed_forward(h):  # (batch, seq, d_model) -> same
            return self.linear2(activate(self.linear1(h), self.activation))

        if self.norm_first:
            x = x + attend(self.norm1(x))
            return x + feed_forward(self.norm2(x))
        x = self.norm1(x + attend(x))
        return self.norm2(x + feed_forward(x))
        ### END SOLUTION
# <<< cell: EncoderLayer
