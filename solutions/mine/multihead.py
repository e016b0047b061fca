"""Your own code from the exercises: the cells marked `# save in mine/multihead.py`.

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


# >>> cell: split_heads
# save in mine/multihead.py
def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(batch, seq, d_model) -> (batch, num_heads, seq, d_head), d_head = d_model / num_heads.

    Raises ValueError when d_model is not divisible by num_heads.
    """
    ### BEGIN SOLUTION
    batch, seq, d_model = x.shape
    if d_model % num_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    d_head = d_model // num_heads
    x = x.reshape(batch, seq, num_heads, d_head)  # (batch, seq, num_heads, d_head)
    return x.transpose(1, 2)  # (batch, num_heads, seq, d_head)
    ### END SOLUTION
# <<< cell: split_heads


# >>> cell: merge_heads
# save in mine/multihead.py
def merge_heads(x: Tensor) -> Tensor:
    """(batch, num_heads, seq, d_head) -> (batch, seq, num_heads * d_head)."""
    ### BEGIN SOLUTION
    batch, num_heads, seq, d_head = x.shape
    x = x.transpose(1, 2)  # (batch, seq, num_heads, d_head)
    return x.reshape(batch, seq, num_heads * d_head)  # (batch, seq, d_model)
    ### END SOLUTION
# <<< cell: merge_heads


# >>> cell: MultiHeadAttention
# save in mine/multihead.py
class MultiHeadAttention(nn.Module):
    """Multi-head attention: q/k/v projections, num_heads attentions, concat, out_proj.

    forward(query (batch, n_q, d_model), key (batch, n_k, d_model), value (batch, n_k, d_model),
    mask bool (n_q, n_k) or (batch, n_q or 1, n_k), True = may attend)
    -> (output (batch, n_q, d_model), weights (batch, num_heads, n_q, n_k)).
    bias=False: the four projections have no biases.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True):
        super().__init__()
        ### BEGIN SOLUTION
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        ### END SOLUTION

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None):
        ### BEGIN SOLUTION
        q = split_heads(self.q_proj(query), self.num_heads)  # (batch, heads, n_q, d_head)
        k = split_heads(self.k_proj(key), self.num_heads)  # (batch, heads, n_k, d_head)
        v = split_heads(self.v_proj(value), self.num_heads)  # (batch, heads, n_k, d_head)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, heads, n_q, n_k)
        if mask is not None:
            if mask.dim() == 3:  # (batch, n_q or 1, n_k): the same for all heads
                mask = mask.unsqueeze(1)  # (batch, 1, n_q or 1, n_k)
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)  # over the keys
        output = self.out_proj(merge_heads(weights @ v))  # (batch, n_q, d_model)
        return output, weights
        ### END SOLUTION
# <<< cell: MultiHeadAttention
