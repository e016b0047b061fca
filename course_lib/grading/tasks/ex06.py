"""ex06, cross-attention: attention from one sequence to another, and the decoder's sub-layer."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from ...attention import scaled_dot_product_attention
from ...multihead import MultiHeadAttention
from ..core import Case, GradingError, Task, register
from .common import (
    D_K_FROM_SHAPE_2,
    D_V_SCALE_HINT,
    KEPT_INPUTS,
    RENORMALISED_HINT,
    ModuleTask,
    call_on_other_inputs,
    far_blocked_key,
    randn,
    residual_sublayers,
    without_dropout,
    wrong_attention,
)
from .common import lengths_mask as source_padding_mask
from .ex02 import FLOAT32_SCALE, SCALED_AFTER_SOFTMAX
from .ex05 import ATTENTION_MISTAKES
from .ex07._layers import LAYER_NORM_EPS

# --------------------------------------------------------------------------------------------
# ex06.cross_attention
# --------------------------------------------------------------------------------------------


LOG_SOFTMAX = (
    "you took log_softmax: the weights are softmax(scores, dim=-1), probabilities between 0 and "
    "1 that sum to 1 over the keys (log_softmax gives their logarithms, negative numbers)"
)


SOFTMAX_SLIPS = ("float32_softmax", "no_max", "max_of_all")
OVERFLOW = "scores of 0 and +-300: exp(300) overflows float32, so each row's maximum is subtracted"
NO_MAX = (
    "exp of a score near 300 overflows float32 to inf, and inf / inf is NaN: subtract each row's "
    "maximum before exp, scores - scores.amax(dim=-1, keepdim=True) (as your softmax of exercise "
    "02 does), or use scores.softmax(dim=-1)"
)
MAX_OF_ALL = (
    "you subtracted the largest score of the whole tensor (scores.max(), no dim): a row whose "
    "scores all lie far below it underflows to exp = 0 everywhere, and 0 / 0 is NaN. Subtract "
    "each row's own maximum, scores.amax(dim=-1, keepdim=True), or use scores.softmax(dim=-1)"
)

VALUES_FROM_X = (
    "the values come from memory, like the keys: v = memory @ w_v, then output = weights @ v. "
    "x gives only the queries; the weights (n_q, n_kv) mix memory's n_kv values"
)
# a projection cached between calls (functools.lru_cache, or a dict keyed by id(memory) or
# data_ptr()): the check calls first with w_k and w_v negated in place, then restores them
POWER_THEN_HALF = (
    "d_k ** 1/2 is (d_k ** 1) / 2, since ** binds tighter than /: you divided the scores by "
    "2 d_k. Write the root's exponent in parentheses, d_k ** (1/2), or d_k ** 0.5"
)
KV_KEPT = (
    "your keys and values are those of an earlier call on the same tensors (functools.lru_cache "
    "on a projection, or a cache keyed by id({read}) or {read}.data_ptr()): the check called "
    "once with w_k and w_v negated in place, then restored them, and your answer kept the first "
    "call's. A training step changes the weights in place just so: compute k = {read} @ w_k and "
    "v = {read} @ w_v on every call"
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


def _softmax_slip_attention(q, k, v, mask, mistake):
    """Attention whose softmax ran in float32, F.softmax(scores, -1, dtype=torch.float32), cast
    back to the scores' dtype (right to float32's digits only on float64 inputs), or was written
    by hand, exp(scores - shift) / sum: no shift ("no_max", inf / inf once a score passes 88) or
    the largest score of the whole tensor ("max_of_all", a row far below it underflows to 0 / 0)."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    scores = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
    if mistake == "float32_softmax":
        weights = scores.softmax(-1, dtype=torch.float32).to(scores.dtype)
    else:
        e = (scores - (scores.max() if mistake == "max_of_all" else 0)).exp()
        weights = e / e.sum(-1, keepdim=True)
    return weights @ v, weights


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


def _after_a_call_on_other_weights(call, obj, case, weights):
    """`call(obj, case)`, after a first call, its result dropped, on the same tensors with the
    arguments at positions `weights` (w_k and w_v) negated in place, then restored: an answer
    that keeps its projections between calls (functools.lru_cache, a dict keyed by id) then
    returns the first call's, as after a training step that changed the weights in place."""
    negated = {id(w): w for w in (case.args[i] for i in weights)}.values()  # eye thrice: once
    with torch.no_grad():
        try:
            for w in negated:
                w.neg_()
            obj(*case.args, **case.kwargs)
        except Exception:  # noqa: BLE001, S110  (an error here is the real call's to report)
            pass
        finally:
            for w in negated:
                w.neg_()
    return call(obj, case)


FAR_BLOCKED = "the blocked memory position scores 300 above the allowed one"


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


# --------------------------------------------------------------------------------------------
# ex06.CrossAttentionSublayer
# --------------------------------------------------------------------------------------------


def _random_state(gen, d_model, dtype):
    """Weights for every parameter of the sub-layer (the LayerNorm's too, so that its place
    matters)."""
    state = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        state[f"attn.{name}.weight"] = randn(gen, d_model, d_model, dtype=dtype) * d_model**-0.5
        state[f"attn.{name}.bias"] = randn(gen, d_model, dtype=dtype) * 0.1
    state["norm.weight"] = 1.0 + 0.5 * randn(gen, d_model, dtype=dtype)
    state["norm.bias"] = 0.5 * randn(gen, d_model, dtype=dtype)
    return state


SUBLAYER_MISTAKES = {
    "no_residual": "the residual connection is missing: the sub-layer returns x + attention "
    "(post-norm: norm(x + attn(x, memory)); pre-norm: x + attn(norm(x), memory))",
    "default_pre_norm": "built without norm_first, your sub-layer is pre-norm: the default is "
    "norm_first=False (post-norm, as in the original Transformer and nn.TransformerDecoderLayer); "
    "give __init__ norm_first=False as its default",
    "norm_swapped": "the LayerNorm is in the wrong place: post-norm (norm_first=False) "
    "normalises after the residual, norm(x + attn(x, memory)); pre-norm (norm_first=True) "
    "normalises only the attention's input, x + attn(norm(x), memory)",
    "memory_normalised": "memory was normalised: this sub-layer normalises only x (the encoder "
    "already normalised its output); pass memory to the attention as it is",
    "mask_ignored": "memory_mask was ignored: pass it on to self.attn so that padded source "
    "positions get zero weight",
    "mask_inverted": "the mask is inverted: course_lib's attention takes True = may attend, so "
    "pass memory_mask as it is (nn.MultiheadAttention, which takes True = blocked, is "
    "the one that needs ~memory_mask)",
    "residual_of_normed": "in pre-norm the residual adds the attention to x itself, not to "
    "norm(x): x + attn(norm(x), memory)",
    "self_attends": "the keys and values must come from memory: attn(x, memory, memory, "
    "memory_mask); attn(x, x, x) is self-attention and never reads the source",
    "queries_from_memory": "the queries come from x, the keys and values from memory: "
    "attn(x, memory, memory, memory_mask) (in pre-norm attn(norm(x), memory, memory, ...)), not "
    "attn(memory, x, x, ...), whose output has one row per source position",
    "pre_norm_output_normalised": "pre-norm normalises only the sub-layer's input: "
    "x + attn(norm(x), memory, memory); the sum is not normalised again (that is "
    "post-norm)",
    "output_tuple": "self.attn returns a pair (output, weights): add its first element to x, "
    "self.attn(...)[0] (or attended, _ = self.attn(...)), not the pair",
    "norm_eps": LAYER_NORM_EPS,
    "normed_sublayer": "you normalised the attention's output, x + norm(attn(x, memory)); "
    "post-norm normalises the sum, norm(x + attn(x, memory)), and pre-norm the attention's "
    "input, x + attn(norm(x), memory)",
    "memory_kept": KEPT_INPUTS,
    "key_padding_mask": "key_padding_mask is nn.MultiheadAttention's argument (True = blocked); "
    "course_lib's MultiHeadAttention takes the mask as its fourth argument, True = may attend: "
    "self.attn(x, memory, memory, memory_mask)",
    "post_norm_of_x": "post-norm normalises the sum, after the residual: norm(x + attn(x, "
    "memory)), not norm(x) + attn(x, memory)",
    "memory_detached": "no gradient reaches memory (.detach() or torch.no_grad() cut it): the "
    "encoder learns through this sub-layer, so memory must stay in the graph",
    "functional_norm": "F.layer_norm(x, (d_model,)) without weight and bias ignores self.norm's "
    "learned scale and shift (the check loads them into self.norm): call self.norm(x)",
    "post_norm_query_normed": "post-norm normalises only the sum, norm(x + attn(x, memory)): its "
    "attention reads x itself, not norm(x) (normalising the attention's input is pre-norm's, "
    "x + attn(norm(x), memory), which does not normalise the sum)",
    "pre_norm_of_x": "pre-norm adds the attention of norm(x) to x itself: x + attn(norm(x), "
    "memory), not norm(x) + attn(x, memory) (the attention reads the normalised copy, the "
    "residual carries x as it is)",
    "norm_sandwich": "you normalised before AND after the sub-layer, h = norm(x), then "
    "norm(h + attn(h, memory)): the sub-layer's one LayerNorm sits in one place, post-norm "
    "(norm_first=False) norm(x + attn(x, memory)), pre-norm (norm_first=True) "
    "x + attn(norm(x), memory)",
    "norm_of_normed_x": "you normalised x before adding it AND the sum, norm(norm(x) + "
    "attn(x, memory)): the sub-layer's one LayerNorm sits in one place, post-norm "
    "(norm_first=False) norm(x + attn(x, memory)) with x itself in the residual, pre-norm "
    "(norm_first=True) x + attn(norm(x), memory) with the sum left as it is",
    "pre_unnormed": "your pre-norm branch never calls self.norm: pre-norm normalises the "
    "attention's input, x + attn(norm(x), memory, memory, memory_mask), and adds it to x itself",
}


class WrongSublayer(nn.Module):
    """The right parts of the sub-layer, put together with one named mistake (`mistake`)."""

    mistake = ""

    def __init__(self, d_model, num_heads, norm_first=None):
        super().__init__()
        self.norm_first = self.mistake == "default_pre_norm" if norm_first is None else norm_first
        self.attn = MultiHeadAttention(d_model, num_heads)
        self.norm = nn.LayerNorm(d_model, 1e-6 if self.mistake == "norm_eps" else 1e-5)

    def forward(self, x, memory, memory_mask=None):
        mistake = self.mistake
        if mistake == "mask_ignored":
            memory_mask = None
        if mistake == "mask_inverted" and memory_mask is not None:
            memory_mask = ~memory_mask  # PyTorch's convention (True = blocked), as for nn.*
        if mistake == "memory_normalised":
            memory = self.norm(memory)
        if mistake == "memory_detached":  # "the encoder's output is fixed here"
            memory = memory.detach()
        if mistake == "memory_kept":  # the memory of the first call, kept for the next ones
            memory = self.__dict__.setdefault("kept", memory)

        def attend(h):
            if mistake == "self_attends":
                return self.attn(h, h, h)[0]
            if mistake == "key_padding_mask":  # the lesson's nn.MultiheadAttention call, copied
                return self.attn(h, memory, memory, key_padding_mask=memory_mask)[0]
            if mistake == "queries_from_memory":  # raises: memory's length is not x's
                return self.attn(memory, h, h, memory_mask)[0]
            pair = self.attn(h, memory, memory, memory_mask)
            return pair if mistake == "output_tuple" else pair[0]

        if mistake == "post_norm_of_x" and not self.norm_first:  # norm(x) + attn(x, memory)
            return self.norm(x) + attend(x)
        if mistake == "pre_norm_of_x" and self.norm_first:  # norm(x) + attn(x, memory)
            return self.norm(x) + attend(x)
        if mistake == "pre_unnormed" and self.norm_first:  # x + attn(x, memory): no norm at all
            return x + attend(x)
        if mistake == "norm_sandwich":  # h = norm(x); norm(h + attn(h)), in either mode
            return self.norm(self.norm(x) + attend(self.norm(x)))
        if mistake == "norm_of_normed_x":  # norm(norm(x) + attn(x)), in either mode
            return self.norm(self.norm(x) + attend(x))
        if mistake == "post_norm_query_normed" and not self.norm_first:  # h = norm(x) in both
            return self.norm(x + attend(self.norm(x)))
        slip = "pre_post_swapped" if mistake == "norm_swapped" else mistake
        norm_first = self.norm_first and mistake != "normed_sublayer"  # x + norm(attn) in both
        norm = self.norm
        if mistake == "functional_norm":  # F.layer_norm with no weight: the loaded ones unused
            norm = lambda h: nn.functional.layer_norm(h, h.shape[-1:])  # noqa: E731
        return residual_sublayers(x, [(norm, attend)], norm_first, slip)


@register
class CrossAttentionSublayerTask(ModuleTask):
    id = "ex06.CrossAttentionSublayer"
    lesson = "lesson 06, section 'Where cross-attention sits in the decoder'"
    reference = "course_lib.cross_attention.CrossAttentionSublayer"
    mistake_table = SUBLAYER_MISTAKES
    wrong = WrongSublayer

    def cases(self, gen):
        def case(description, sizes, norm_first, lengths=None, dtype=torch.float32, default=False):
            batch, n_q, n_kv, d_model, num_heads = sizes
            # x far from normalised, so LayerNorm before and after the residual differ
            x = 2.0 * randn(gen, batch, n_q, d_model, dtype=dtype) + 1.0
            memory = 1.5 * randn(gen, batch, n_kv, d_model, dtype=dtype) - 0.5
            kwargs = {} if lengths is None else {"memory_mask": source_padding_mask(lengths, n_kv)}
            data = {
                "sizes": (d_model, num_heads),
                "norm_first": norm_first,
                "default_norm_first": default,  # built without norm_first: its default, False
                "state_dict": _random_state(gen, d_model, dtype),
            }
            mode = "pre-norm (norm_first=True)" if norm_first else "post-norm (norm_first=False)"
            return Case(f"{mode}, {description}", (x, memory), kwargs, data)

        f64 = torch.float64
        # sizes: (batch, n_q, n_kv, d_model, num_heads)
        cases = [
            case("x (2, 3, 8), memory (2, 5, 8), 2 heads, no mask, built without norm_first (its "
                 "default is False)",
                 (2, 3, 5, 8, 2), False, default=True),
            case("x (2, 3, 8), memory (2, 5, 8), 2 heads, no mask", (2, 3, 5, 8, 2), True),
            case("x (3, 4, 8), memory (3, 6, 8), 4 heads, source padding lengths [6, 3, 1]",
                 (3, 4, 6, 8, 4), False, [6, 3, 1]),
            case("x (3, 4, 8), memory (3, 6, 8), 4 heads, source padding lengths [2, 6, 5]",
                 (3, 4, 6, 8, 4), True, [2, 6, 5]),
            case("x (1, 7, 12), memory (1, 2, 12), 3 heads", (1, 7, 2, 12, 3), True),
            case("float64, x (2, 5, 8), memory (2, 4, 8), 2 heads, padding lengths [4, 2]",
                 (2, 5, 4, 8, 2), False, [4, 2], f64),
            case("float64, x (2, 5, 8), memory (2, 4, 8), 2 heads, padding lengths [1, 4]",
                 (2, 5, 4, 8, 2), True, [1, 4], f64),
        ]  # fmt: skip
        # the default's case third, after both modes were asked for by name: a default of
        # norm_first=True then fails there first, and a swapped norm earlier (each its own hint)
        cases.insert(2, cases.pop(0))
        return cases

    def init_args(self, case):
        data = case.data
        return data["sizes"], {} if data["default_norm_first"] else {
            "norm_first": data["norm_first"]
        }

    def call(self, obj, case):  # memory_mask by position in every pass, whatever its name
        return super().call(obj, replace(case, args=(*case.args, *case.kwargs.values()), kwargs={}))

    def run(self, module, case):
        args = [*case.args, *case.kwargs.values()]  # x, memory and memory_mask if given
        memory = args[1] = args[1].detach().requires_grad_(True)  # the encoder learns through it
        call_on_other_inputs(module.eval(), args, {})
        out = module(*args)
        if isinstance(out, torch.Tensor) and (
            not out.requires_grad
            or torch.autograd.grad(out.sum(), memory, allow_unused=True)[0] is None
        ):
            with torch.no_grad():  # memory is read (its values matter), but cut from the graph
                moved = module(args[0], memory + 1, *args[2:])
            if moved.shape == out.shape and not torch.equal(moved, out.detach()):
                raise GradingError(SUBLAYER_MISTAKES["memory_detached"])
        args[1] = memory.detach()
        return without_dropout(module, args, {}, "sub-layer")


# --------------------------------------------------------------------------------------------
# ex06.attention_pool (transfer: learned queries that do not come from any sequence)
# --------------------------------------------------------------------------------------------


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
    if mistake in SOFTMAX_SLIPS:
        return _softmax_slip_attention(q, keys, values, mask, mistake)
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
    "power_then_half": POWER_THEN_HALF,
    "n_tokens": "you scaled by the square root of the number of tokens (n, x.shape[1]); d_k is "
    "the length of each query and key vector, queries.shape[-1]",
    "mask_last_axis": "mask.unsqueeze(-1) is (batch, n, 1): it puts the tokens on the queries' "
    "axis. The scores are (batch, num_queries, n), so add the axis in the middle: "
    "mask.unsqueeze(1), or mask[:, None, :], (batch, 1, n)",
    "mean_pooled": "you averaged the tokens, each real token with the same weight: the weights "
    "come from each learned query's scores against the keys, softmax(queries @ k^T / "
    "sqrt(d_k)) over the tokens, so each query picks its own mix",
    "log_softmax": LOG_SOFTMAX,
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
    "no_max": NO_MAX,
    "max_of_all": MAX_OF_ALL,
    "kv_kept": KV_KEPT.format(read="x"),
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
        return _after_a_call_on_other_weights(super().call, obj, case, (2, 3))

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
                 f"[True, False]: {FAR_BLOCKED.replace('memory position', 'token')}",
                 (memory, queries[0], eye, eye), {"mask": keep}),
            # as cross_attention's last case: a softmax by hand must subtract each row's maximum
            Case(f"x (1, 2, 4), queries (2, 4) of 10s and of -10s, identity w_k and w_v, mask "
                 f"(1, 2) all True: {OVERFLOW.replace('each row', 'each query')}",
                 (memory, torch.cat([queries[0], -queries[0]]), eye, eye),
                 {"mask": torch.ones(1, 2, dtype=torch.bool)}),
        ]  # fmt: skip
