"""ex06.cross_attention."""

from __future__ import annotations

import torch

from ....attention import scaled_dot_product_attention
from ...core import Case, Task, register
from ..common import (
    D_K_FROM_SHAPE_2,
    D_V_SCALE_HINT,
    RENORMALISED_HINT,
    far_blocked_key,
    randn,
    wrong_attention,
)
from ..common import lengths_mask as source_padding_mask
from ..ex02 import FLOAT32_SCALE, SCALED_AFTER_SOFTMAX
from ..ex05 import ATTENTION_MISTAKES
from ._shared import (
    FAR_BLOCKED,
    KV_KEPT,
    LOG_SOFTMAX,
    MAX_OF_ALL,
    NO_MAX,
    OVERFLOW,
    POWER_THEN_HALF,
    SOFTMAX_SLIPS,
    _after_a_call_on_other_weights,
    _softmax_slip_attention,
)

VALUES_FROM_X = (
    "the values come from memory, like the keys: v = memory @ w_v, then output = weights @ v. "
    "x gives only the queries; the weights (n_q, n_kv) mix memory's n_kv values"
)
KEYS_FROM_X = (
    "the keys come from memory, like the values: k = memory @ w_k. x gives only the queries, so "
    "that the scores q k^T are (n_q, n_kv): one per query and memory position"
)


CROSS_MISTAKES = {
    "queries_from_memory": "the queries come from x (the sequence that asks) and the keys and "
    "values from memory (the sequence that is read): q = x @ w_q, k = memory @ w_k, "
    "v = memory @ w_v. The output has one row per position of x",
    "mask_ignored": "memory_mask was ignored: padded memory positions must get zero weight; pass "
    "it on to the attention (True = may attend)",
    "mask_inverted": "the mask is inverted: in course_lib a mask means True = may attend, so "
    "padded positions (False) are the ones to block",
    # by hand, masked_fill(memory_mask, -inf): a sentence with no padding is blocked whole, NaN
    "mask_inverted_nan": "the mask is inverted: in course_lib a mask means True = may attend, so "
    "fill the scores where it is False, masked_fill(~memory_mask, float('-inf'))",
    "scaled_by_d_v": D_V_SCALE_HINT,
    "masked_with_zero": "a masked score of 0 still gets weight exp(0) after the softmax: fill the "
    "masked scores with -inf (float('-inf')), as in lesson 05",
    "softmax_over_queries": "the softmax runs over the keys (the memory positions, the last "
    "axis, dim=-1): each query's weights sum to 1",
    "unscaled": "the scores are not scaled: divide q·k by sqrt(d_k), d_k being the size "
    "of the queries and keys (w_q.shape[1])",
    "scaled_by_d_model": "divide by sqrt(d_k), the size of the queries and keys "
    "(w_q.shape[1]), not by sqrt(d_model), the size of x: here they differ",
    "zero_after": "you zeroed the masked weights AFTER the softmax, so the rows no longer sum "
    "to 1: fill the masked SCORES with -inf before the softmax",
    "renormalised": RENORMALISED_HINT,
    "heads_axis": ATTENTION_MISTAKES["heads_axis"],
    "weights_transposed": "w_q, w_k and w_v are (d_model, d_k) and (d_model, d_v): project with "
    "them as they are, x @ w_q; x @ w_q.T (or F.linear(x, w_q)) is nn.Linear's convention, "
    "whose weight is (out, in)",
    "d_k_from_shape_2": D_K_FROM_SHAPE_2,
    "keys_with_w_q": "the keys are projected with w_q: k = memory @ w_k (each of q, k and v has "
    "its own matrix)",
    "transpose_1_2": "k.transpose(1, 2) swaps the last two axes only when k is 3-D; with extra "
    "batch dimensions it moves a batch axis instead: use k.transpose(-2, -1)",
    # after transpose_1_2, whose 4-D crash k.T's reproduces
    "k_dot_T": "k.T reverses every axis of k, the batch's too: transpose the last two only, "
    "k.transpose(-2, -1) (or k.mT)",
    "bmm": "torch.bmm takes 3-D tensors only; with extra batch dimensions use @ (torch.matmul), "
    "which broadcasts over every leading dimension",
    "values_with_w_k": "the values are projected with w_k: v = memory @ w_v (the keys and the "
    "values have a matrix each)",
    "by_d_k": "you divided the scores by d_k; divide them by its square root, d_k ** 0.5 "
    "(d_k = w_q.shape[1])",
    "times_sqrt": "you multiplied the scores by sqrt(d_k); divide them by it, "
    "q @ k.transpose(-2, -1) / d_k ** 0.5",
    "power_then_half": POWER_THEN_HALF,
    # before by_sqrt_n_q: the case where d_k = 5 first tells the two apart has n_q = 4
    "lesson_d_k": "you scaled by sqrt(4), the lesson's d_k, on inputs whose d_k is not 4: take "
    "d_k from the inputs, q.shape[-1] (or w_q.shape[1])",
    "by_sqrt_n_kv": "you scaled by the square root of the number of memory positions (n_kv, "
    "k.shape[-2]); d_k is the length of each query and key vector, the last dimension "
    "q.shape[-1]",
    "by_sqrt_n_q": "you scaled by the square root of the number of queries (n_q, q.shape[-2]); "
    "d_k is the length of each query and key vector, the last dimension q.shape[-1]",
    "log_softmax": LOG_SOFTMAX,
    "softmax_over_batch": "softmax(dim=0) normalises across the sequences of the batch; the "
    "softmax runs over the keys, the memory positions, the last axis: softmax(dim=-1)",
    "float32_scale": FLOAT32_SCALE,
    "scaled_after_softmax": SCALED_AFTER_SOFTMAX,
    "inf_after_softmax": "you filled the masked positions with -inf AFTER the softmax, so the "
    "weights hold -inf and the output NaN: two right steps in the wrong order. Fill the masked "
    "SCORES first, scores.masked_fill(~memory_mask, float('-inf')), then take the softmax",
    "memory_zeroed": "zeroing the padded memory positions still gives each a score of 0, and "
    "exp(0) = 1: they keep weight. Leave memory as it is and fill their SCORES with -inf before "
    "the softmax, where memory_mask is False",
    "float32_softmax": ATTENTION_MISTAKES["float32_softmax"],
    "swapped": ATTENTION_MISTAKES["swapped"],
    "no_max": NO_MAX,
    "max_of_all": MAX_OF_ALL,
    "queries_with_w_k": "the queries are projected with w_k and the keys with w_q: q = x @ w_q, "
    "k = memory @ w_k (each has its own matrix; swapped, every score changes)",
    **dict.fromkeys(("values_from_x", "values_from_x_sdpa"), VALUES_FROM_X),
    # through scaled_dot_product_attention only: by hand, k @ q.T crashes with the same error
    "keys_from_x_sdpa": KEYS_FROM_X,
    "kv_kept": KV_KEPT.format(read="memory"),
}


def wrong_cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None, *, mistake=""):
    """Cross-attention by hand, (output, weights), with one named mistake."""
    queries, read, mask = x, memory, memory_mask
    if mistake == "kv_kept":  # k and v of the check's first call, whose w_k and w_v were negated
        w_k, w_v = -w_k, -w_v
    if mistake == "weights_transposed":  # x @ w.T, nn.Linear's (out, in) convention
        w_q, w_k, w_v = w_q.mT, w_k.mT, w_v.mT
        queries @ w_q  # q first, as a learner's does: a crash is then the same one
    if mistake == "heads_axis" and mask is not None:  # lesson 03's habit, mask.unsqueeze(1)
        mask = mask.unsqueeze(1)
    if mistake == "queries_from_memory":
        queries, read = memory, x
        mask = None if mask is None else mask.transpose(-2, -1)
    sizes = {"scaled_by_d_v": w_v.shape[-1], "scaled_by_d_model": x.shape[-1], "unscaled": 1}
    sizes["d_k_from_shape_2"] = (queries @ w_q).shape[2]
    d_k = w_q.shape[-1]  # the scale's slips: d_k unrooted, multiplied, a sequence's length
    sizes |= {"by_d_k": d_k**2, "times_sqrt": 1 / d_k, "lesson_d_k": 4, "scaled_after_softmax": 1}
    sizes["power_then_half"] = (2 * d_k) ** 2  # scores / d_k ** 1/2: (scores / d_k) / 2
    sizes["float32_scale"] = float(torch.tensor(float(d_k)).sqrt()) ** 2  # a float32 root, squared
    sizes |= {"by_sqrt_n_kv": read.shape[-2], "by_sqrt_n_q": queries.shape[-2]}
    if mistake == "memory_zeroed" and mask is not None:  # memory * mask: pads read as 0, unmasked
        read, mask = read * mask.transpose(-2, -1), None
    if mistake == "queries_with_w_k":  # q = x @ w_k, k = memory @ w_q: the two names swapped
        w_q, w_k = w_k, w_q
    keys = (queries if mistake.startswith("keys_from_x") else read) @ (
        w_q if mistake == "keys_with_w_q" else w_k
    )
    if mistake == "transpose_1_2":  # so that wrong_attention's k.transpose(-2, -1) is (1, 2)
        keys = keys.transpose(1, 2).transpose(-2, -1)
    if mistake == "k_dot_T":  # wrong_attention's k.transpose(-2, -1) is then k.T, every axis
        keys = keys.permute(*range(keys.dim() - 1, -1, -1)).transpose(-2, -1)
    if mistake == "bmm":  # torch.bmm(q, k.transpose(1, 2)): right, but 3-D only
        torch.bmm(queries @ w_q, keys.transpose(-2, -1))
    values = (queries if mistake.startswith("values_from_x") else read) @ (
        w_k if mistake == "values_with_w_k" else w_v
    )
    if mistake in SOFTMAX_SLIPS:
        return _softmax_slip_attention(queries @ w_q, keys, values, mask, mistake)
    if mistake.endswith("_sdpa"):  # the notebook's route, whose own check raises first
        return scaled_dot_product_attention(queries @ w_q, keys, values, mask)
    output, weights = wrong_attention(
        queries @ w_q,
        keys,
        values,
        None if mistake == "mask_ignored" else mask,
        scale=sizes.get(mistake),
        fill=0.0 if mistake == "masked_with_zero" else float("-inf"),
        dim={"softmax_over_queries": -2, "softmax_over_batch": 0}.get(mistake, -1),
        inverted=mistake.startswith("mask_inverted"),
        zero_after=mistake in ("zero_after", "renormalised", "inf_after_softmax"),
        nan_to_zero=mistake != "mask_inverted_nan",
        renormalised=mistake == "renormalised",
        log=mistake == "log_softmax",
    )
    if mistake == "scaled_after_softmax":  # softmax(q k^T) / sqrt(d_k): the rows sum to less
        weights = weights / d_k**0.5
        output = weights @ values
    if mistake == "inf_after_softmax" and mask is not None:  # the -inf fill after the softmax
        weights = weights.masked_fill(~mask, float("-inf"))
        output = weights @ values
    return (weights, output) if mistake == "swapped" else (output, weights)


def _random_mask(gen: torch.Generator, batch: int, n_q: int, n_kv: int) -> torch.Tensor:
    """A random (batch, n_q, n_kv) mask, True = may attend, in which every query keeps at least
    one key: the task does not ask what a query with nothing to attend to returns."""
    mask = torch.rand(batch, n_q, n_kv, generator=gen) > 0.3
    mask[..., 0] |= ~mask.any(-1)
    return mask


@register
class CrossAttention(Task):
    id = "ex06.cross_attention"
    lesson = (
        "lesson 06, sections 'Queries from one sequence, keys and values from another' "
        "and 'A source padding mask'"
    )
    reference = "course_lib.cross_attention.cross_attention"
    backward = True  # x, memory and the weights are learned: its gradients are judged too
    mistake_table = CROSS_MISTAKES
    wrong = staticmethod(wrong_cross_attention)

    def call(self, obj, case):  # a cache of k and v between calls is stale at once
        return _after_a_call_on_other_weights(super().call, obj, case, (3, 4))

    def cases(self, gen):
        def inputs(x_shape, memory_shape, d_k, d_v, dtype=torch.float32):
            """x, memory, then w_q, w_k, w_v scaled by d_model ** -0.5 (x and memory share it)."""
            d = x_shape[-1]
            x, memory = randn(gen, *x_shape, dtype=dtype), randn(gen, *memory_shape, dtype=dtype)
            shapes = [(d, d_k), (d, d_k), (d, d_v)]
            return (x, memory, *(randn(gen, *s, dtype=dtype) * d**-0.5 for s in shapes))

        (x, memory, keep), eye = far_blocked_key(), torch.eye(4)
        return [
            Case("x (2, 3, 8), memory (2, 5, 8): 3 queries read 5 memory positions, no mask",
                 inputs((2, 3, 8), (2, 5, 8), 4, 6)),
            Case("x (1, 6, 4), memory (1, 2, 4): more queries than memory positions",
                 inputs((1, 6, 4), (1, 2, 4), 4, 4)),
            Case("x (3, 4, 8), memory (3, 7, 8), source padding mask (3, 1, 7), lengths [7, 4, 2]",
                 inputs((3, 4, 8), (3, 7, 8), 5, 3),
                 {"memory_mask": source_padding_mask([7, 4, 2], 7)}),
            Case("x (2, 5, 6), memory (2, 3, 6), a full (2, 5, 3) memory_mask",
                 inputs((2, 5, 6), (2, 3, 6), 4, 4), {"memory_mask": _random_mask(gen, 2, 5, 3)}),
            Case("extra batch dimensions: x (2, 3, 4, 8), memory (2, 3, 6, 8)",
                 inputs((2, 3, 4, 8), (2, 3, 6, 8), 4, 4)),
            # d_k = 18, whose root float32 holds worst (and 144 outputs): a float32 scale,
            # torch.sqrt(torch.tensor(d_k)), fails here under every seed (d_k = 4 let it pass)
            Case("float64 x (2, 3, 8), memory (2, 9, 8), padding mask lengths [9, 5]",
                 inputs((2, 3, 8), (2, 9, 8), 18, 24, torch.float64),
                 {"memory_mask": source_padding_mask([9, 5], 9)}),
            # the extra batch case above has n_q = d_k: q.shape[2] passed it as d_k
            Case("extra batch dimensions, d_k=3 unlike n_q and n_kv: x (2, 2, 5, 6), memory "
                 "(2, 2, 4, 6)",
                 inputs((2, 2, 5, 6), (2, 2, 4, 6), 3, 2)),
            Case(f"x (1, 1, 4) of 10s, memory (1, 2, 4), identity w_q, w_k, w_v, memory_mask "
                 f"(1, 1, 2) = [True, False]: {FAR_BLOCKED}",
                 (x, memory, eye, eye, eye), {"memory_mask": keep[:, None]}),
            # a softmax by hand without each row's maximum (or with the whole tensor's) gets
            # NaN here; the mask, of the last case's shape, blocks nothing: one kept is stale
            Case(f"x (1, 2, 4), a query of 10s and one of -10s, memory (1, 2, 4), identity w_q, "
                 f"w_k, w_v, memory_mask (1, 1, 2) all True: {OVERFLOW}",
                 (torch.cat([x, -x], 1), memory, eye, eye, eye),
                 {"memory_mask": torch.ones(1, 1, 2, dtype=torch.bool)}),
        ]  # fmt: skip

    def diagnose(self, got, want, case):
        if isinstance(got, (tuple, list)) and got and isinstance(got[0], torch.Tensor):
            n_q, n_kv = case.args[0].shape[-2], case.args[1].shape[-2]
            if got[0].dim() >= 2 and got[0].shape[-2] == n_kv != n_q:
                return (
                    "your output has one row per memory position; it needs one row per "
                    "query, that is per position of x: the queries come from x"
                )
            # one of the pair right, the other not: output and weights computed apart
            right = [
                isinstance(g, torch.Tensor) and self.compare(g, w, case) is None
                for g, w in zip(got[:2], want[:2], strict=False)
            ]
            if right == [False, True]:
                return (
                    "your weights are right but your output is not weights @ v with them "
                    "(was it computed before the mask?): output = weights @ v, v = memory @ w_v, "
                    "with the weights you return"
                )
            if right == [True, False]:
                return (
                    "your output is right but the weights you return are not the ones that made "
                    "it (the mask left out of them?): return softmax of the masked scores, the "
                    "weights the output was computed with"
                )
        return None
