"""Multi-head attention (lesson 03): h heads of size d_head = d_model / h, run side by side.

    (batch, seq, d_model) --q/k/v_proj--> split into heads (batch, heads, seq, d_head)
    --> attention per head --> merge heads (batch, seq, d_model) --out_proj--> output

Same parameter count as one wide head: four d_model x d_model projections.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .from_torch import attention_from_torch, torch_attention_state
from .positional import apply_rope
from .validation import (
    at_the_door,
    check_attention_inputs,
    check_dropout,
    check_flag,
    check_heads_divide,
    check_positive_int,
    check_tensor,
    door,
)

if TYPE_CHECKING:
    from .kv_cache import LayerCache

__all__ = [
    "split_heads",
    "merge_heads",
    "MultiHeadAttention",
    "torch_attention_state",  # defined in from_torch.py, kept here for exercise 07
    "repeat_kv",
]


@door
def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(batch, seq, d_model) -> (batch, num_heads, seq, d_head), d_head = d_model / num_heads.

    Head h gets features h*d_head .. (h+1)*d_head - 1 of every token. The transpose is needed:
    a reshape straight to (batch, num_heads, seq, d_head) has the right shape but mixes tokens.
    Raises ValueError when d_model is not divisible by num_heads.
    """
    if at_the_door():
        check_tensor(x, "x", ndim=3, shape_hint="(batch, seq, d_model)")
        check_positive_int(num_heads, "num_heads")
        check_heads_divide(x.shape[-1], num_heads)
    batch, seq, d_model = x.shape
    x = x.reshape(batch, seq, num_heads, d_model // num_heads)  # (batch, seq, heads, d_head)
    return x.transpose(1, 2)  # (batch, num_heads, seq, d_head)


@door
def merge_heads(x: Tensor) -> Tensor:
    """(batch, num_heads, seq, d_head) -> (batch, seq, num_heads * d_head); inverse of split."""
    if at_the_door():
        check_tensor(x, "x", ndim=4, shape_hint="(batch, num_heads, seq, d_head)")
    batch, num_heads, seq, d_head = x.shape
    x = x.transpose(1, 2)  # (batch, seq, num_heads, d_head)
    return x.reshape(batch, seq, num_heads * d_head)  # (batch, seq, d_model)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with sub-modules q_proj, k_proj, v_proj, out_proj (nn.Linear).

    forward(query, key, value, mask=None) with query (batch, n_q, d_model) and key, value
    (batch, n_k, d_model). `mask` is boolean, True = may attend, broadcastable to
    (batch, n_q, n_k) (a (batch, 1, n_k) padding mask or an (n_q, n_k) causal mask) or to
    (batch, num_heads, n_q, n_k). Returns (output (batch, n_q, d_model),
    weights (batch, num_heads, n_q, n_k)); with need_weights=False it uses PyTorch's fused
    kernel and returns (output, None), which is faster for training. is_causal=True (with no
    mask) is the causal mask without building it: the fused kernel skips the future keys.

    cache: a `course_lib.kv_cache.LayerCache` holding the keys and values of earlier tokens
    (lesson 09). The new tokens' keys and values are appended to it, and the queries attend
    to all of them; with is_causal=True the new tokens are the last ones of the sequence.

    rope=True rotates every query and key by its position (lesson 04's RoPE, `apply_rope`)
    before attending, so the scores depend on the offset between tokens; the new tokens'
    positions start after the cached ones.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        num_kv_heads: int | None = None,
        rope: bool = False,
    ):
        super().__init__()
        check_positive_int(d_model, "d_model")
        check_positive_int(num_heads, "num_heads")
        check_heads_divide(d_model, num_heads)
        check_dropout(dropout)
        check_flag(bias, "bias")  # bias="no" would be truthy: biases on
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_positive_int(num_kv_heads, "num_kv_heads")
        if num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}; "
                "each kv head serves a group of num_heads / num_kv_heads query heads"
            )
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.d_head = d_model // num_heads
        self.dropout = dropout
        self.rope = check_flag(rope, "rope")
        if self.rope and self.d_head % 2:
            raise ValueError(
                f"rope=True rotates pairs of features, so d_model / num_heads must be even, "
                f"got d_head={self.d_head}"
            )
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.d_head, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    @door
    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = True,
        is_causal: bool = False,
        cache: LayerCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        if at_the_door():
            cached = 0 if cache is None else len(cache)
            check_attention_inputs(
                query,
                key,
                value,
                mask,
                is_causal,
                self.d_model,
                self.num_heads,
                cached,
                self.q_proj.weight,
            )
            check_flag(need_weights, "need_weights")
        if mask is not None and mask.dim() == 3:  # (batch, n_q or 1, n_k): same for every head
            mask = mask.unsqueeze(1)  # (batch, 1, n_q or 1, n_k)
        q = split_heads(self.q_proj(query), self.num_heads)  # (batch, heads, n_q, d_head)
        k = split_heads(self.k_proj(key), self.num_kv_heads)  # (batch, kv_heads, n_k, d_head)
        v = split_heads(self.v_proj(value), self.num_kv_heads)  # (batch, kv_heads, n_k, d_head)
        if self.rope:  # rotate by position; the new tokens come after the cached ones
            past = 0 if cache is None else len(cache)
            if past == 0:  # positions 0 .. n - 1: apply_rope's kept table
                q, k = apply_rope(q), apply_rope(k)
            else:
                q = apply_rope(q, torch.arange(past, past + q.shape[2], device=q.device))
                k = apply_rope(k, torch.arange(past, past + k.shape[2], device=k.device))
        if cache is not None:  # the earlier tokens' keys and values come first
            k, v = cache.append(k, v)  # (batch, kv_heads, t + n_k, d_head)
        if self.num_kv_heads != self.num_heads:  # grouped-query attention: share the kv heads
            k, v = repeat_kv(k, self.num_heads), repeat_kv(v, self.num_heads)
        heads, weights = scaled_dot_product_attention(
            q,
            k,
            v,
            mask,
            is_causal=is_causal,
            need_weights=need_weights,
            dropout_p=self.dropout if self.training else 0.0,
        )  # (batch, heads, n_q, d_head), (batch, heads, n_q, t + n_k) or None
        return self.out_proj(merge_heads(heads)), weights  # (batch, n_q, d_model)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Ours, with the weights of a `torch.nn.MultiheadAttention` (identical outputs)."""
        return attention_from_torch(cls, module)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # PyTorch's stacked in_proj (nn.MultiheadAttention's names) loads as q/k/v_proj
        for key in [k for k in state_dict if k.startswith(prefix + "in_proj_")]:
            state_dict.update(torch_attention_state({key: state_dict.pop(key)}))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


@door
def repeat_kv(x: Tensor, num_heads: int) -> Tensor:
    """(batch, num_kv_heads, seq, d_head) -> (batch, num_heads, seq, d_head).

    Query head h uses key/value head h // (num_heads / num_kv_heads): each kv head is repeated
    for its group of consecutive query heads (repeat_interleave, as in Llama), not tiled.
    """
    if at_the_door():
        check_tensor(x, "x", ndim=4, shape_hint="(batch, num_kv_heads, seq, d_head)")
        check_positive_int(num_heads, "num_heads")
        if num_heads % x.shape[1] != 0:
            raise ValueError(
                f"num_heads={num_heads} is not a multiple of num_kv_heads={x.shape[1]}"
            )
    return x.repeat_interleave(num_heads // x.shape[1], dim=1)
