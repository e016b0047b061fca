"""Cross-attention (lesson 06): queries from one sequence, keys and values from another.

    x (batch, n_q, d_model)        the sequence that asks       (the decoder's target words)
    memory (batch, n_kv, d_model)  the sequence that is read    (the encoder's source words)

    q = x W_Q       (batch, n_q, d_k)
    k = memory W_K  (batch, n_kv, d_k)
    v = memory W_V  (batch, n_kv, d_v)
    weights = softmax(q k^T / sqrt(d_k))   (batch, n_q, n_kv), rectangular: one row per query
    output  = weights v                    (batch, n_q, d_v), one output per query

The output has as many rows as x, whatever the length of memory. A source padding mask
(batch, 1, n_kv), True = a real source token, keeps every query away from padded source positions.

`CrossAttentionSublayer` is the middle sub-layer of a Transformer decoder layer (masked
self-attention -> cross-attention -> feed-forward), with its residual connection and LayerNorm,
equal to the `multihead_attn` + `norm2` part of `nn.TransformerDecoderLayer`.
"""

from __future__ import annotations

from torch import Tensor, nn

from .attention import scaled_dot_product_attention
from .multihead import MultiHeadAttention
from .norms import LayerNorm, residual
from .validation import (
    at_the_door,
    check_bool_mask,
    check_cross_attention_inputs,
    check_flag,
    check_floating,
    check_memory_mask,
    check_positive_int,
    check_same_dtype,
    check_tensor,
    door,
)

__all__ = ["cross_attention", "CrossAttentionSublayer", "attention_pool"]


def cross_attention(
    x: Tensor,
    memory: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    memory_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention from x to memory: q = x W_Q, k = memory W_K, v = memory W_V.

    x: (..., n_q, d_x), memory: (..., n_kv, d_memory) with the same leading (batch) dimensions;
    w_q: (d_x, d_k), w_k: (d_memory, d_k), w_v: (d_memory, d_v).
    memory_mask: bool, broadcastable to (..., n_q, n_kv), True = may attend, e.g. a
    (batch, 1, n_kv) source padding mask.
    Returns (output (..., n_q, d_v), weights (..., n_q, n_kv)).
    """
    check_tensor(x, "x", min_ndim=2, shape_hint="(batch, n_q, d_model)")
    check_tensor(memory, "memory", min_ndim=2, shape_hint="(batch, n_kv, d_model)")
    check_floating(x, "x")
    check_floating(memory, "memory")
    if x.shape[:-2] != memory.shape[:-2]:
        raise ValueError(
            f"x has batch dimensions {tuple(x.shape[:-2])} but memory has "
            f"{tuple(memory.shape[:-2])}; each target sequence in x reads its own source "
            f"sequence in memory, so they must match (shapes {tuple(x.shape)} and "
            f"{tuple(memory.shape)})"
        )
    for w, name, source, source_name in (
        (w_q, "w_q", x, "x"),
        (w_k, "w_k", memory, "memory"),
        (w_v, "w_v", memory, "memory"),
    ):
        check_tensor(w, name, ndim=2, shape_hint="(d_model, d_out)")
        if w.shape[0] != source.shape[-1]:
            raise ValueError(
                f"{name} has {w.shape[0]} rows but {source_name} has d_model="
                f"{source.shape[-1]}; {name} must be (d_model, d_out) so that "
                f"{source_name} @ {name} works (got {tuple(w.shape)})"
            )
        fix = f"{source_name} @ {name} needs one dtype, e.g. {name}.to({source_name}.dtype)"
        check_same_dtype((w, source), (name, source_name), fix)
    if w_q.shape[1] != w_k.shape[1]:
        raise ValueError(
            f"w_q has d_k={w_q.shape[1]} columns but w_k has {w_k.shape[1]}; queries and keys "
            "must have the same size to be compared by a dot product"
        )
    if memory_mask is not None:
        target = (*x.shape[:-2], x.shape[-2], memory.shape[-2])
        check_memory_mask(memory_mask, target, "(batch, n_q, n_kv)")
    q = x @ w_q  # (..., n_q, d_k): one query per position of x
    k = memory @ w_k  # (..., n_kv, d_k): one key per position of memory
    v = memory @ w_v  # (..., n_kv, d_v): one value per position of memory
    return scaled_dot_product_attention(q, k, v, memory_mask)  # (..., n_q, d_v), (..., n_q, n_kv)


class CrossAttentionSublayer(nn.Module):
    """The cross-attention sub-layer of a decoder layer: attention to memory, residual, LayerNorm.

    Sub-modules: `attn` (MultiHeadAttention: q_proj, k_proj, v_proj, out_proj), `norm`
    (lesson 07's LayerNorm, from `course_lib.norms`) and `dropout` (on the attention output).
    Lesson 07's `DecoderLayer` contains one as `cross_attn`. The residual wrapping is
    `course_lib.norms.residual`, the same function the encoder and decoder layers use.

    post-norm (norm_first=False, the original paper):  x = norm(x + attn(x, memory))
    pre-norm  (norm_first=True, most modern models):   x = x + attn(norm(x), memory)

    memory is the encoder's output; this sub-layer never normalises it (the encoder already did).
    forward(x (batch, n_q, d_model), memory (batch, n_kv, d_model), memory_mask=None) returns the
    new x (batch, n_q, d_model). memory_mask is bool, broadcastable to (batch, n_q, n_kv),
    True = may attend, e.g. a (batch, 1, n_kv) source padding mask. With `record_attention`
    set, `.attention` keeps the last weights (batch, num_heads, n_q, n_kv).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        norm_first: bool = False,
        dropout: float = 0.0,
        bias: bool = True,
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        check_positive_int(d_model, "d_model")
        check_positive_int(num_heads, "num_heads")
        check_flag(norm_first, "norm_first")
        self.d_model, self.num_heads, self.norm_first = d_model, num_heads, norm_first
        self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, bias=bias)
        self.norm = LayerNorm(d_model, layer_norm_eps, bias=bias)
        self.dropout = nn.Dropout(dropout)  # on the attention output, as nn.TransformerDecoderLayer
        self.record_attention = False
        self.attention: Tensor | None = None

    def _attend(self, query: Tensor, memory: Tensor, memory_mask: Tensor | None) -> Tensor:
        output, weights = self.attn(
            query, memory, memory, memory_mask, need_weights=self.record_attention
        )
        # kept only while recording is on (a hook that asks for the weights does not switch it on)
        self.attention = weights.detach() if self.record_attention and weights is not None else None
        return output  # (batch, n_q, d_model)

    @door
    def forward(self, x: Tensor, memory: Tensor, memory_mask: Tensor | None = None) -> Tensor:
        if at_the_door():
            check_cross_attention_inputs(
                x, memory, memory_mask, self.d_model, next(self.parameters())
            )
        attend = lambda h: self._attend(h, memory, memory_mask)
        return residual(x, attend, self.norm, self.dropout, self.norm_first)  # (b, n_q, d_model)


def attention_pool(
    x: Tensor, queries: Tensor, w_k: Tensor, w_v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Cross-attention from a fixed set of learned queries to a sequence (Perceiver, Set
    Transformer's pooling): a sequence of any length in, num_queries vectors out.

    x: (batch, n, d_model); queries: (num_queries, d_k), the same for every sequence (a learned
    parameter, not computed from x); w_k: (d_model, d_k); w_v: (d_model, d_v);
    mask: bool (batch, n), True = a real token, or None.
    Returns (pooled (batch, num_queries, d_v), weights (batch, num_queries, n)).
    """
    check_tensor(x, "x", ndim=3, shape_hint="(batch, n, d_model)")
    check_floating(x, "x")
    check_tensor(queries, "queries", ndim=2, shape_hint="(num_queries, d_k)")
    for w, name in ((w_k, "w_k"), (w_v, "w_v")):
        check_tensor(w, name, ndim=2, shape_hint="(d_model, d_out)")
        if w.shape[0] != x.shape[-1]:
            raise ValueError(f"{name} has {w.shape[0]} rows but x has d_model={x.shape[-1]}")
        check_same_dtype(
            (w, x), (name, "x"), f"x @ {name} needs one dtype, e.g. {name}.to(x.dtype)"
        )
    why = "queries @ keys needs one dtype, e.g. queries.to(x.dtype)"
    check_same_dtype((queries, x), ("queries", "x"), why)
    if w_k.shape[1] != queries.shape[1]:
        raise ValueError(
            f"queries have d_k={queries.shape[1]} but w_k has {w_k.shape[1]} "
            "columns; queries and keys must have the same size"
        )
    if mask is not None:
        check_bool_mask(mask, "mask", x.shape[:2], "(batch, n)")
        mask = mask.unsqueeze(-2)  # (batch, 1, n): the same keys for every query
    k = x @ w_k  # (batch, n, d_k)
    v = x @ w_v  # (batch, n, d_v)
    q = queries.expand(x.shape[0], -1, -1)  # (batch, num_queries, d_k), shared by the batch
    return scaled_dot_product_attention(q, k, v, mask)
