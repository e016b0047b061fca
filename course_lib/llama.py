"""Llama's variations on the original Transformer's pieces (exercises 03 and 07 build them).

    rms_norm / swiglu_hidden_size / SwiGLU   RMSNorm and the gated feed-forward (exercise 07),
                                             in place of lesson 07's LayerNorm and FeedForward
    grouped_query_attention                  num_heads query heads share num_kv_heads key/value
    GroupedQueryAttention                    heads (exercise 03): a smaller KV cache

Rotary positions (RoPE), the fourth piece, are `course_lib.positional.apply_rope` (lesson 04).
`MultiHeadAttention(num_kv_heads=...)` is grouped-query attention; the class here only names it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .multihead import MultiHeadAttention, repeat_kv
from .validation import (
    at_the_door,
    check_eps,
    check_features,
    check_floating,
    check_positive_int,
    check_tensor,
    door,
)

__all__ = [
    "rms_norm",
    "swiglu_hidden_size",
    "SwiGLU",
    "grouped_query_attention",
    "GroupedQueryAttention",
]


@door
def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm (Zhang & Sennrich 2019; Llama): x (..., d), weight (d,) -> (..., d).

    x / sqrt(mean(x**2) + eps) * weight, over the last dimension. Unlike LayerNorm it does not
    subtract the mean and has no bias: it only rescales each vector to root-mean-square 1.
    """
    if at_the_door():
        check_tensor(x, "x", min_ndim=1, shape_hint="(..., d)")
        check_floating(x, "x")
        check_tensor(weight, "weight", ndim=1, shape_hint=f"(d={x.shape[-1]},)")
        if weight.shape[0] != x.shape[-1]:
            raise ValueError(
                f"weight has {weight.shape[0]} entries but x has d={x.shape[-1]} "
                "features in its last dimension"
            )
        check_eps(eps)
    mean_square = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
    return x / torch.sqrt(mean_square + eps) * weight


def swiglu_hidden_size(d_model: int) -> int:
    """The d_ff that gives SwiGLU the weight count of a GELU FFN with d_ff = 4 * d_model.

    The GELU FFN has two d_model x 4 d_model matrices (8 d_model^2 weights); SwiGLU has three
    d_model x d_ff matrices, so d_ff = 2/3 * 4 d_model = 8 d_model / 3 (rounded down, as Llama
    does before rounding up to a multiple of 256).
    """
    check_positive_int(d_model, "d_model")
    return 2 * (4 * d_model) // 3


class SwiGLU(nn.Module):
    """Llama's feed-forward: down_proj(silu(gate_proj(x)) * up_proj(x)), no biases.

    x (..., d_model) -> (..., d_model). Sub-modules gate_proj and up_proj (d_model -> d_ff) and
    down_proj (d_ff -> d_model), as in Hugging Face's Llama. d_ff=None picks
    swiglu_hidden_size(d_model), the weight count of a GELU FFN with d_ff = 4 d_model.
    """

    def __init__(self, d_model: int, d_ff: int | None = None):
        super().__init__()
        check_positive_int(d_model, "d_model")
        d_ff = swiglu_hidden_size(d_model) if d_ff is None else check_positive_int(d_ff, "d_ff")
        self.d_model, self.d_ff = d_model, d_ff
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    @door
    def forward(self, x: Tensor) -> Tensor:
        if at_the_door():
            check_features(x, "x", self.d_model, "this SwiGLU", weights=self.gate_proj.weight)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # (..., d_model)


def grouped_query_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Attention where num_heads query heads share num_kv_heads key/value heads.

    q (batch, num_heads, n_q, d_head), k (batch, num_kv_heads, n_k, d_head),
    v (batch, num_kv_heads, n_k, d_v), mask bool broadcastable to (batch, num_heads, n_q, n_k),
    True = may attend. Query head h attends with kv head h // (num_heads / num_kv_heads).
    Returns (output (batch, num_heads, n_q, d_v), weights (batch, num_heads, n_q, n_k)).
    Raises ValueError when num_heads is not a multiple of num_kv_heads.
    """
    check_tensor(q, "q", ndim=4, shape_hint="(batch, num_heads, n_q, d_head)")
    check_tensor(k, "k", ndim=4, shape_hint="(batch, num_kv_heads, n_k, d_head)")
    check_tensor(v, "v", ndim=4, shape_hint="(batch, num_kv_heads, n_k, d_v)")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(
            f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same batch, "
            "number of kv heads and length"
        )
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"q has num_heads={num_heads}, not a multiple of k's num_kv_heads={num_kv_heads}"
        )
    k, v = repeat_kv(k, num_heads), repeat_kv(v, num_heads)  # (batch, num_heads, n_k, ...)
    return scaled_dot_product_attention(q, k, v, mask)


class GroupedQueryAttention(MultiHeadAttention):
    """Grouped-query attention (Llama 2/3): num_heads query heads share num_kv_heads k/v heads.

    `MultiHeadAttention` with num_kv_heads given: q_proj and out_proj are (d_model, d_model);
    k_proj and v_proj are (d_model -> num_kv_heads * d_head), so the KV cache shrinks by
    num_heads / num_kv_heads. Query heads g*group .. (g+1)*group - 1 share kv head g
    (group = num_heads / num_kv_heads). num_kv_heads == num_heads is ordinary multi-head
    attention; num_kv_heads == 1 is multi-query attention.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, bias: bool = True):
        super().__init__(d_model, num_heads, bias=bias, num_kv_heads=num_kv_heads)
