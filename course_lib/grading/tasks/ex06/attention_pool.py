"""ex06.attention_pool (transfer: learned queries that do not come from any sequence)."""

from __future__ import annotations

import torch

from ...core import Case, Task, register
from ..common import D_V_SCALE_HINT, RENORMALISED_HINT, far_blocked_key, randn, wrong_attention
from ..common import lengths_mask as source_padding_mask
from ..ex02 import FLOAT32_SCALE, SCALED_AFTER_SOFTMAX
from ..ex05 import ATTENTION_MISTAKES
from . import _shared as shared
from .cross_attention import CROSS_MISTAKES


def _pool(x, queries, w_k, w_v, mask=None, *, mistake=""):
    if mistake == "kv_kept":  # k and v of the check's first call, whose w_k and w_v were negated
        w_k, w_v = -w_k, -w_v
    if mistake == "x_zeroed" and mask is not None:  # the padded tokens zeroed, nothing masked
        x, mask = x * mask[..., None], None
    q = x @ w_k if mistake == "queries_from_x" else queries  # (m, d_k) broadcasts over batch
    q = q * 0 if mistake == "mean_pooled" else q  # equal scores: the mean of the real tokens
    keys = x @ w_k
    if mistake == "k_dot_T":  # wrong_attention's k.transpose(-2, -1) is then k.T, every axis
        keys = keys.permute(*range(keys.dim() - 1, -1, -1)).transpose(-2, -1)
    scale = {
        "d_v": w_v.shape[-1],
        "d_model": x.shape[-1],
        "no_scale": 1,
        "num_queries": len(queries),
        "by_d_k": queries.shape[-1] ** 2,
        "times_sqrt": 1 / queries.shape[-1],
        "power_then_half": (2 * queries.shape[-1]) ** 2,  # scores / d_k ** 1/2
        "n_tokens": x.shape[-2],
        "scaled_after_softmax": 1,
        "float32_scale": float(torch.tensor(float(queries.shape[-1])).sqrt()) ** 2,
    }.get(mistake)
    if mask is not None and mistake != "flat_mask":  # else (batch, n) against (batch, m, n)
        mask = mask.unsqueeze(-1 if mistake == "mask_last_axis" else -2)  # (batch, n, 1): slip
    mask = None if mistake == "mask_ignored" else mask
    values = x @ (w_k if mistake == "values_with_w_k" else w_v)
    if mistake in shared.SOFTMAX_SLIPS:
        return shared._softmax_slip_attention(q, keys, values, mask, mistake)
    pooled, weights = wrong_attention(
        q,
        keys,
        values,
        mask,
        scale=scale,
        fill=0.0 if mistake == "fill_zero" else float("-inf"),
        dim={"softmax_over_queries": -2, "softmax_over_batch": 0}.get(mistake, -1),
        inverted=mistake.startswith("mask_inverted"),
        zero_after=mistake in ("zero_after", "renormalised", "inf_after_softmax"),
        nan_to_zero=mistake == "mask_inverted_zeroed",
        renormalised=mistake == "renormalised",
        log=mistake == "log_softmax",
    )
    if mistake == "scaled_after_softmax":  # softmax(queries k^T) / sqrt(d_k)
        weights = weights / queries.shape[-1] ** 0.5
        pooled = weights @ values
    if mistake == "inf_after_softmax" and mask is not None:  # the -inf fill after the softmax
        weights = weights.masked_fill(~mask, float("-inf"))
        pooled = weights @ values
    return (weights, pooled) if mistake == "swapped" else (pooled, weights)


POOL_MISTAKES = {
    "queries_from_x": "the queries are the learned `queries`, the same for every sequence in the "
    "batch; you computed them from x (that is self-attention, with one output per token instead "
    "of one per query)",
    "mask_ignored": "the mask is ignored: padded tokens (mask False) must get weight 0; turn the "
    "(batch, n) mask into (batch, 1, n) so it applies to every query",
    "flat_mask": "the (batch, n) mask does not line up with the (batch, num_queries, n) scores "
    "(it would pair the batch axis with the queries'): use mask[:, None, :], (batch, 1, n)",
    "softmax_over_queries": "the softmax runs over the keys (the last axis, the tokens of x), so "
    "that each query's weights sum to 1: take it with dim=-1, not over the queries",
    "no_scale": "divide the scores by sqrt(d_k), the size of the queries and keys",
    "d_v": (D_V_SCALE_HINT),
    "d_model": "divide the scores by sqrt(d_k), the size of the queries and keys, not by "
    "sqrt(d_model), the size of x",
    "num_queries": "divide the scores by sqrt(d_k), queries.shape[-1] (the size of each query), "
    "not by sqrt(queries.shape[0]), the number of queries",
    "mask_inverted": "the mask is inverted: True = a real token, which may be attended to; block "
    "the positions where the mask is False (~mask)",
    # the same, through scaled_dot_product_attention, which gives a fully blocked row zeros
    "mask_inverted_zeroed": "the mask is inverted: True = a real token, which may be attended "
    "to; pass it on as it is (mask.unsqueeze(-2)), not ~mask",
    "fill_zero": "you filled the scores of padded tokens with 0, but exp(0) = 1: they still get "
    "weight. Fill them with float('-inf') before the softmax",
    "zero_after": "you zeroed the weights of padded tokens AFTER the softmax, so the weights no "
    "longer sum to 1: fill their SCORES with -inf before the softmax",
    "renormalised": RENORMALISED_HINT,
    "values_with_w_k": "the values are projected with w_k: v = x @ w_v (the keys and the values "
    "have a matrix each)",
    "x_zeroed": "zeroing the padded tokens of x still gives each a score of 0, and exp(0) = 1: "
    "they keep weight. Fill their SCORES with -inf before the softmax",
    "by_d_k": "you divided the scores by d_k; divide them by its square root, d_k ** 0.5 "
    "(d_k = queries.shape[-1])",
    "k_dot_T": CROSS_MISTAKES["k_dot_T"],
    "times_sqrt": "you multiplied the scores by sqrt(d_k); divide them by it, scores / d_k ** 0.5",
    "power_then_half": shared.POWER_THEN_HALF,
    "n_tokens": "you scaled by the square root of the number of tokens (n, x.shape[1]); d_k is "
    "the length of each query and key vector, queries.shape[-1]",
    "mask_last_axis": "mask.unsqueeze(-1) is (batch, n, 1): it puts the tokens on the queries' "
    "axis. The scores are (batch, num_queries, n), so add the axis in the middle: "
    "mask.unsqueeze(1), or mask[:, None, :], (batch, 1, n)",
    "mean_pooled": "you averaged the tokens, each real token with the same weight: the weights "
    "come from each learned query's scores against the keys, softmax(queries @ k^T / "
    "sqrt(d_k)) over the tokens, so each query picks its own mix",
    "log_softmax": shared.LOG_SOFTMAX,
    "softmax_over_batch": "softmax(dim=0) normalises across the sequences of the batch; the "
    "softmax runs over the tokens of x, the last axis of the (batch, num_queries, n) scores: "
    "softmax(dim=-1)",
    "float32_scale": FLOAT32_SCALE,
    "scaled_after_softmax": SCALED_AFTER_SOFTMAX,
    "inf_after_softmax": "you filled the padded tokens with -inf AFTER the softmax, so the "
    "weights hold -inf and the output NaN: two right steps in the wrong order. Fill the SCORES "
    "first, scores.masked_fill(~mask[:, None, :], float('-inf')), then take the softmax",
    "float32_softmax": ATTENTION_MISTAKES["float32_softmax"],
    "swapped": "the return order is swapped: return (pooled, weights), the pooled vectors first",
    "no_max": shared.NO_MAX,
    "max_of_all": shared.MAX_OF_ALL,
    "kv_kept": shared.KV_KEPT.format(read="x"),
}


@register
class AttentionPool(Task):
    id = "ex06.attention_pool"
    lesson = (
        "lesson 06, sections 'Queries from one sequence, keys and values from another' and "
        "'A source padding mask'"
    )
    reference = "course_lib.cross_attention.attention_pool"
    backward = True  # the queries and weights are learned: its gradients are judged too
    # a pool may call the learner's own cross_attention (identity w_q): a mistake there is
    # told as 'fix cross_attention first', not as this task's hint for a slip not made here
    depends_on = ("cross_attention",)
    mistake_table = POOL_MISTAKES
    wrong = staticmethod(_pool)
    forbidden = (
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.MultiheadAttention",
        "course_lib.cross_attention.cross_attention",
    )

    def call(self, obj, case):  # a cache of k and v between calls is stale at once
        return shared._after_a_call_on_other_weights(super().call, obj, case, (2, 3))

    def cases(self, gen):
        def case(description, sizes, lengths=None, dtype=torch.float32):
            batch, n, d_model, m, d_k, d_v = sizes
            x = randn(gen, batch, n, d_model, dtype=dtype)
            queries = randn(gen, m, d_k, dtype=dtype)
            w_k = randn(gen, d_model, d_k, dtype=dtype) / d_model**0.5
            w_v = randn(gen, d_model, d_v, dtype=dtype) / d_model**0.5
            kwargs = {} if lengths is None else {"mask": source_padding_mask(lengths, n)[:, 0]}
            return Case(description, (x, queries, w_k, w_v), kwargs)

        (queries, memory, keep), eye = far_blocked_key(), torch.eye(4)
        # sizes: (batch, n, d_model, number of queries, d_k, d_v)
        return [
            case("x (2, 6, 8), 3 queries (3, 4), w_k (8, 4), w_v (8, 5), no mask",
                 (2, 6, 8, 3, 4, 5)),
            case("x (3, 5, 8), 2 queries (2, 8), mask (3, 5) of lengths [5, 2, 3]",
                 (3, 5, 8, 2, 8, 8), [5, 2, 3]),
            case("one query (1, 4) pooling x (4, 7, 6) into one vector per sequence, lengths "
                 "[7, 1, 4, 6]",
                 (4, 7, 6, 1, 4, 3), [7, 1, 4, 6]),
            case("batch 1, more queries than tokens: x (1, 2, 4), queries (5, 4)",
                 (1, 2, 4, 5, 4, 4)),
            # d_k = 18, whose root float32 holds worst (and 192 outputs): a float32 scale,
            # torch.sqrt(torch.tensor(d_k)), fails here under every seed (d_k = 6: not always)
            case("float64 x (2, 9, 12), 4 queries (4, 18), w_v (12, 24), lengths [3, 9]",
                 (2, 9, 12, 4, 18, 24), [3, 9], torch.float64),
            Case(f"x (1, 2, 4), one query (1, 4) of 10s, identity w_k and w_v, mask (1, 2) = "
                 f"[True, False]: {shared.FAR_BLOCKED.replace('memory position', 'token')}",
                 (memory, queries[0], eye, eye), {"mask": keep}),
            # as cross_attention's last case: a softmax by hand must subtract each row's maximum
            Case(f"x (1, 2, 4), queries (2, 4) of 10s and of -10s, identity w_k and w_v, mask "
                 f"(1, 2) all True: {shared.OVERFLOW.replace('each row', 'each query')}",
                 (memory, torch.cat([queries[0], -queries[0]]), eye, eye),
                 {"mask": torch.ones(1, 2, dtype=torch.bool)}),
        ]  # fmt: skip
