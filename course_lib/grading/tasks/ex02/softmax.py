"""ex02.softmax: a numerically stable softmax along any axis."""

from __future__ import annotations

import torch

from ...core import Case, GradingError, Task, register
from ..common import all_close, randn
from ._shared import F64, FLOAT32_DIGITS

SOFTMAX_LESSON = "lesson 02, section 'A numerically stable softmax'"

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


FLOAT16 = (
    "your softmax went through float16 (a .half()): its 11 bits keep about 3 significant "
    "digits, so the values are off from the 4th on (and float16 overflows past 65504, exp(11.1)); "
    "compute in x's dtype throughout, with no .half()"
)


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
