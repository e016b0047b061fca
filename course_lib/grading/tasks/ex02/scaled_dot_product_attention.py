"""ex02.scaled_dot_product_attention: softmax(q k^T / sqrt(d_k)) v, returned with the
weights, for 2-D inputs and any number of batch axes."""

from __future__ import annotations

import math

import torch

from ...core import Case, GradingError, register
from ..common import D_K_FROM_SHAPE_2, HintOnError, all_close, randn, randns, stable_softmax
from ._shared import (
    F64,
    FLOAT32_DIGITS,
    FLOAT32_SCALE,
    NAN_SHIFT,
    SDPA_LESSON,
    _nan_where_none,
    _softmax_dim_2,
    refuse_global_sizes,
)

D_K_FROM_SHAPE_1 = (
    "you took d_k from shape[1] of q (or k), which is d_k only in 2-D; on a batch it is another "
    "axis: d_k is the last dimension, q.shape[-1]"
)
SCALED_AFTER_SOFTMAX = (
    "you divided the weights by sqrt(d_k) after the softmax, so they no longer sum to 1; the "
    "scale goes on the scores, softmax(q k^T / sqrt(d_k))"
)
POWER_HALF = (
    "`d_k ** 1/2` is `(d_k ** 1) / 2`: ** binds tighter than /, so that divides by d_k / 2 "
    "(or, written as `scores / d_k ** 1/2`, by 2 d_k); write d_k ** 0.5 or math.sqrt(d_k)"
)


@register
class ScaledDotProductAttention(HintOnError):
    id = "ex02.scaled_dot_product_attention"
    lesson = SDPA_LESSON
    reference = "course_lib.attention.scaled_dot_product_attention"
    backward = True  # q, k and v are learned: its gradients are judged too
    depends_on = ("softmax",)
    forbidden = ("torch.nn.functional.scaled_dot_product_attention",)
    mistake_table = {
        "causal_mask": "you masked the keys after each query (a causal mask, as a GPT has); this "
        "task has no mask: every query attends to every key",
        "no_scaling": "the scores are not scaled: divide q @ k^T by sqrt(d_k)",
        "by_d_k": "you divided by d_k; divide by its square root, sqrt(d_k)",
        "by_sqrt_d_v": "you scaled by sqrt(d_v) (the last dimension of v); the scale is "
        "sqrt(d_k), the last dimension of q and k",
        "by_d_v": "you divided by d_v; the scale is sqrt(d_k), the last dimension of q and k",
        "query_axis": "the softmax runs over the query axis (dim=-2); each query's weights over "
        "the keys must sum to 1, so use dim=-1",
        "softmax_dim_2": "dim=2 is the keys' axis only for 3-D scores (batch, n_q, n_k): 2-D "
        "scores have no axis 2, and with heads, (batch, heads, n_q, n_k), axis 2 is the queries'; "
        "count from the end: softmax(scores, dim=-1)",
        "dot_t": "`.T` transposes only 2-D tensors correctly (on a batch it reverses every "
        "axis); use k.transpose(-2, -1) (or k.mT) to swap the last two axes",
        "method_t": "`.t()` works only on 2-D tensors; use k.transpose(-2, -1) (or k.mT) so "
        "batches work too",
        "swapped": "the return order is swapped: return (output, weights)",
        "d_k_from_shape_1": D_K_FROM_SHAPE_1,
        "d_k_from_k_shape_1": D_K_FROM_SHAPE_1,
        "half_d_k": POWER_HALF,
        "twice_d_k": POWER_HALF,
        "scaled_after_softmax": SCALED_AFTER_SOFTMAX,
        "transpose_0_1": "k.transpose(0, 1) swaps the first two axes, which are the last two "
        "only in 2-D; use k.transpose(-2, -1) (or k.mT) so batches work too",
        "transpose_1_2": "k.transpose(1, 2) (like torch.bmm) assumes exactly one batch axis; "
        "count from the end, k.transpose(-2, -1) with @, so 2-D inputs and any number of batch "
        "dimensions work",
        "permute_0_2_1": "k.permute(0, 2, 1) assumes exactly one batch axis; swap the last two "
        "axes, k.transpose(-2, -1), so 2-D inputs and any number of batch dimensions work",
        "by_sqrt_n_k": "you scaled by the square root of the number of keys (k.shape[-2], or "
        "len(k)); d_k is the length of each query and key vector, the last dimension q.shape[-1]",
        "by_sqrt_n_q": "you scaled by the square root of the number of queries (q.shape[-2]); "
        "d_k is the length of each query and key vector, the last dimension q.shape[-1]",
        "times_sqrt": "you multiplied the scores by sqrt(d_k); divide them by it",
        "scaled_output": "you divided the output by sqrt(d_k); the scale goes on the scores, "
        "before the softmax: softmax(q k^T / sqrt(d_k)) @ v",
        "k_q_order": "your scores (or weights) are (n_k, n_q), one row per key: k @ q^T, or a "
        "transpose; they are q @ k^T, (n_q, n_k), one row per query, and output = weights @ v",
        "v_first": "the output is weights @ v, (n_q, n_k) @ (n_k, d_v): each query's weights mix "
        "the rows of v; v @ weights multiplies in the wrong order",
        "elementwise": "weights * v multiplies entry by entry; the weighted sum of the values is "
        "the matrix product weights @ v, (n_q, n_k) @ (n_k, d_v)",
        "float32_scale": FLOAT32_SCALE,
        "scores_returned": "the second result is the weights, softmax(scores) (each row sums to "
        "1), not the scores q k^T / sqrt(d_k) before the softmax",
        "d_k_from_shape_2": D_K_FROM_SHAPE_2,
        "bmm": "torch.bmm multiplies 3-D tensors only (exactly one batch axis); use @ "
        "(torch.matmul), which works for 2-D inputs and any number of batch dimensions",
        "einsum_3d": "your einsum names exactly three axes ('bqd,bkd->bqk'), so it works only "
        "for 3-D inputs: q may be 2-D or carry heads too. Let an ellipsis stand for the batch "
        "axes, torch.einsum('...qd,...kd->...qk', q, k), or use q @ k.transpose(-2, -1)",
        "einsum_2d": "your einsum names exactly two axes ('qd,kd->qk'), so it works only for "
        "2-D inputs: q, k and v may carry batch axes (and heads) in front. Let an ellipsis stand "
        "for them, torch.einsum('...qd,...kd->...qk', q, k), or use q @ k.transpose(-2, -1)",
        "reshape_t": "k.reshape(..., d_k, n_k) (or .view) is not a transpose: it keeps k's "
        "numbers in their order and only cuts them into rows of another length, so its columns "
        "are not k's rows. Swap the last two axes: k.transpose(-2, -1) (or k.mT)",
        "q_t_k": "q^T @ k multiplies (d_k, n_q) by (n_k, d_k): the transpose belongs on the "
        "keys. The scores are q @ k^T, (n_q, d_k) @ (d_k, n_k) = (n_q, n_k), one row per query: "
        "q @ k.transpose(-2, -1)",
        "swapaxes_1_2": "k.swapaxes(1, 2) (NumPy's name for k.transpose(1, 2)) assumes exactly "
        "one batch axis; count from the end, k.swapaxes(-2, -1) (or k.transpose(-2, -1), k.mT), "
        "so 2-D inputs and any number of batch dimensions work",
        "float32_weights": "your weights are float32 (a softmax with dtype=torch.float32, or of "
        "scores.float()) while v is float64, and a product takes one dtype: keep the inputs' "
        "dtype throughout, softmax(scores, dim=-1) with no dtype= and no .float()",
        "mm": "torch.mm multiplies 2-D matrices only; use @ (torch.matmul), which works for any "
        "number of batch dimensions",
        "no_max": "exp of large scores overflows (inf / inf = NaN): take the softmax with your "
        "stable softmax from task 1, which subtracts each row's maximum first",
        "isqrt": "math.isqrt(d_k) is the integer square root, rounded down (isqrt(8) = 2, not "
        "2.83), right only when d_k is a perfect square: divide by math.sqrt(d_k) (or d_k ** 0.5)",
        "attention_dropout": "your weights are dropped at random (dropout, as in tutorials' "
        "attention): this task has none, so every weight stays and each row sums to 1. Remove "
        "the dropout (F.dropout and nn.Dropout drop even when you did not mean to train)",
        "output_dropout": "your output went through a dropout (on the weights that make it, or "
        "on the output itself) while the weights you return did not: this task has no dropout, "
        "so output = weights @ v with the very weights you return. Remove the dropout "
        "(F.dropout and nn.Dropout drop even when you did not mean to train)",
        "two_dropouts": "your output and the weights you return went through two separate "
        "dropouts (two random draws, so two different masks): this task has no dropout, so "
        "output = weights @ v with the very weights you return, every weight kept. Remove both "
        "dropouts (F.dropout and nn.Dropout drop even when you did not mean to train)",
    }

    def compare(self, got, want, case):
        # float32 scores of size ~4500 carry rounding errors of ~3e-4, so two correct orders
        # of the operations ((q / sqrt(d_k)) @ k or (q @ k) / sqrt(d_k)) differ by up to ~4e-4
        # in the output: this case checks that nothing overflows, not the last digits
        if case.data.get("ill_conditioned") and all_close(got, want, 1e-3):
            return None
        return super().compare(got, want, case)

    def cases(self, gen):
        return [
            Case(
                "2-D q (3, 4), k (5, 4), v (5, 6)  (n_q != n_k, d_k != d_v)",
                randns(gen, (3, 4), (5, 4), (5, 6)),
            ),
            Case(
                "a batch: q (2, 3, 8), k (2, 5, 8), v (2, 5, 6)",
                randns(gen, (2, 3, 8), (2, 5, 8), (2, 5, 6)),
            ),
            Case(
                "batch and heads: q (2, 3, 4, 16), k (2, 3, 6, 16), v (2, 3, 6, 5)",
                randns(gen, (2, 3, 4, 16), (2, 3, 6, 16), (2, 3, 6, 5)),
            ),
            Case(
                "float64: q (3, 2, 9), k (3, 7, 9), v (3, 7, 4)",
                randns(gen, (3, 2, 9), (3, 7, 9), (3, 7, 4), dtype=F64),
            ),
            Case(
                "large values: q, k of size 40, q (2, 4, 8), k (2, 6, 8), v (2, 6, 3)",
                (*randns(gen, (2, 4, 8), (2, 6, 8), scale=40.0), randn(gen, 2, 6, 3)),
                data={"ill_conditioned": True},
            ),
            Case(
                "one query: q (1, 1, 4), k (1, 3, 4), v (1, 3, 2)",
                randns(gen, (1, 1, 4), (1, 3, 4), (1, 3, 2)),
            ),
            Case(  # a .view() of q, k or v fails on these, and exercise 03 passes such views
                "q (2, 3, 4, 8), k, v (2, 3, 5, 8) made by .transpose(1, 2), as multi-head "
                "attention passes them (not contiguous: reshape, not view)",
                tuple(t.transpose(1, 2) for t in randns(gen, (2, 4, 3, 8), *[(2, 5, 3, 8)] * 2)),
            ),
            Case(  # sqrt(9) above is exact in float32; sqrt(19) is the root of d_k < 20 that
                # float32 rounds most (by 7e-8 of it), so a float32 scale fails under every seed
                "float64 with d_k = 19: q (2, 3, 19), k (2, 4, 19), v (2, 4, 5)",
                randns(gen, (2, 3, 19), (2, 4, 19), (2, 4, 5), dtype=F64),
            ),
        ]

    def diagnose(self, got, want, case):
        if case.args[0].dtype == F64 and all_close(got, want, 1e-5):
            return FLOAT32_DIGITS
        if _nan_where_none(got, want):  # an inline softmax shifted by another number
            return NAN_SHIFT
        pairs = zip(got, want, strict=False) if isinstance(got, (tuple, list)) else ()
        # a dropout of any p on the weights, or on the output (F.dropout(weights @ v, p)): some
        # entries 0, the others all scaled by one 1 / (1 - p)
        for (mine, right), row in zip(pairs, ("output_dropout", "attention_dropout"), strict=False):
            if isinstance(mine, torch.Tensor) and mine.shape == right.shape:
                kept = mine != 0
                ratio = mine[kept] / right[kept]
                dropped = (~kept & (right != 0)).any() and ratio.numel() and ratio.min() > 1.001
                if dropped and (ratio.max() - ratio.min()) < 1e-4 * ratio.max():
                    return ScaledDotProductAttention.mistake_table[row]
        return None

    def _hint_for_error(self, obj, case, failure, error=None):
        """softmax(scores, dim=2) on 2-D scores also through torch.softmax, F.softmax, nn.Softmax
        or .max(dim=2), whose failing operation is not the wrong version's amax."""
        hint = super()._hint_for_error(obj, case, failure, error)
        if hint is None and _softmax_dim_2(failure, error, case):
            return self.mistake_table["softmax_dim_2"]
        return hint

    def call(self, obj, case):
        """A dropout the learner's code draws takes the mask the attention_dropout row takes."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            value = HintOnError.call(self, obj, case)  # self may be a SelfAttention too
            if case.raises is None and case.args[0].is_floating_point():
                _weights_keep_their_graph(obj, case)
        first = "x" if len(case.args) == 4 else "q"  # self_attention's x, or q
        refuse_global_sizes(self, obj, case, value, first)  # d_k = 4 from an earlier cell
        return value

    def wrong(self, q, k, v, *, mistake):
        d_k, d_v = q.shape[-1], v.shape[-1]
        scales = {"no_scaling": 1.0, "by_d_k": d_k, "by_sqrt_d_v": math.sqrt(d_v), "by_d_v": d_v}
        scales |= {
            "by_sqrt_n_k": math.sqrt(k.shape[-2]),
            "by_sqrt_n_q": math.sqrt(q.shape[-2]),
            "times_sqrt": 1 / math.sqrt(d_k),
            "d_k_from_shape_1": math.sqrt(q.shape[1]),
            "d_k_from_k_shape_1": math.sqrt(k.shape[1]),
            "half_d_k": d_k / 2,
            "twice_d_k": 2 * d_k,
            "float32_scale": torch.sqrt(torch.tensor(d_k, dtype=torch.float32)),
            "isqrt": math.isqrt(d_k),
        }
        scale = scales.get(mistake, math.sqrt(d_k))
        if mistake == "d_k_from_shape_2":  # an IndexError on 2-D inputs
            scale = math.sqrt(q.shape[2])
        if mistake == "dot_t":
            k_t = k.T
        elif mistake == "method_t":
            k_t = k.t()
        elif mistake == "permute_0_2_1":
            k_t = k.permute(0, 2, 1)
        elif mistake == "swapaxes_1_2":  # NumPy's name, the bmm habit's axes
            k_t = k.swapaxes(1, 2)
        elif mistake == "reshape_t":  # the numbers regrouped, not transposed
            k_t = k.reshape(*k.shape[:-2], k.shape[-1], k.shape[-2])
        else:
            k_t = k.transpose(
                *{"transpose_0_1": (0, 1), "transpose_1_2": (1, 2)}.get(mistake, (-2, -1))
            )
        if mistake == "scaled_output":  # the scale on the output instead of the scores
            weights = stable_softmax(q @ k_t)
            return weights @ v / scale, weights
        product = {  # 3-D, 2-D only; the einsums get k back, as the learner passes it
            "bmm": torch.bmm,
            "mm": torch.mm,
            "einsum_3d": lambda q, k_t: torch.einsum("bqd,bkd->bqk", q, k_t.mT),
            "einsum_2d": lambda q, k_t: torch.einsum("qd,kd->qk", q, k_t.mT),
            "q_t_k": lambda q, k_t: q.mT @ k_t.mT,  # a crash unless n_q == n_k
        }.get(mistake, torch.matmul)
        scores = (k @ q.transpose(-2, -1) if mistake == "k_q_order" else product(q, k_t)) / scale
        if mistake == "causal_mask":  # a GPT's mask, which this task does not have
            later = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
            scores = scores.masked_fill(later, -math.inf)
        weights = stable_softmax(  # float32 weights: a crash at weights @ v on float64 inputs
            scores.float() if mistake == "float32_weights" else scores,
            dim={"query_axis": -2, "softmax_dim_2": 2}.get(mistake, -1),
        )
        if mistake == "attention_dropout":  # F.dropout(weights, 0.1): tutorials' attention
            weights = torch.nn.functional.dropout(weights, 0.1)
        if mistake in ("output_dropout", "two_dropouts"):  # the dropped weights make the output
            drop = torch.nn.functional.dropout  # two_dropouts: a second draw for the result
            output = drop(weights, 0.1) @ v
            return output, drop(weights, 0.1) if mistake == "two_dropouts" else weights
        if mistake == "no_max":  # exp of the scores themselves: NaN once they are large
            weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)
        if mistake == "scaled_after_softmax":
            weights = stable_softmax(q @ k_t) / scale
        if mistake == "elementwise":  # a crash unless the shapes happen to broadcast
            return (weights * v).sum(-1), weights
        output = v @ weights if mistake == "v_first" else weights @ v
        weights = scores if mistake == "scores_returned" else weights
        return (weights, output) if mistake == "swapped" else (output, weights)


def _weights_keep_their_graph(obj, case) -> None:
    """The gradient check differentiates the output only: weights returned detached (or made
    under no_grad) passed it, though a caller that trains on them gets no gradient (#hunt19)."""
    leaves = [a.detach().clone().requires_grad_() for a in case.args]
    try:
        with torch.enable_grad():
            got = obj(*leaves, **case.kwargs)
    except Exception:  # noqa: BLE001  (an input changed in place: the check of inputs tells)
        return
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        return
    output, weights = got
    tensors = all(isinstance(t, torch.Tensor) for t in got)
    if tensors and output.requires_grad and not weights.requires_grad:
        raise GradingError(
            "the attention weights you return carry no gradient (.detach(), .data or "
            "torch.no_grad() cut them off the graph), though the output does: return the "
            "weights the output was made from, as they are; a caller may train on them (an "
            "attention loss, a distillation of the weights), and nn.MultiheadAttention's keep "
            "their gradient too"
        )
