"""ex02.self_attention: the queries, keys and values projected from one x by learned
weights, then scaled dot-product attention."""

from __future__ import annotations

import math

import torch

from ...core import Case, register
from ..common import HintOnError, randn, randns
from ._shared import F64, _softmax_dim_2
from .scaled_dot_product_attention import ScaledDotProductAttention

SELF_LESSON = "lesson 02, section 'Learned projections: W_Q, W_K, W_V'"
_SDPA = ScaledDotProductAttention()
_FIXED_AXES = (
    "your projection works only for x with one number of axes (an einsum that names them all, "
    "'bnd,de->bne' or 'nd,de->ne'; torch.mm, 2-D only; torch.bmm, 3-D only): x may be 2-D or "
    "carry several batch axes, (..., n, d_model). Use x @ w_q, which applies w_q to the last "
    "axis whatever comes before it (or torch.einsum('...nd,de->...ne', x, w_q))"
)
_WRONG_SIDE = (
    "the projections are applied on the wrong side: with x (..., n, d_model) and "
    "w_q (d_model, d_k), compute q = x @ w_q (and the same for k and v)"
)


@register
class SelfAttention(HintOnError):
    id = "ex02.self_attention"
    lesson = SELF_LESSON
    reference = "course_lib.attention.self_attention"
    backward = True  # x and the weights are learned: its gradients are judged too
    depends_on = ("scaled_dot_product_attention",)
    mistake_table = {
        **dict.fromkeys(("linear_side", "left_side", "left_side_transposed"), _WRONG_SIDE),
        **dict.fromkeys(("einsum_proj_3d", "einsum_proj_2d", "mm_proj", "bmm_proj"), _FIXED_AXES),
        "f_linear": "F.linear(x, w) computes x @ w.T, for nn.Linear's weights of shape (out, in); "
        "w_q here is (d_model, d_k): q = x @ w_q",
        "keys_from_w_q": "your keys were projected with w_q, so each score is a query against a "
        "query (the scores come out symmetric); project the keys with their own weights, "
        "k = x @ w_k",
        "by_sqrt_d_model": "you scaled by sqrt(d_model), the width of x; the scale is "
        "sqrt(d_k), the width of the projected queries and keys (w_q.shape[-1])",
        "values_from_w_k": "your values were projected with w_k, so they have the keys' width "
        "d_k; project them with their own weights, v = x @ w_v",
        "k_v_swapped": "the keys came out with the values' width: the attention takes (q, k, v) "
        "in that order, the keys (x @ w_k) second and the values (x @ w_v) third",
        "q_k_swapped": "the queries and keys are swapped (each row of the weights is a key's): "
        "the attention takes (q, k, v), with q = x @ w_q first and k = x @ w_k second",
        "keys_unprojected": "your keys are x itself: project them too, k = x @ w_k (the "
        "queries, keys and values each have their own weights)",
        "values_unprojected": "your values are x itself: project them too, v = x @ w_v (the "
        "queries, keys and values each have their own weights)",
        "q_v_swapped": "the queries and values are swapped: the attention takes (q, k, v), with "
        "q = x @ w_q first and v = x @ w_v third",
        "squeezed_batch": "squeeze() drops every axis of length 1, here the batch axis of one "
        "sentence too; keep x's batch axes: output (..., n, d_v), weights (..., n, n)",
        "keys_transposed": "you passed the keys transposed, (..., d_k, n): the attention takes k "
        "as (..., n, d_k), one key per row like q, and transposes it itself for q k^T; pass "
        "k = x @ w_k as it is",
        "residual": "you added x to the output (a residual connection: exercise 07's encoder "
        "layer adds it around the attention); self-attention itself returns weights @ v, of "
        "width d_v, with no x added (the sum can be formed only when d_v == d_model)",
        **{
            f"attention: {mistake}": "the projections are right, but the attention step is not: "
            f"{hint} (check ex02.scaled_dot_product_attention)"
            for mistake, hint in ScaledDotProductAttention.mistake_table.items()
            if mistake not in ("k_q_order", "by_sqrt_n_q")  # the same as q_k_swapped, by_sqrt_n_k
        },
    }

    call = ScaledDotProductAttention.call  # a dropout draws the mask the attention's rows draw

    def _hint_for_error(self, obj, case, failure, error=None):
        hint = HintOnError._hint_for_error(self, obj, case, failure, error)
        if hint is None and _softmax_dim_2(failure, error, case):
            return self.mistake_table["attention: softmax_dim_2"]
        return hint

    diagnose = ScaledDotProductAttention.diagnose  # a dropout of any p, a float32 step

    def cases(self, gen):
        return [
            Case(
                "x (5, 8), w_q (8, 4), w_k (8, 4), w_v (8, 6)",
                (randn(gen, 5, 8), *randns(gen, (8, 4), (8, 4), (8, 6), scale=0.3)),
            ),
            Case(
                "square weights, x (4, 4), w_q, w_k, w_v (4, 4)",
                randns(gen, (4, 4), (4, 4), (4, 4), (4, 4)),
            ),
            Case(
                "a batch with square weights: x (2, 6, 8), w_q, w_k, w_v (8, 8)",
                (randn(gen, 2, 6, 8), *randns(gen, (8, 8), (8, 8), (8, 8), scale=0.3)),
            ),
            Case(
                "a batch: x (3, 5, 6), w_q (6, 4), w_k (6, 4), w_v (6, 2)",
                (randn(gen, 3, 5, 6), *randns(gen, (6, 4), (6, 4), (6, 2), scale=0.4)),
            ),
            Case(  # d_k = 19: float32 rounds its root most of any d_k < 20 (a float32 scale fails)
                "float64: x (2, 2, 7, 5), w_q (5, 19), w_k (5, 19), w_v (5, 4)",
                randns(gen, (2, 2, 7, 5), (5, 19), (5, 19), (5, 4), dtype=F64, scale=0.67),
            ),
            Case(
                "one sentence: x (1, 5, 6), w_q (6, 4), w_k (6, 4), w_v (6, 3)",
                randns(gen, (1, 5, 6), (6, 4), (6, 4), (6, 3), scale=0.4),
            ),
            Case(  # an inline softmax without the maximum gives NaN here, under every seed
                "float64, large values: x (2, 4, 8), w_q, w_k (8, 4) all of size 10, w_v (8, 3) "
                "(scores in the thousands: exp overflows unless the maximum is subtracted)",
                (
                    *randns(gen, (2, 4, 8), (8, 4), (8, 4), dtype=F64, scale=10.0),
                    randn(gen, 8, 3, dtype=F64),
                ),
            ),
        ]

    def wrong(self, x, w_q, w_k, w_v, *, mistake):
        project = {
            "linear_side": lambda w: x @ w.transpose(-2, -1),
            "left_side": lambda w: w @ x,
            "left_side_transposed": lambda w: w @ x.transpose(-2, -1),
            "f_linear": lambda w: torch.nn.functional.linear(x, w),
            "einsum_proj_3d": lambda w: torch.einsum("bnd,de->bne", x, w),  # one batch axis
            "einsum_proj_2d": lambda w: torch.einsum("nd,de->ne", x, w),  # none
            "mm_proj": lambda w: torch.mm(x, w),
            "bmm_proj": lambda w: torch.bmm(x, w.expand(x.shape[0], *w.shape)),
        }.get(mistake, lambda w: x @ w)
        q, k = project(w_q), project(w_q if mistake == "keys_from_w_q" else w_k)
        v = project(w_k if mistake == "values_from_w_k" else w_v)
        if mistake == "by_sqrt_d_model":  # q k^T / sqrt(d_k) becomes q k^T / sqrt(d_model)
            q = q * math.sqrt(q.shape[-1] / x.shape[-1])
        qkv = {
            "q_k_swapped": (k, q, v),
            "k_v_swapped": (q, v, k),
            "keys_unprojected": (q, x, v),
            "values_unprojected": (q, k, x),
            "q_v_swapped": (v, k, q),
            "keys_transposed": (q, k.transpose(-2, -1), v),
        }.get(mistake, (q, k, v))
        # a right projection feeding a wrong attention (e.g. the learner's own task 2)
        results = _SDPA.wrong(*qkv, mistake=mistake.removeprefix("attention: "))
        if mistake == "residual":  # x + attention(x): a crash unless d_v == d_model
            return results[0] + x, results[1]
        return tuple(r.squeeze() for r in results) if mistake == "squeezed_batch" else results
