"""ex10.tiled_attention_backward: FlashAttention-2's backward pass, one block of keys at a
time, from the saved output and log-sum-exp; checked against autograd of full attention.
Data: the cases, the named mistakes (FAULTS) and one wrong loop that takes a mistake's name."""

from __future__ import annotations

import math

import torch

from course_lib.validation import check_positive_int

from ...core import Task, register
from ..common import D_V_SCALE_HINT, randn
from ._memory import MEMORY_HINT, call_limited, draw_qkv, limited_case
from .tiled_attention import CAUSAL_RULE, SEQ_FROM_SHAPE_1, SHIFT_REVERSED
from .tiled_attention import FAULTS as FORWARD_FAULTS

LESSON = "lesson 10"

GRAD_SCALE = (
    "s = q k^T / sqrt(d_k), so dq = ds k / sqrt(d_k) and dk = ds^T q / sqrt(d_k) (dv has no "
    "such factor)"
)
FAULTS = {
    "seq_from_shape_1": SEQ_FROM_SHAPE_1,  # #h10b: k.shape[1] alone gives the same first failure
    "transpose_12": FORWARD_FAULTS["transpose_12"],  # #h10b: a bare size-mismatch crash before
    "no_D": (
        "D is missing: the softmax's backward is ds = p * (dp - D) with D = rowsum(d_out * out) "
        "(..., n_q, 1), one number per query (it equals sum_j p_ij dp_ij over ALL keys); "
        "ds = p * dp alone forgets that the weights of a row sum to 1"
    ),
    "D_outside": (
        "ds = p * (dp - D): D is subtracted inside the brackets, before the product with p; "
        "p * dp - D takes D from every key, even the keys whose weight p is 0"
    ),
    "D_per_block": (
        "D is summed over one block of keys only: D_i = sum_j p_ij dp_ij runs over all the keys "
        "of row i, which is why it is computed once, before the loop, as rowsum(d_out * out)"
    ),
    "D_mean": (
        "D is the mean of d_out * out over its last axis, not the sum: D_i = sum_j p_ij dp_ij = "
        "rowsum(d_out_i * out_i), so (d_out * out).sum(dim=-1, keepdim=True); the mean divides "
        "it by d_v"
    ),
    "D_total": (
        "D is one number per query, (..., n_q, 1): (d_out * out).sum() without dim= adds up "
        "every query of the batch into one number; sum over the last axis only, "
        "(d_out * out).sum(dim=-1, keepdim=True)"
    ),
    "D_query_axis": (
        "D is summed over the queries: D = rowsum(d_out * out) is one number per query, "
        "(..., n_q, 1), the sum over the LAST axis (d_v), (d_out * out).sum(dim=-1, "
        "keepdim=True); summed over dim=-2 it is (..., 1, d_v)"
    ),
    "block_softmax": (
        "the weights are recomputed with a softmax over the block: the forward normalised each "
        "row over all its keys, and that normaliser is the saved lse; p = exp(s - lse) gives "
        "the forward's weights tile by tile, with no running maximum"
    ),
    "lse_as_sum": (
        "lse is the LOG of the row's sum of exp(s): the weights are p = exp(s - lse), which is "
        "exp(s) / exp(lse), not exp(s) / lse"
    ),
    "lse_added": (
        "the log-sum-exp is added to the scores: the weights are p = exp(s - lse), the scores "
        "MINUS lse (dividing by the row's sum of exp(s)), so that each row sums to 1"
    ),
    "row_max": (
        "the weights are exp(s - m) with a row's maximum: the forward's weights are "
        "exp(s - lse), where lse = m + log(l) also holds the row's sum"
    ),
    "lse_not_column": (
        "lse (..., n_q) must be a column, (..., n_q, 1), to be subtracted from a tile of scores "
        "(..., n_q, block): lse.unsqueeze(-1); as it is, it lines up with the keys. The same "
        "holds for D: rowsum(d_out * out) with keepdim=True, (..., n_q, 1)"
    ),
    "scores_unscaled": (
        "the recomputed scores are not divided by sqrt(d_k): recompute them exactly as the "
        "forward did, s = q k^T / sqrt(d_k), before exp(s - lse)"
    ),
    "scaled_by_d_v": D_V_SCALE_HINT,
    "grads_unscaled": f"dq and dk are not scaled by 1 / sqrt(d_k): {GRAD_SCALE}",
    "dv_scaled": ("dv is scaled by 1 / sqrt(d_k): only the scores were divided, so dv = p^T d_out"),
    "causal_ignored": (
        "causal=True is ignored in the backward pass: mask each recomputed tile exactly as the "
        "forward did, so that the future keys get weight 0 and no gradient"
    ),
    "masked_with_zero": (
        "the recomputed tile's masked scores are filled with 0, not -inf: p = exp(0 - lse) is "
        "not 0, so the keys a query may not see get weight and gradient; fill them with "
        "float('-inf'), as in the forward pass, whose exp is 0"
    ),
    "top_left": (
        "with fewer queries than keys, causal=True aligns the queries with the last keys: "
        f"{CAUSAL_RULE}; your mask lets query i see keys j <= i only"
    ),
    "shift_reversed": SHIFT_REVERSED,
    "dk_dv_swapped": "dk and dv are swapped: return (dq, dk, dv), in the order of q, k, v",
    "diagonal_blocked": (
        "with causal=True a query may attend to itself, as in the forward pass: block the keys "
        "j > i, not j >= i"
    ),
    "key_pos_late": (
        "the tile's key positions start one block late: key j of the block that starts at "
        "`start` is key start + j, so move `start` on after the block, not before building "
        "its positions; with every key a block later, the first queries' weights are all 0, "
        "and so are their gradients"
    ),
    "key_pos_full_block": FORWARD_FAULTS["key_pos_full_block"],
    "key_offset_missing": (
        "the causal mask compares the query positions with the key positions inside the tile "
        "(0 .. block_size - 1): key j of the block that starts at `start` is key start + j"
    ),
    # #h19: as the forward's; before last_block_dropped, which drops the same keys here
    "stopped_at_n_q": (
        "with causal=True your loop stops at the block that starts at n_q, as if the last query "
        "were token n_q - 1: with fewer queries than keys it is token n_k - 1 and sees every "
        "key, so every block of keys gets a gradient; loop over all of range(0, n_k, block_size)"
    ),
    # #h19: the lesson's loop, a query block skipped while its FIRST query comes before the keys
    "query_blocks_first_query": (
        "with the queries split into blocks as well, a query block is skipped for a block of "
        "keys starting at k_start when its FIRST query, token q_start + n_k - n_q, comes before "
        "k_start: its later queries, up to token q_start + rows - 1 + n_k - n_q, may still see "
        "those keys; skip a query block only when its LAST query comes before k_start (or give "
        "every query block every block of keys and let the mask do the rest)"
    ),
    "last_block_dropped": (
        "the last keys get no gradient when n_k is not a multiple of block_size: loop with "
        "range(0, n_k, block_size) and slice to the end"
    ),
    "dk_scaled_twice": (
        "dk is divided by sqrt(d_k) twice: a q already scaled before the loop (as the forward "
        "scales it once) carries the factor, so dk = ds^T (q / sqrt(d_k)), with no second one"
    ),
    "ds_scaled": (
        "ds is divided by sqrt(d_k), and dq and dk are divided by it again: the factor comes "
        "in once, ds = p * (dp - D) with no factor, then dq += ds K_j / sqrt(d_k) and "
        "dK_j = ds^T q / sqrt(d_k)"
    ),
    "dq_overwritten": (
        "dq is overwritten by each block: every block of keys adds its part, so start from "
        "zeros and accumulate, dq = dq + ds K_j / sqrt(d_k) (only the last block's part is left)"
    ),
    "slice_last_axis": FORWARD_FAULTS["slice_last_axis"],  # #h18
    "full_matrix": MEMORY_HINT,
}


def wrong_backward(q, k, v, out, lse, d_out, block_size=128, causal=False, *, mistake):
    """The exercise's loop over key blocks, with the named mistake where it bites."""
    check_positive_int(block_size, "block_size")
    n_q, n_k = q.shape[-2], k.shape[-2]
    if mistake == "seq_from_shape_1":  # 3-D inputs assumed
        n_q, n_k = q.shape[1], k.shape[1]
    if mistake == "full_matrix":
        block_size = n_k
    scale = 1 / math.sqrt((v if mistake == "scaled_by_d_v" else q).shape[-1])
    grad_scale = 1.0 if mistake == "grads_unscaled" else scale
    D = (d_out * out).sum(-2 if mistake == "D_query_axis" else -1, keepdim=True)  # (..., n_q, 1)
    if mistake in ("D_mean", "D_total"):  # rowsum read as a mean over d_v; .sum() without dim
        D = D / out.shape[-1] if mistake == "D_mean" else D.sum()
    row_lse = lse if mistake == "lse_not_column" else lse.unsqueeze(-1)
    shift = {"top_left": 0, "shift_reversed": n_q - n_k}.get(mistake, n_k - n_q)
    query_pos = torch.arange(n_q)[:, None] + shift
    dq = torch.zeros_like(q)
    dks, dvs = [], []
    last = {"last_block_dropped": n_k - block_size + 1, "stopped_at_n_q": n_q if causal else n_k}
    last = last.get(mistake, n_k)
    for start in range(0, last, block_size):
        k_block = k[..., start : start + block_size, :]
        v_block = v[..., start : start + block_size, :]
        if mistake == "slice_last_axis":  # k[..., start : end]: d_k cut, not the keys
            k_block = k[..., start : start + block_size]
        s = q @ k_block.transpose(*((1, 2) if mistake == "transpose_12" else (-2, -1)))
        if mistake != "scores_unscaled":
            s = s * scale
        if causal and mistake != "causal_ignored":
            first = {"key_offset_missing": 0, "key_pos_late": start + block_size}.get(
                mistake, start
            )
            width = block_size if mistake == "key_pos_full_block" else s.shape[-1]
            key_pos = torch.arange(first, first + width)
            blocked = key_pos >= query_pos if mistake == "diagonal_blocked" else key_pos > query_pos
            if mistake == "query_blocks_first_query":  # skipped by the block's first query
                first_token = torch.arange(n_q) // block_size * block_size + n_k - n_q
                blocked = blocked | (start > first_token[:, None])
            s = s.masked_fill(blocked, 0.0 if mistake == "masked_with_zero" else float("-inf"))
        if mistake == "block_softmax":
            p = torch.nan_to_num(s.softmax(-1))
        elif mistake in ("lse_as_sum", "lse_added"):  # exp(s) / lse; exp(s + lse)
            p = s.exp() / row_lse if mistake == "lse_as_sum" else (s + row_lse).exp()
        elif mistake == "row_max":
            p = (s - s.amax(-1, keepdim=True)).exp()
        else:
            p = (s - row_lse).exp()  # (..., n_q, bk)
        dvs.append(p.transpose(-2, -1) @ d_out * (scale if mistake == "dv_scaled" else 1.0))
        dp = d_out @ v_block.transpose(-2, -1)
        if mistake == "no_D":
            ds = p * dp
        elif mistake == "D_outside":
            ds = p * dp - D
        elif mistake == "D_per_block":
            ds = p * (dp - (p * dp).sum(-1, keepdim=True))
        else:  # ds_scaled: the 1 / sqrt(d_k) of dq and dk put on ds as well
            ds = p * (dp - D) * (scale if mistake == "ds_scaled" else 1.0)
        dq = (0 if mistake == "dq_overwritten" else dq) + ds @ k_block * grad_scale
        twice = scale if mistake == "dk_scaled_twice" else 1.0  # q pre-scaled, then again
        dks.append(ds.transpose(-2, -1) @ q * grad_scale * twice)
    dk, dv = torch.cat(dks, dim=-2), torch.cat(dvs, dim=-2)
    if mistake in ("last_block_dropped", "stopped_at_n_q") and dk.shape[-2] < n_k:
        pad = torch.zeros(*dk.shape[:-2], n_k - dk.shape[-2], dk.shape[-1], dtype=dk.dtype)
        dk, dv = torch.cat([dk, pad], -2), torch.cat([dv, pad[..., : v.shape[-1]]], -2)
    return (dq, dv, dk) if mistake == "dk_dv_swapped" else (dq, dk, dv)


def _full_gradients(q, k, v, d_out, causal):
    """Autograd of full attention (the course's, bottom-right causal), in float64."""
    from ....attention import scaled_dot_product_attention

    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    n_q, n_k = q.shape[-2], k.shape[-2]
    mask = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q) if causal else None
    out, _ = scaled_dot_product_attention(*leaves, mask)
    grads = torch.autograd.grad(out, leaves, d_out.double())
    return tuple(g.to(q.dtype) for g in grads)


@register
class TiledAttentionBackward(Task):
    id = "ex10.tiled_attention_backward"
    lesson = f"{LESSON}, section 'The backward pass: recompute, do not store'"
    reference = "course_lib.efficient_attention.tiled_attention_backward"
    forbidden = tuple(
        "torch.nn.functional.scaled_dot_product_attention torch.nn.MultiheadAttention "
        "course_lib.attention.scaled_dot_product_attention torch.autograd.grad "
        "torch.Tensor.backward torch.autograd.backward".split()
    )

    def cases(self, gen):
        from ....efficient_attention import tiled_attention_forward

        def case(description, shape_q, shape_k, d_v, block_size, causal=False, **kw):
            dtype = kw.get("dtype", torch.float64)
            q, k, v = draw_qkv(gen, shape_q, shape_k, d_v, dtype, kw.get("scale", 1.0))
            d_out = randn(gen, *shape_q[:-1], d_v, dtype=dtype)
            forward_block = block_size if isinstance(block_size, int) and block_size > 0 else 4
            out, lse = tiled_attention_forward(q, k, v, causal=causal, block_size=forward_block)
            args = (q, k, v, out, lse, d_out)
            return limited_case(description, args, block_size, causal, kw.get("raises"))

        f32 = torch.float32
        # fmt: off
        return [  # q's shape, k's shape, d_v, block_size, causal
            case("(2, 3, 10, 8), block_size=4 (10 is not a multiple of 4)",
                 (2, 3, 10, 8), (2, 3, 10, 8), 8, 4),
            case("the same shapes with causal=True", (2, 3, 10, 8), (2, 3, 10, 8), 8, 4, True),
            case("n_q=7 != n_k=13, d_v=5, block_size=4", (2, 7, 6), (2, 13, 6), 5, 4),
            case("fewer queries than keys, causal=True: q (2, 5, 4), k (2, 9, 4), block_size=4 "
                 "(query i is token 4 + i)", (2, 5, 4), (2, 9, 4), 4, 4, True),
            case("large scores (3, 9, 6), block_size=3, causal=True",
                 (3, 9, 6), (3, 9, 6), 6, 3, True, scale=4.0),
            # d = 1: a tile of more keys than block_size (the lesson's 4, say) is over the limit
            case("block_size=1, q, k, v (2, 6, 1), causal=True", (2, 6, 1), (2, 6, 1), 1, 1, True),
            case("block_size=16 larger than n=5: one block, (1, 5, 4)",
                 (1, 5, 4), (1, 5, 4), 4, 16),
            case("float32, (2, 12, 8), block_size=5, causal=True: the gradients keep q's dtype",
                 (2, 12, 8), (2, 12, 8), 8, 5, True, dtype=f32),
            case("a long sequence under a memory limit: (1, 1024, 16), block_size=128, "
                 "causal=True (no (1024, 1024) tensor is allowed)",
                 (1, 1024, 16), (1, 1024, 16), 16, 128, True, dtype=f32),
            case("few queries, many keys: q (2, 32, 8), k and v (2, 2048, 8), block_size=128",
                 (2, 32, 8), (2, 2048, 8), 8, 128, dtype=f32),
            case("q (1, 256, 8), k and v (1, 4096, 8), block_size=128: the weights of all the "
                 "blocks may not be kept (in a list) for a second pass",
                 (1, 256, 8), (1, 4096, 8), 8, 128, dtype=f32),
            # #h19: n_k - n_q = 5 is no multiple of block_size, and a block holds several queries
            case("fewer queries than keys, n_k - n_q = 5 not a multiple of block_size: q (2, 6, "
                 "4), k (2, 11, 4), block_size=4, causal=True (query i is token 5 + i)",
                 (2, 6, 4), (2, 11, 4), 4, 4, True),
            *(case(f"block_size={size} must raise a ValueError",
                   (1, 4, 4), (1, 4, 4), 4, size, raises=ValueError) for size in (0, -1, 2.5)),
        ]
        # fmt: on

    def call(self, obj, case):
        return call_limited(obj, case)

    def expected(self, case):
        if case.raises is not None:
            return None
        q, k, v, _, _, d_out = case.args
        return _full_gradients(q, k, v, d_out, case.kwargs["causal"])

    def diagnose(self, got, want, case):
        if isinstance(got, (tuple, list)) and len(got) == 3:
            names = ("dq", "dk", "dv")
            wrong = [
                n
                for n, g, w in zip(names, got, want, strict=True)
                if not (
                    isinstance(g, torch.Tensor)
                    and g.shape == w.shape
                    and torch.allclose(g.double(), w.double(), rtol=1e-4, atol=1e-5)
                )
            ]
            root = math.sqrt(case.args[0].shape[-1])  # a bullet's "/ sqrt(d_k)" left out
            for name, g, w in zip(names[:2], got[:2], want[:2], strict=True):
                if wrong == [name] and torch.allclose(g.double(), w.double() * root, 1e-4, 1e-5):
                    return f"{name} is sqrt(d_k) times too large: {GRAD_SCALE}"
            if wrong and len(wrong) < 3:
                return f"only {', '.join(wrong)} differ{'s' if len(wrong) == 1 else ''}"
        return None

    mistake_table, wrong = FAULTS, staticmethod(wrong_backward)
