"""Your own code from the exercises: the cells marked `# save in mine/positional.py`.

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


# >>> cell: sinusoidal_positional_encoding
# save in mine/positional.py
def sinusoidal_positional_encoding(seq_len, d_model):
    """(seq_len, d_model) float32: PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i),
    w_i = 10000^(-2i/d_model), positions p = 0 .. seq_len-1.
    """
    ### BEGIN SOLUTION
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even (sin/cos pairs), got {d_model}")
    positions = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)  # (seq_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model / 2,)
    angles = positions * 10000.0 ** (-two_i / d_model)  # (seq_len, d_model / 2)
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.float()
    ### END SOLUTION
# <<< cell: sinusoidal_positional_encoding


# >>> cell: apply_rope
# save in mine/positional.py
def apply_rope(x, positions=None):
    """(..., seq, d) -> (..., seq, d), same dtype: pair (2i, 2i+1) at position p rotated by
    p * 10000^(-2i/d); positions (seq,) or None for 0 .. seq-1.
    """
    ### BEGIN SOLUTION
    seq_len, d = x.shape[-2], x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"the last dimension of x must be even, got {d}")
    if positions is None:
        positions = torch.arange(seq_len)
    two_i = torch.arange(0, d, 2, dtype=torch.float64, device=x.device)  # on x's device
    frequencies = 10000.0 ** (-two_i / d)  # (d / 2,)
    angles = positions.to(x.device, torch.float64)[:, None] * frequencies  # (seq, d / 2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., seq, d / 2) each
    rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
    return rotated.flatten(-2)  # (..., seq, d)
    ### END SOLUTION
# <<< cell: apply_rope
