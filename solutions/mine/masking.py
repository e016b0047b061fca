"""Your own code from the exercises: the cells marked `# save in mine/masking.py`.

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


# >>> cell: causal_mask
# save in mine/masking.py
def causal_mask(n):
    """n -> bool (n, n), True on and below the diagonal (query i may attend to keys j <= i)."""
    ### BEGIN SOLUTION
    positions = torch.arange(n)
    return positions.unsqueeze(1) >= positions.unsqueeze(0)  # (n, 1) >= (1, n) -> (n, n)
    ### END SOLUTION
# <<< cell: causal_mask


# >>> cell: padding_mask
# save in mine/masking.py
def padding_mask(ids, pad_id):
    """ids (batch, seq) -> bool (batch, 1, seq), True = a real token, False = padding."""
    ### BEGIN SOLUTION
    return (ids != pad_id).unsqueeze(1)  # (batch, seq) -> (batch, 1, seq)
    ### END SOLUTION
# <<< cell: padding_mask


# >>> cell: masked_attention
# save in mine/masking.py
softmax = mine("ex02.softmax")  # yours from exercise 02 (the course's until it passes)


def masked_attention(q, k, v, mask):
    """q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v), mask bool (..., n_q, n_k)
    broadcastable, True = may attend -> (output (..., n_q, d_v), weights (..., n_q, n_k)).
    """
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., n_q, n_k)
    scores = scores.masked_fill(~mask, float("-inf"))
    any_key = mask.any(dim=-1, keepdim=True)  # (..., n_q, 1): False for a fully masked row
    # give fully masked rows finite scores (no 0/0), then zero every blocked weight
    weights = softmax(scores.masked_fill(~any_key, 0.0), dim=-1).masked_fill(~mask, 0.0)
    return weights @ v, weights  # (..., n_q, d_v), (..., n_q, n_k)
    ### END SOLUTION
# <<< cell: masked_attention
