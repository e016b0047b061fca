"""Attention that does not pay for the n x n matrix (lesson 10).

Full attention (lesson 02) builds a (n_q, n_k) matrix of scores: its memory grows as n^2.
Three answers, one exact and two approximate:

    tiled_attention           exact. Keys and values are visited a block at a time; an online
                              softmax (a running max m, a running sum l and a running output,
                              all rescaled by exp(m_old - m_new) when the max grows; Milakov &
                              Gimelshein 2018, Rabe & Staats 2021) gives the same result as the
                              full softmax. FlashAttention's algorithm (Dao et al. 2022, 2023),
                              as an autograd.Function: it saves q, k, v, the output and one
                              log-sum-exp per query, and its backward pass
                              (`tiled_attention_backward`) recomputes the tiles, so memory is
                              linear in n for training too. Not its speed: that needs one fused
                              GPU kernel, which a loop of PyTorch operations is not.
    sliding_window_attention  approximate (Longformer): each query sees only its neighbours,
                              |i - j| <= window. Computed on the band, never on a masked n x n.
    performer_attention       approximate (Performer): exp(q.k) ~ phi(q).phi(k) with positive
                              random features phi, so attention = phi(q) (phi(k)^T v), linear in n.

`sliding_window_mask` is the Longformer pattern as an ordinary (n, n) mask (True = may attend),
with optional global tokens, for use with `course_lib.attention.scaled_dot_product_attention`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .validation import (
    at_the_door,
    check_bool_mask,
    check_flag,
    check_floating,
    check_non_negative_int,
    check_positive_int,
    check_qkv,
    check_same_dtype,
    check_size,
    check_tensor,
    door,
)

__all__ = [
    "tiled_attention",
    "tiled_attention_forward",
    "tiled_attention_backward",
    "sliding_window_mask",
    "sliding_window_attention",
    "random_feature_projection",
    "performer_features",
    "performer_attention",
]


def _causal_blocked(q_start, rows, k_start, cols, shift, device) -> Tensor | None:
    """(rows, cols) bool, True where the key comes after the query (key j > query i + shift),
    or None when no key of this tile does. Query i is token i + shift of the sequence, with
    shift = n_k - n_q: the bottom-right alignment of `scaled_dot_product_attention(is_causal)`."""
    if k_start + cols - 1 <= q_start + shift:  # the tile's last key is not after its first query
        return None
    query_pos = torch.arange(q_start, q_start + rows, device=device)[:, None] + shift
    key_pos = torch.arange(k_start, k_start + cols, device=device)
    return key_pos > query_pos


def _mask_tile(scores, q_start, k_start, shift, causal, key_padding_mask) -> Tensor:
    """The tile's scores with -inf where a key may not be attended (causal, padding)."""
    rows, cols = scores.shape[-2:]
    if causal:
        blocked = _causal_blocked(q_start, rows, k_start, cols, shift, scores.device)
        if blocked is not None:
            scores = scores.masked_fill(blocked, float("-inf"))
    if key_padding_mask is not None:  # (..., n_k), True = may attend
        keep = key_padding_mask[..., None, k_start : k_start + cols]  # (..., 1, bk)
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores


def _check_tiled(q, k, v, causal, block_size, key_padding_mask):
    check_qkv(q, k, v)
    check_flag(causal, "causal")
    check_positive_int(block_size, "block_size")
    if key_padding_mask is not None:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        check_bool_mask(key_padding_mask, "key_padding_mask", (*batch, k.shape[-2]), "(..., n_k)")
        if key_padding_mask.shape[-1] != k.shape[-2]:
            raise ValueError(
                f"key_padding_mask has {key_padding_mask.shape[-1]} entries per row but k has "
                f"n_k={k.shape[-2]} keys: it must be (..., n_k), True = may attend"
            )


def tiled_attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    block_size: int = 128,
    key_padding_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The forward loop of FlashAttention: (output (..., n_q, d_v), lse (..., n_q)).

    lse[i] = log sum_j exp(q_i . k_j / sqrt(d_k)), the log-sum-exp of query i's allowed scores
    (m + log l from the running max m and running sum l); -inf for a query with no allowed key,
    whose output is 0. Plain tensor operations: called directly under autograd, PyTorch keeps
    every tile for the backward pass (that is what `tiled_attention` avoids).
    """
    _check_tiled(q, k, v, causal, block_size, key_padding_mask)
    n_q, n_k = q.shape[-2], k.shape[-2]
    shift = n_k - n_q
    scale = 1.0 / math.sqrt(q.shape[-1])
    batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = q.new_empty(*batch_shape, n_q, v.shape[-1])  # (..., n_q, d_v), filled block by block
    lse = q.new_empty(*batch_shape, n_q)  # (..., n_q)
    for q_start in range(0, n_q, block_size):
        q_block = q[..., q_start : q_start + block_size, :] * scale  # (..., bq, d_k)
        rows = q_block.shape[-2]
        running_max = q.new_full((*batch_shape, rows, 1), float("-inf"))  # m
        running_sum = q.new_zeros((*batch_shape, rows, 1))  # l = sum of exp(score - m)
        acc = q.new_zeros((*batch_shape, rows, v.shape[-1]))  # sum of exp(score - m) v
        # causal: the block's last query is token q_start + rows - 1 + shift; later keys are masked
        k_end = max(0, min(n_k, q_start + rows + shift)) if causal else n_k
        for k_start in range(0, k_end, block_size):
            k_block = k[..., k_start : k_start + block_size, :]  # (..., bk, d_k)
            v_block = v[..., k_start : k_start + block_size, :]  # (..., bk, d_v)
            scores = q_block @ k_block.transpose(-2, -1)  # (..., bq, bk): one tile
            scores = _mask_tile(scores, q_start, k_start, shift, causal, key_padding_mask)
            new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
            # a row with no allowed key yet keeps max -inf; exp(-inf - -inf) would be NaN
            safe_max = new_max.masked_fill(new_max == float("-inf"), 0.0)
            correction = (running_max - safe_max).exp()  # rescales what was summed so far
            p = (scores - safe_max).exp()  # (..., bq, bk)
            running_sum = running_sum * correction + p.sum(dim=-1, keepdim=True)
            acc = acc * correction + p @ v_block
            running_max = new_max
        # a query with no allowed key has l = 0 and acc = 0: output 0, lse = -inf
        out[..., q_start : q_start + rows, :] = acc / running_sum.masked_fill(running_sum == 0, 1)
        lse[..., q_start : q_start + rows] = (running_max + running_sum.log()).squeeze(-1)
    return out, lse


def tiled_attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    d_out: Tensor,
    causal: bool = False,
    block_size: int = 128,
    key_padding_mask: Tensor | None = None,
    d_lse: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """FlashAttention-2's backward pass: (dq, dk, dv) from the saved q, k, v, out and lse.

    Each tile's weights are recomputed from the saved log-sum-exp, p = exp(s - lse), with no
    running max: they are final at once. With D = rowsum(d_out * out) (..., n_q, 1):
        dv += p^T d_out    dp = d_out v^T    ds = p * (dp - D)
        dq += ds k / sqrt(d_k)    dk += ds^T q / sqrt(d_k)
    (D_i = sum_j p_ij dp_ij, the softmax's Jacobian in one number per query.) The loop runs
    over blocks of keys outside and blocks of queries inside, so dk and dv of a key block are
    finished in one pass; causal=True skips the query blocks that cannot see the key block.
    The largest temporary is a few (block_size, block_size) tiles. The gradients have the
    shapes of q, k and v (batch dimensions that were broadcast are summed). `d_lse`
    (..., n_q), a gradient on lse itself, adds p * d_lse to ds: D - d_lse takes D's place.
    """
    _check_tiled(q, k, v, causal, block_size, key_padding_mask)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    for t, name, shape in (
        (out, "out", (*batch, q.shape[-2], v.shape[-1])),
        (d_out, "d_out", (*batch, q.shape[-2], v.shape[-1])),
        (lse, "lse", (*batch, q.shape[-2])),
    ):
        check_tensor(t, name, shape_hint="as the forward pass gives it")
        if tuple(t.shape) != shape:
            raise ValueError(
                f"{name} must have shape {shape} for these q, k, v, got {tuple(t.shape)}"
            )
    n_q, n_k = q.shape[-2], k.shape[-2]
    shift = n_k - n_q
    scale = 1.0 / math.sqrt(q.shape[-1])
    batch_shape = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    D = (d_out * out).sum(dim=-1, keepdim=True)  # (..., n_q, 1)
    if d_lse is not None:
        D = D - d_lse.unsqueeze(-1)
    # a query with no allowed key has lse = -inf; +inf makes its p = exp(s - inf) = 0, not NaN
    row_lse = lse.masked_fill(lse == float("-inf"), float("inf")).unsqueeze(-1)  # (..., n_q, 1)
    dq = q.new_zeros(*batch_shape, n_q, q.shape[-1])
    dks, dvs = [], []
    for k_start in range(0, n_k, block_size):
        k_block = k[..., k_start : k_start + block_size, :]  # (..., bk, d_k)
        v_block = v[..., k_start : k_start + block_size, :]  # (..., bk, d_v)
        cols = k_block.shape[-2]
        dk_block = q.new_zeros(*batch_shape, cols, k.shape[-1])
        dv_block = q.new_zeros(*batch_shape, cols, v.shape[-1])
        # causal: the first query that sees key k_start is token k_start, query k_start - shift
        q_first = max(0, k_start - shift) // block_size * block_size if causal else 0
        for q_start in range(q_first, n_q, block_size):
            rows = slice(q_start, q_start + block_size)
            q_block = q[..., rows, :] * scale  # (..., bq, d_k)
            scores = q_block @ k_block.transpose(-2, -1)  # (..., bq, bk): recomputed
            scores = _mask_tile(scores, q_start, k_start, shift, causal, key_padding_mask)
            p = (scores - row_lse[..., rows, :]).exp()  # (..., bq, bk): the final weights
            d_out_block = d_out[..., rows, :]  # (..., bq, d_v)
            dv_block = dv_block + p.transpose(-2, -1) @ d_out_block
            dp = d_out_block @ v_block.transpose(-2, -1)  # (..., bq, bk)
            ds = p * (dp - D[..., rows, :])  # (..., bq, bk): gradient of the scaled scores
            dq[..., rows, :] += ds @ k_block * scale
            dk_block = dk_block + ds.transpose(-2, -1) @ q_block
        dks.append(dk_block)
        dvs.append(dv_block)
    dk = torch.cat(dks, dim=-2) if dks else q.new_zeros(*batch_shape, 0, k.shape[-1])
    dv = torch.cat(dvs, dim=-2) if dvs else q.new_zeros(*batch_shape, 0, v.shape[-1])
    return dq.sum_to_size(q.shape), dk.sum_to_size(k.shape), dv.sum_to_size(v.shape)


class _FlashAttention(torch.autograd.Function):
    """Forward: the tiled loop; saved: q, k, v, out, lse; backward: the tiles recomputed."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_size, key_padding_mask):
        out, lse = tiled_attention_forward(q, k, v, causal, block_size, key_padding_mask)
        ctx.save_for_backward(q, k, v, out, lse, key_padding_mask)
        ctx.causal, ctx.block_size = causal, block_size
        return out, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse, key_padding_mask = ctx.saved_tensors
        if d_out is None:
            d_out = torch.zeros_like(out)
        dq, dk, dv = tiled_attention_backward(
            q, k, v, out, lse, d_out, ctx.causal, ctx.block_size, key_padding_mask, d_lse
        )
        return dq, dk, dv, None, None, None


def tiled_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    block_size: int = 128,
    key_padding_mask: Tensor | None = None,
    return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d_k)) v, computed tile by tile: never an (n_q, n_k) matrix, not
    even for the backward pass (FlashAttention's algorithm, in plain PyTorch).

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> output (..., n_q, d_v), equal to
    full attention to float tolerance, in values and gradients. causal=True: query i is token
    n_k - n_q + i of the sequence and sees the keys up to itself, the bottom-right alignment of
    `course_lib.attention.scaled_dot_product_attention(is_causal=True)` (n_q = n_k is lesson
    05's causal mask; one query after 9 cached keys sees all 10). key_padding_mask: bool,
    broadcastable to (..., n_k), True = may attend. A query with no key to attend gets output
    0. return_lse=True also returns lse (..., n_q), the log-sum-exp of each query's scores.

    Autograd saves only q, k, v, the output and lse; the backward pass
    (`tiled_attention_backward`) recomputes each tile's weights from lse. The largest
    temporary is a few (block_size, block_size) tiles per batch element, forward and backward.
    """
    _check_tiled(q, k, v, causal, block_size, key_padding_mask)
    check_flag(return_lse, "return_lse")
    out, lse = _FlashAttention.apply(q, k, v, causal, block_size, key_padding_mask)
    return (out, lse) if return_lse else out


def sliding_window_mask(
    n: int,
    window: int,
    causal: bool = False,
    global_tokens: Sequence[int] | Tensor | None = None,
    device: torch.device | str | None = None,
    n_k: int | None = None,
) -> Tensor:
    """Longformer's pattern: bool (n, n_k), True = query i may attend to key j.

    Key j is allowed when |i - j| <= window: `window` keys on each side, so 2 * window + 1 in
    the middle of the sequence, fewer at its ends (Longformer's paper calls the whole width
    2 * window the "window size"). causal=True keeps only i - window <= j <= i. Each index in
    `global_tokens` attends to every position and every position attends to it (still
    subject to the causal rule when causal=True).
    n_k (default n): more (or fewer) keys than queries. The queries are then the last n tokens
    of the n_k, aligned bottom-right as `scaled_dot_product_attention(is_causal=True)`: query i
    is token n_k - n + i, and the distance is measured from there (global_tokens needs n_k = n).
    """
    check_positive_int(n, "n")
    check_non_negative_int(window, "window")
    check_flag(causal, "causal")
    n_k = n if n_k is None else check_positive_int(n_k, "n_k")
    query_pos = torch.arange(n, device=device) + (n_k - n)
    offset = query_pos[:, None] - torch.arange(n_k, device=device)[None, :]  # (n, n_k): i - j
    mask = offset.abs() <= window
    if global_tokens is not None:
        if n_k != n:
            raise ValueError(
                f"global_tokens needs as many keys as queries (n_k = n), got n={n}, n_k={n_k}"
            )
        index = torch.as_tensor(global_tokens, dtype=torch.long, device=device).reshape(-1)
        if index.numel() and (index.min() < 0 or index.max() >= n):
            raise ValueError(f"global_tokens must be positions in [0, n={n}), got {index.tolist()}")
        mask[index, :] = True
        mask[:, index] = True
    if causal:
        mask &= offset >= 0
    return mask


def sliding_window_attention(
    q: Tensor, k: Tensor, v: Tensor, window: int, causal: bool = False
) -> Tensor:
    """Attention restricted to |i - j| <= window, computed on the band only.

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v); equal to full
    attention with `sliding_window_mask(n_q, window, causal, n_k=n_k)` (n_q < n_k: the queries
    are the newest tokens after cached ones, query i is token n_k - n_q + i). Memory and time
    grow as n_q * (2 * window + 1), linearly: the scores are stored as
    (..., n_q, 2 * window + 1), one row of neighbours per query, never as (n_q, n_k). A query
    with no key in its window (n_q > n_k) gets output 0.
    """
    check_qkv(q, k, v)
    check_non_negative_int(window, "window")
    check_flag(causal, "causal")
    n_q, n_k = q.shape[-2], k.shape[-2]
    shift = n_k - n_q  # query i is token i + shift
    width = 2 * window + 1
    extra = window + max(0, -shift)  # rows of padding on each side of the keys
    pad = (0, 0, extra, extra)
    first = shift + max(0, -shift)  # the padded band whose centre is query 0's token
    # (..., n_q, d, width): row i holds the keys of tokens i + shift - window .. + window
    k_band = torch.nn.functional.pad(k, pad).unfold(-2, width, 1)[..., first : first + n_q, :, :]
    v_band = torch.nn.functional.pad(v, pad).unfold(-2, width, 1)[..., first : first + n_q, :, :]
    scores = (q.unsqueeze(-2) @ k_band).squeeze(-2) / math.sqrt(q.shape[-1])  # (..., n_q, width)
    offset = torch.arange(-window, window + 1, device=q.device)  # j - i for each band column
    key_pos = torch.arange(n_q, device=q.device)[:, None] + shift + offset  # (n_q, width)
    allowed = (key_pos >= 0) & (key_pos < n_k)  # the padding at the two ends is not a key
    if causal:
        allowed &= offset <= 0
    scores = scores.masked_fill(~allowed, float("-inf"))
    any_key = allowed.any(dim=-1, keepdim=True)  # (n_q, 1): False only when n_q > n_k
    weights = scores.masked_fill(~any_key, 0.0).softmax(dim=-1).masked_fill(~allowed, 0.0)
    return (v_band @ weights.unsqueeze(-1)).squeeze(-1)  # (..., n_q, d_v)


def random_feature_projection(
    num_features: int,
    d_k: int,
    orthogonal: bool = True,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """(num_features, d_k) random directions w for positive random features.

    orthogonal=True (Performer's choice, "positive orthogonal random features") makes each
    block of d_k rows orthogonal to each other, with row lengths drawn as those of Gaussian
    vectors (chi with d_k degrees of freedom): each row is still distributed as a Gaussian
    vector, so the estimate keeps its expectation, but no two directions of a block are
    redundant and its variance is lower. orthogonal=False: independent Gaussian rows.
    """
    check_positive_int(num_features, "num_features")
    check_positive_int(d_k, "d_k")
    check_flag(orthogonal, "orthogonal")
    gaussian = torch.randn(num_features, d_k, generator=generator, dtype=torch.float64)
    if not orthogonal:
        return gaussian.to(dtype)
    blocks = []
    for start in range(0, num_features, d_k):
        square = torch.randn(d_k, d_k, generator=generator, dtype=torch.float64)
        basis, r = torch.linalg.qr(square)  # orthonormal columns
        # QR's columns are uniformly random rotations only once the signs of r's diagonal are
        # moved into them; without this they lean toward the square's own columns (a bias)
        basis = basis * torch.sign(torch.diagonal(r))
        blocks.append(basis.T[: min(d_k, num_features - start)])
    directions = torch.cat(blocks)  # (num_features, d_k), unit rows
    return (directions * gaussian.norm(dim=-1, keepdim=True)).to(dtype)


@door
def performer_features(
    x: Tensor, projection: Tensor, is_query: bool = True, stabilize: bool = True
) -> Tensor:
    """Positive random features phi(x) (..., n, m) with E[phi(q).phi(k)] = exp(q.k).

    phi(x) = exp(w.x - |x|^2 / 2) / sqrt(m) for the m rows w of `projection` (FAVOR+'s positive
    features, Choromanski et al. 2021). Every feature is positive, so the approximate weights
    are never negative, and the estimate is accurate where exp(q.k) is small, most entries of
    an attention matrix (sin/cos features have a large variance exactly there); its variance
    grows like exp(|q + k|^2), large where one key dominates.
    stabilize=True subtracts a constant inside the exp, the row's maximum for a query
    (is_query=True) or one maximum over all keys (is_query=False), so that exp cannot
    overflow. Attention's normalisation cancels it, but phi(q).phi(k) is then exp(q.k) times
    an unknown factor: use stabilize=False for the unbiased estimate itself.
    """
    if at_the_door():  # performer_attention's own calls skip the checks it made
        check_tensor(x, "x", min_ndim=2, shape_hint="(..., n, d_k)")
        check_floating(x, "x")
        check_tensor(projection, "projection", ndim=2, shape_hint="(num_features, d_k)")
        why = f"x has d_k={x.shape[-1]}; it must be (num_features, d_k), one row per feature"
        check_size(projection, "projection", 1, x.shape[-1], "columns", why)
        fix = "convert it with projection.to(x.dtype)"
        check_same_dtype((projection, x), ("projection", "x"), fix)
        check_flag(is_query, "is_query")
        check_flag(stabilize, "stabilize")
    projected = x @ projection.T  # (..., n, m)
    exponent = projected - (x * x).sum(dim=-1, keepdim=True) / 2
    if stabilize and is_query:
        exponent = exponent - exponent.amax(dim=-1, keepdim=True)
    elif stabilize:
        exponent = exponent - exponent.amax(dim=(-2, -1), keepdim=True)
    return exponent.exp() / math.sqrt(projection.shape[0])


@door
def performer_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    num_features: int = 256,
    generator: torch.Generator | None = None,
    projection: Tensor | None = None,
) -> Tensor:
    """Softmax attention approximated with positive random features, in time linear in n.

    q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v).
    With phi = `performer_features` of q / d_k^(1/4) and k / d_k^(1/4) (so that q.k is divided
    by sqrt(d_k) as in full attention):
        output = phi(q) (phi(k)^T v) / (phi(q) (phi(k)^T 1))
    The brackets are (m, d_v) and (m,): no (n_q, n_k) matrix. More features, smaller error.
    Pass `projection` (num_features, d_k) to reuse the same random directions.
    """
    check_qkv(q, k, v)
    d_k = q.shape[-1]
    if projection is None:
        projection = random_feature_projection(
            num_features, d_k, generator=generator, dtype=q.dtype
        ).to(q.device)
    else:
        check_tensor(projection, "projection", ndim=2, shape_hint="(num_features, d_k)")
        why = f"q has d_k={d_k}; it must be (num_features, d_k)"
        check_size(projection, "projection", 1, d_k, "columns", why)
        projection = projection.to(q.dtype)
    scale = d_k**-0.25
    phi_q = performer_features(q * scale, projection, is_query=True)  # (..., n_q, m)
    phi_k = performer_features(k * scale, projection, is_query=False)  # (..., n_k, m)
    kv = phi_k.transpose(-2, -1) @ v  # (..., m, d_v)
    normaliser = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # (..., n_q, 1)
    return (phi_q @ kv) / normaliser  # (..., n_q, d_v)
