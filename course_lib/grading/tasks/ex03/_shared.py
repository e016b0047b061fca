"""What ex03's tasks share: the dtype of the float64 cases, the projections' names, and the
inputs that MultiHeadAttention's and grouped_query_attention's cases both build (large
scores, masks)."""

from __future__ import annotations

import torch
from torch import Tensor

F64 = torch.float64
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


def _large_scores() -> tuple[Tensor, Tensor, dict]:
    """query (1, 2, 4) of 10s and -10s, keys (1, 3, 4) of 10s, 9s and +-1s, and a one-head
    module's data with identity projections (no biases): scores 200, 180, 0 and their negatives,
    so exp(scores) overflows float32. Fresh tensors on each call, as far_blocked_key's."""
    identity = {"d_model": 4, "num_heads": 1, "bias": False, "train": False}
    identity["state_dict"] = {f"{name}.weight": torch.eye(4) for name in PROJECTIONS}
    keys = torch.tensor([[[10.0] * 4, [9.0] * 4, [1.0, -1.0, 1.0, -1.0]]])
    return torch.tensor([[[10.0] * 4, [-10.0] * 4]]), keys, identity


def _attend_somewhere(mask: Tensor) -> Tensor:
    """Allow the first key in every row, so no query is left with nothing to attend to."""
    mask = mask.clone()
    mask[..., 0] = True
    return mask


def _causal(n: int) -> Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril()
