"""ex02, self-attention: a stable softmax, scaled dot-product attention, self-attention."""

from __future__ import annotations

import math

import torch

from ..core import Case, GradingError, Task, register
from .common import D_K_FROM_SHAPE_2, HintOnError, all_close, randn, randns, stable_softmax

SOFTMAX_LESSON = "lesson 02, section 'A numerically stable softmax'"
SDPA_LESSON = "lesson 02, section 'Scaled dot-product attention, step by step'"
SELF_LESSON = "lesson 02, section 'Learned projections: W_Q, W_K, W_V'"
F64 = torch.float64

ALL_SOFTMAXES = tuple(
    "torch.softmax torch.Tensor.softmax torch.nn.functional.softmax torch.nn.Softmax "
    "torch.special.softmax torch._softmax torch.log_softmax torch.Tensor.log_softmax "
    "torch.nn.functional.log_softmax torch.nn.LogSoftmax torch.special.log_softmax "
    "torch._log_softmax".split()
)


NO_GRADIENTS = (
    "your result carries no gradients (torch.no_grad(), .detach(), .data, .item() or NumPy "
    "cut them), so nothing before a softmax could learn in a model: your softmax ends up in "
    "the GPT you train in exercise 09. Compute it with tensor operations on x itself"
)


FLOAT32_DIGITS = (
    "your float64 result is right only to float32's digits: part of it was computed in float32 "
    "(a .float(), or a tensor made without dtype=); keep the inputs' dtype throughout"
)
FLOAT16 = (
    "your softmax went through float16 (a .half()): its 11 bits keep about 3 significant "
    "digits, so the values are off from the 4th on (and float16 overflows past 65504, exp(11.1)); "
    "compute in x's dtype throughout, with no .half()"
)


# --- ex02.softmax
@register
class Softmax(Task):
    id = "ex02.softmax"
    lesson = SOFTMAX_LESSON
    reference = "course_lib.attention.softmax"
    backward = True  # attention back-propagates through it: its gradients are judged too
    forbidden = ALL_SOFTMAXES
    mistake_table = {
        "minus_mean": "subtract the maximum along dim, not the mean: exp(x - mean) still "
        "overflows when the largest value lies far above the mean",
        "no_max": "exp overflows to inf (inf/inf = NaN) or underflows to 0 (0/0 = NaN) for "
        "large inputs: subtract the maximum along dim before exp, it cancels in the ratio",
        "last_axis": "you normalised over the last axis; use the `dim` argument",
        "first_axis": "you normalised over the first axis; use the `dim` argument",
        "whole_tensor": "you normalised over the whole tensor; sum only along `dim` "
        "(keepdim=True), so each slice along dim sums to 1",
        "log_softmax": "that is log-softmax (log-probabilities, all negative); softmax is "
        "exp(x - max) / sum(exp(x - max))",
        "global_max": "you subtracted the maximum of the whole tensor: in a row far below it "
        "every exp underflows to 0 (0/0 = NaN). Subtract each slice's own maximum along dim "
        "(x.amax(dim=dim, keepdim=True))",
        "min_shift": "you subtracted the minimum: exp(x - min) overflows to inf when a row's "
        "values are spread widely. Subtract the maximum along dim, so every exponent is <= 0",
        "no_keepdim": "sum(dim=dim) (or max(dim=dim)) drops that axis, so the sums (or maxima) "
        "no longer line up with x: PyTorch broadcasts from the last axis, and either the shapes "
        "clash or each value meets another slice's sum. Keep the axis: sum(dim=dim, "
        "keepdim=True), x.amax(dim=dim, keepdim=True)",
        "max_pair": "x.max(dim=...) returns a pair (values, indices), not a tensor: subtract its "
        ".values, or use x.amax(dim=dim, keepdim=True)",
        "max_last_axis": "you subtracted the maximum over the last axis but normalised over "
        "`dim`: the shift cancels only when it is the same along dim; subtract the maximum along "
        "dim, x.amax(dim=dim, keepdim=True)",
        "unsqueeze_last": "unsqueeze(-1) puts the reduced axis back last, where it was only for "
        "dim=-1; keep it where it was: x.amax(dim=dim, keepdim=True), sum(dim=dim, keepdim=True)",
        "detached": NO_GRADIENTS,
        "squeezed": "squeeze() without an axis drops every axis of length 1, also one of x's own: "
        "the softmax keeps x's shape, so return exp / sum as it is (keepdim=True already lines "
        "the sums up)",
        "first_entry": "you subtracted the first entry of each slice, not its maximum: any "
        "constant cancels in the ratio, but exp(x - first) still overflows to inf (inf/inf = NaN) "
        "when another entry lies far above the first. Subtract the maximum along dim, "
        "x.amax(dim=dim, keepdim=True), so every exponent is <= 0",
        "moved_back_wrong": "you moved `dim` to the end (x.movedim(dim, -1), or a permute) and "
        "back with the same call: that returns it to its place only when the move is a swap "
        "(2-D x, or dim next to last); with dim=0 of a 3-D x it gives (c, a, b), not (a, b, c). "
        "Move it back with .movedim(-1, dim), or skip the moves: x.amax(dim=dim, keepdim=True) "
        "and sum(dim=dim, keepdim=True) work along any axis",
        "clamped": "you clamped x before exp: that changes the answer, since every value beyond "
        "the bound becomes the same number (a row around 1000 comes out uniform). Subtract the "
        "maximum along dim instead, x.amax(dim=dim, keepdim=True): it cancels in the ratio and "
        "keeps every exponent <= 0",
    }

    def cases(self, gen):
        def spread(gen):  # -100 to 100, the middle in a random order; first -60, last -20:
            # under every seed a shift by the first entry overflows (and is not the minimum's)
            order = torch.randperm(6, generator=gen)
            middle = order[(order != 1) & (order != 2)]
            return torch.linspace(-100.0, 100.0, 6)[
                torch.cat([order.new_tensor([1]), middle, order.new_tensor([2])])
            ]

        return [
            Case("a 1-D x of shape (5,)", (randn(gen, 5),)),
            Case("x (3, 4, 6), default dim=-1", (randn(gen, 3, 4, 6),)),
            Case("x (2, 5, 3) with dim=1 (the middle axis)", (randn(gen, 2, 5, 3),), {"dim": 1}),
            Case("x (4, 3) with dim=0", (randn(gen, 4, 3),), {"dim": 0}),
            Case("float64 x (2, 3, 7)", (randn(gen, 2, 3, 7, dtype=F64),)),
            Case(
                "large inputs around 1000, x (3, 5) = 1000 + noise",
                (1000.0 + randn(gen, 3, 5, scale=5.0),),
            ),
            Case(
                "large negative inputs around -1000, x (2, 4)",
                (-1000.0 + randn(gen, 2, 4, scale=5.0),),
            ),
            Case(
                "float64 inputs around 800 (exp(800) overflows even in float64), x (2, 6)",
                (800.0 + randn(gen, 2, 6, dtype=F64, scale=10.0),),
            ),
            Case(
                "equal inputs, x (2, 4) all 3.0 (the answer is uniform)", (torch.full((2, 4), 3.0),)
            ),
            Case(
                "rows on very different scales, x (3, 6): one row around 200, one around 0, "
                "one spread from 100 to 300 (subtract each row's own maximum)",
                (torch.stack([200.0 + randn(gen, 6), randn(gen, 6), 200.0 + spread(gen)]),),
            ),
            Case(
                "x (2, 3) whose first row is near 0 and second near -2000 (each row needs its "
                "own maximum)",
                (torch.stack([randn(gen, 3), -2000.0 + randn(gen, 3)]),),
            ),
            Case(
                "scores x (3, 5) of a model in training (x.requires_grad is True): the result "
                "must carry gradients back to x",
                (randn(gen, 3, 5).requires_grad_(),),
            ),
            Case(
                "x (2, 1, 4) with dim=1, an axis of length 1 (each slice is one number, of weight "
                "1; the result keeps the shape (2, 1, 4))",
                (randn(gen, 2, 1, 4),),
                {"dim": 1},
            ),
            Case(  # moving dim to the end and back by the same movedim(dim, -1): right only
                # when that is a swap (2-D, or dim next to last), as in every case above
                "x (3, 4, 5) with dim=0 (the first of three axes)",
                (randn(gen, 3, 4, 5),),
                {"dim": 0},
            ),
        ]

    def call(self, obj, case):
        value = obj(*case.args, **case.kwargs)
        if case.args[0].requires_grad and isinstance(value, torch.Tensor) and value.grad_fn is None:
            raise GradingError(NO_GRADIENTS)
        return self.learnable(obj, case, value)

    def wrong(self, x, dim=-1, *, mistake):
        if mistake == "moved_back_wrong":  # to the end, then "back" by the same movedim
            return self.wrong(x.movedim(dim, -1), mistake="").movedim(dim, -1)
        axis = {"last_axis": -1, "first_axis": 0}.get(mistake, dim)
        if mistake == "no_max":
            shifted = x
        elif mistake == "minus_mean":
            shifted = x - x.mean(dim=axis, keepdim=True)
        elif mistake in ("global_max", "whole_tensor"):
            shifted = x - x.max()
        elif mistake == "min_shift":
            shifted = x - x.amin(dim=axis, keepdim=True)
        elif mistake == "first_entry":  # right while no entry lies 88 above the first
            shifted = x - x.select(axis, 0).unsqueeze(axis)
        elif mistake == "clamped":  # a guard against overflow that changes the values
            shifted = x.clamp(-80.0, 80.0)
        elif mistake == "max_pair":  # the (values, indices) pair itself: a TypeError
            shifted = x - x.max(dim=axis, keepdim=True)
        elif mistake == "unsqueeze_last":  # a crash unless dim is the last axis
            shifted = x - x.amax(dim=axis).unsqueeze(-1)
        else:
            shifted = x - x.amax(dim=-1 if mistake == "max_last_axis" else axis, keepdim=True)
        if mistake == "log_softmax":
            return shifted - shifted.exp().sum(dim=axis, keepdim=True).log()
        e = shifted.detach().exp() if mistake == "detached" else shifted.exp()
        if mistake == "whole_tensor":
            return e / e.sum()
        out = e / e.sum(dim=axis, keepdim=mistake != "no_keepdim")  # no keepdim: a crash or worse
        return out.squeeze() if mistake == "squeezed" else out

    def diagnose(self, got, want, case):
        if isinstance(got, torch.Tensor) and got.shape == want.shape and got.is_floating_point():
            dim = case.kwargs.get("dim", -1)
            scaled = got / got.amax(dim=dim, keepdim=True)  # exp(x - max) itself, when the
            if got.dtype == torch.float16 or (  # division is in x's dtype: float16 numbers too
                all_close(got, want, 1e-2)
                and any(torch.allclose(t.half().to(t.dtype), t, 1e-6, 0) for t in (got, scaled))
            ):
                return FLOAT16
            if torch.isnan(got).any():
                return "NaN appears: did you subtract the maximum before exp?"
            if not torch.allclose(got.sum(dim=dim), torch.ones_like(got.sum(dim=dim)), atol=1e-4):
                return f"your values do not sum to 1 along dim={dim}"
            if got.dtype == F64 and (got.sum(dim=dim) < 1 - 1e-12).all():  # e / (e.sum() + 1e-6)
                return (
                    "your slices sum to a little less than 1: an epsilon added to the sum? Once "
                    "the maximum is subtracted, the sum is at least exp(0) = 1, never 0: divide "
                    "by the sum itself"
                )
            if got.dtype == F64 and all_close(got, want, 1e-5):  # x.float() inside
                return FLOAT32_DIGITS
        return None


# --- ex02.scaled_dot_product_attention
D_K_FROM_SHAPE_1 = (
    "you took d_k from shape[1] of q (or k), which is d_k only in 2-D; on a batch it is another "
    "axis: d_k is the last dimension, q.shape[-1]"
)
SCALED_AFTER_SOFTMAX = (
    "you divided the weights by sqrt(d_k) after the softmax, so they no longer sum to 1; the "
    "scale goes on the scores, softmax(q k^T / sqrt(d_k))"
)
FLOAT32_SCALE = (
    "your scale is a float32 tensor (torch.sqrt(torch.tensor(d_k)) is float32): its root of a "
    "d_k that is not a perfect square has float32's 7 digits, too few for float64 scores; "
    "divide by math.sqrt(d_k) (or d_k ** 0.5), a Python float"
)
POWER_HALF = (
    "`d_k ** 1/2` is `(d_k ** 1) / 2`: ** binds tighter than /, so that divides by d_k / 2 "
    "(or, written as `scores / d_k ** 1/2`, by 2 d_k); write d_k ** 0.5 or math.sqrt(d_k)"
)


NAN_SHIFT = (
    "NaN appears where a softmax that subtracts each row's own maximum has none: exp overflowed "
    "to inf (inf / inf) or every exp of a row underflowed to 0 (0 / 0). Subtract each row's "
    "maximum, scores.amax(dim=-1, keepdim=True), as your softmax of task 1 does: the whole "
    "tensor's (scores.max()), a row's mean, minimum or first entry leaves exponents far above "
    "or all far below 0"
)


def _nan_where_none(got, want) -> bool:
    pairs = zip(got, want, strict=False) if isinstance(got, (tuple, list)) else [(got, want)]
    return any(
        isinstance(mine, torch.Tensor)
        and mine.is_floating_point()
        and bool(mine.isnan().any())
        and not bool(right.isnan().any())
        for mine, right in pairs
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
            return HintOnError.call(self, obj, case)  # self may be a SelfAttention too

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
        else:
            k_t = k.transpose(
                *{"transpose_0_1": (0, 1), "transpose_1_2": (1, 2)}.get(mistake, (-2, -1))
            )
        if mistake == "scaled_output":  # the scale on the output instead of the scores
            weights = stable_softmax(q @ k_t)
            return weights @ v / scale, weights
        product = {  # 3-D, 2-D only; einsum_3d gets k back, as the learner passes it
            "bmm": torch.bmm,
            "mm": torch.mm,
            "einsum_3d": lambda q, k_t: torch.einsum("bqd,bkd->bqk", q, k_t.mT),
        }.get(mistake, torch.matmul)
        scores = (k @ q.transpose(-2, -1) if mistake == "k_q_order" else product(q, k_t)) / scale
        if mistake == "causal_mask":  # a GPT's mask, which this task does not have
            later = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
            scores = scores.masked_fill(later, -math.inf)
        weights = stable_softmax(
            scores, dim={"query_axis": -2, "softmax_dim_2": 2}.get(mistake, -1)
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


def _softmax_dim_2(failure, error, case) -> bool:
    """The first failure is an IndexError for dim 2 in a softmax (or max) of 2-D scores."""
    if failure is None or failure[0] is not IndexError or "got 2)" not in str(error):
        return False
    n_q, n_k = case.args[0].shape[-2], case.args[1 if len(case.args) == 3 else 0].shape[-2]
    shapes = [shape for shape in failure[2] if shape is not None]
    return failure[1] in _SOFTMAX_OPS and shapes[:1] == [(n_q, n_k)]


_SOFTMAX_OPS = ("softmax", "amax", "max", "logsumexp", "exp", "sum")


# --- ex02.self_attention
_SDPA = ScaledDotProductAttention()
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


# --- ex02.distance_biased_attention (transfer: a bias added to the scores, as in ALiBi)
FLOAT32_BIAS = (
    "your bias was computed in float32, which loses digits against float64 scores: integer "
    "distances times a Python float give float32, as does torch.zeros(n_q, n_k) without dtype=, "
    "and torch.tensor(slope) is float32; build the distances in q's dtype "
    "(torch.arange(n, dtype=q.dtype)) and multiply by the number slope"
)


KEPT_SLOPE = (
    "your weights carry a penalty of {s:.4g} per step of distance, but this call's slope is "
    "{slope}: build the bias from the slope you are given, at every call. A bias kept from an "
    "earlier call (a dict cached by (n_q, n_k), a default argument, a global built once) keeps "
    "that call's slope; key a cache by the slope too, or rebuild the bias each time"
)


@register
class DistanceBiasedAttention(Task):
    id = "ex02.distance_biased_attention"
    lesson = SDPA_LESSON
    reference = "course_lib.attention.distance_biased_attention"
    backward = True  # q, k and v are learned: its gradients are judged too
    depends_on = ("softmax",)
    forbidden = ("torch.nn.functional.scaled_dot_product_attention",)
    mistake_table = {
        "plus": "the penalty must LOWER the scores of distant keys: add -slope * |i - j|, not "
        "+slope * |i - j|",
        "no_max": "exp of large scores overflows (inf / inf = NaN): use your stable softmax from "
        "task 1, which subtracts each row's maximum first",
        **dict.fromkeys(
            ("no_abs", "no_abs_reversed"),
            "use the distance |i - j|: without the absolute value the keys on one side of the "
            "query get a bonus instead of a penalty",
        ),
        "squared_distance": "that is the squared distance (i - j)²; the penalty grows linearly "
        "with the distance: slope * |i - j|",
        "bias_scaled": "add the bias after dividing q·k by sqrt(d_k): scores = q k^T / sqrt(d_k) "
        "- slope * |i - j|; the slope must not be divided too",
        "after_softmax": "the bias goes into the scores BEFORE the softmax, so the weights still "
        "sum to 1",
        "no_bias": "that is plain attention: add -slope * |i - j| to each score, with i the "
        "query's position (row) and j the key's (column), an (n_q, n_k) matrix: "
        "torch.arange(n_q)[:, None] - torch.arange(n_k) (two 1-D aranges subtract to zeros)",
        "no_scaling": "the scores are not scaled: divide q k^T by sqrt(d_k), then add the bias",
        "earlier_keys_only": "you penalised only the keys before the query (causal ALiBi, where "
        "the later keys are masked anyway); here every key is penalised by its distance on "
        "either side, slope * |i - j|",
        "keys_counted_as_queries": "your distance matrix does not have the scores' shape (n_q, "
        "n_k): i counts the queries (rows), torch.arange(n_q)[:, None], and j the keys "
        "(columns), torch.arange(n_k) with n_k = k.shape[-2]; n_q and n_k may differ",
        "lengths_from_shape_1": "you took the lengths from shape[1], which is n only for a 3-D "
        "q; count from the end: n_q = q.shape[-2], n_k = k.shape[-2]",
        "float32_bias": FLOAT32_BIAS,
        "float32_slope": FLOAT32_BIAS,  # as close to float32_bias as seeds make it
        "later_keys_only": "you penalised only the keys after the query; every key is penalised "
        "by its distance on either side, slope * |i - j|",
        "query_axis": ScaledDotProductAttention.mistake_table["query_axis"],
        "by_sqrt_n_k": ScaledDotProductAttention.mistake_table["by_sqrt_n_k"],
        "softmax_twice": "you added the bias to the weights of plain attention (already a "
        "softmax) and took a softmax again; add it to the scores q k^T / sqrt(d_k), before the "
        "one softmax",
        "by_sqrt_d_v": ScaledDotProductAttention.mistake_table["by_sqrt_d_v"],
        "queries_at_the_end": "you placed the queries at the last n_q positions (as decoding "
        "with a cache does); here query i is at position i, counted from 0 like the keys",
        "plain_output": "your weights carry the bias but your output does not (plain "
        "attention's, e.g. from scaled_dot_product_attention(q, k, v)): the output is the "
        "biased weights @ v",
        "plain_weights": "your output carries the bias but the weights you return do not (plain "
        "attention's): return the biased weights, the ones that made the output",
        "float32_scale": FLOAT32_SCALE,
        "keys_square_cut": "you cut the queries' rows from an (n_k, n_k) distance matrix, which "
        "has too few rows when n_q > n_k; build the (n_q, n_k) one from torch.arange(n_q)[:, "
        "None] and torch.arange(n_k)",
        "causal_mask": "you masked the keys after each query (a causal mask, as in a decoder); "
        "this task has no mask: every key keeps a weight, its score lowered by slope * |i - j|",
        "dot_t": ScaledDotProductAttention.mistake_table["dot_t"],
        "queries_counted_as_keys": "your distance matrix does not have the scores' shape (n_q, "
        "n_k): i counts the queries (rows), torch.arange(n_q)[:, None] with n_q = q.shape[-2], "
        "and j the keys (columns), torch.arange(n_k); n_q and n_k may differ",
        "queries_from_1": "you counted the queries' positions from 1 (torch.arange(1, n_q + 1)) "
        "and the keys' from 0: both count from 0, i = torch.arange(n_q), j = torch.arange(n_k), "
        "so query 0 and key 0 are at distance 0",
        "after_softmax_product": "you multiplied the weights by exp(-slope * |i - j|) after the "
        "softmax, so they no longer sum to 1; subtract slope * |i - j| from the scores before "
        "the softmax",
    }

    def cases(self, gen):
        def case(description, spec, dtype=torch.float32, scale=1.0):
            shape_q, n_k, d_v, slope = spec
            *batch, n_q, d_k = shape_q
            q = randn(gen, *shape_q, dtype=dtype, scale=scale)
            k = randn(gen, *batch, n_k, d_k, dtype=dtype, scale=scale)
            v = randn(gen, *batch, n_k, d_v, dtype=dtype)
            return Case(description, (q, k, v, slope))

        return [
            case("q, k, v (2, 5, 8), slope 0.5", ((2, 5, 8), 5, 8, 0.5)),
            case(
                "n_q=3 != n_k=6: q (2, 3, 4), k (2, 6, 4), v (2, 6, 5), slope 1.0",
                ((2, 3, 4), 6, 5, 1.0),
            ),
            case(
                "n_q=6 > n_k=2: q (1, 6, 4), k (1, 2, 4), v (1, 2, 3), slope 0.25",
                ((1, 6, 4), 2, 3, 0.25),
            ),
            case(
                "batch and heads: q, k, v (2, 3, 4, 16), slope 0.75 (d_k = 16)",
                ((2, 3, 4, 16), 4, 16, 0.75),
            ),
            case("float64 q (3, 5, 6), k, v (3, 7, 6), slope 2.0", ((3, 5, 6), 7, 6, 2.0), F64),
            case(
                "slope 0: plain scaled dot-product attention, q, k, v (2, 4, 8)",
                ((2, 4, 8), 4, 8, 0.0),
            ),
            case(
                "q, k, v (4, 4) without a batch dimension, slope 1 given as an int",
                ((4, 4), 4, 4, 1),
            ),
            case(
                "float64, large scores (q and k scaled by 40, scores in the thousands: exp "
                "overflows even in float64 without subtracting the maximum), q, k, v (2, 5, 8), "
                "slope 0.5",
                ((2, 5, 8), 5, 8, 0.5),
                F64,
                scale=40.0,
            ),
            case(
                "float64 q (2, 6, 8), k, v (2, 9, 8), slope 0.3 (not a power of two: the bias "
                "must be computed in float64 too)",
                ((2, 6, 8), 9, 8, 0.3),
                F64,
            ),
        ]

    def diagnose(self, got, want, case):
        """float64 inputs, right to float32's digits only: a bias made in float32 some other way
        than the rows (a torch.zeros filled in a loop, a float32 arange) rounds otherwise. Or
        weights biased by -s |i - j| with another s than this call's slope: a bias kept from an
        earlier call of the same shape (a cache by (n_q, n_k), a default argument)."""
        if case.args[0].dtype == F64 and all_close(got, want, 1e-5):
            return FLOAT32_BIAS
        if _nan_where_none(got, want):  # an inline softmax shifted by another number
            return NAN_SHIFT
        q, k, _, slope = case.args
        weights = got[1] if isinstance(got, (tuple, list)) and len(got) == 2 else None
        shape = (*q.shape[:-1], k.shape[-2])
        if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != shape:
            return None
        with torch.no_grad():
            logs = weights.detach().double().log()  # = q k^T / sqrt(d_k) - s |i - j| + c_row
            raw = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
            distance = (torch.arange(shape[-2])[:, None] - torch.arange(shape[-1])).abs()
            rest, step = logs - raw, distance.double().expand(shape)
            rest, step = rest - rest.mean(-1, keepdim=True), step - step.mean(-1, keepdim=True)
            if not torch.isfinite(rest).all() or not step.abs().sum():
                return None
            s = -float((rest * step).sum() / (step * step).sum())  # least squares
            if (rest + s * step).abs().max() > 1e-3 or abs(s - slope) < 1e-3:
                return None
        return KEPT_SLOPE.format(s=s, slope=slope)

    def wrong(self, q, k, v, slope, *, mistake):
        n_q, n_k = {  # the lengths, from the wrong axis (a crash on a batch) or both from q
            "lengths_from_shape_1": (q.shape[1], k.shape[1]),
            "keys_counted_as_queries": (q.shape[-2], q.shape[-2]),
            "keys_square_cut": (min(q.shape[-2], k.shape[-2]), k.shape[-2]),  # [:n_q] of (n_k, n_k)
            "queries_counted_as_keys": (k.shape[-2], k.shape[-2]),
        }.get(mistake, (q.shape[-2], k.shape[-2]))
        i, j = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
        # the queries aligned to the last keys, as with a KV cache, or counted from 1
        i = i + {"queries_at_the_end": n_k - n_q, "queries_from_1": 1}.get(mistake, 0)
        distance = {
            "no_abs": i - j,
            "no_abs_reversed": j - i,
            "squared_distance": (i - j) ** 2,
            "earlier_keys_only": (i - j).clamp_min(0),
            "later_keys_only": (j - i).clamp_min(0),
        }.get(mistake, (i - j).abs())
        sign = 1.0 if mistake == "plus" else -1.0
        if mistake == "float32_slope":  # torch.tensor(slope): float32
            slope = torch.tensor(slope, dtype=torch.float32).item()
        if mistake == "float32_bias":  # integer distances times a Python float: float32
            bias = (sign * slope * distance).to(q.dtype)
        else:
            bias = sign * slope * distance.to(q.dtype)
        k_t = k.T if mistake == "dot_t" else k.transpose(-2, -1)  # .T: a 2-D habit
        raw, scale = q @ k_t, math.sqrt(q.shape[-1])
        scale = {
            "no_scaling": 1.0,
            "by_sqrt_n_k": math.sqrt(k.shape[-2]),
            "by_sqrt_d_v": math.sqrt(v.shape[-1]),
            "float32_scale": torch.sqrt(torch.tensor(q.shape[-1], dtype=torch.float32)),
        }.get(mistake, scale)
        if mistake == "bias_scaled":  # bias added before dividing by sqrt(d_k)
            scores = (raw + bias) / scale
        elif mistake in ("no_bias", "after_softmax", "after_softmax_product"):
            scores = raw / scale
        elif mistake == "softmax_twice":  # the bias on plain attention's weights
            scores = stable_softmax(raw / scale) + bias
        else:
            scores = raw / scale + bias
        if mistake == "causal_mask":  # ALiBi as decoders use it, with the future masked
            scores = scores.masked_fill(j > i, float("-inf"))
        if mistake == "no_max":
            e = scores.exp()
            weights = e / e.sum(dim=-1, keepdim=True)
        else:
            weights = stable_softmax(scores, dim=-2 if mistake == "query_axis" else -1)
        if mistake == "after_softmax":
            weights = weights + bias
        elif mistake == "after_softmax_product":  # a decay factor on the weights
            weights = weights * bias.exp()
        if mistake in ("plain_output", "plain_weights"):  # the bias in one result only
            plain = stable_softmax(raw / scale)
            return (plain @ v, weights) if mistake == "plain_output" else (weights @ v, plain)
        return weights @ v, weights
