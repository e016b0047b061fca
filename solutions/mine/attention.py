"""Your own code from the exercises: the cells marked `# save in mine/attention.py`.

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


# >>> cell: softmax
# save in mine/attention.py
def softmax(x, dim=-1):
    """Stable softmax along `dim`. x: (...) floating point -> (...) same shape, sums to 1 on dim."""
    ### BEGIN SOLUTION
    shifted = x - x.amax(dim=dim, keepdim=True)
    exp = shifted.exp()
    return exp / exp.sum(dim=dim, keepdim=True)
    ### END SOLUTION
# <<< cell: softmax


# >>> cell: scaled_dot_product_attention
# save in mine/attention.py
def scaled_dot_product_attention(q, k, v):
    """q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v)
    -> (output (..., n_q, d_v), weights (..., n_q, n_k)).
    """
    ### BEGIN SOLUTION
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., n_q, n_k)
    weights = softmax(scores, dim=-1)  # over the keys
    return weights @ v, weights  # (..., n_q, d_v), (..., n_q, n_k)
    ### END SOLUTION
# <<< cell: scaled_dot_product_attention
