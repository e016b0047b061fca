"""ex07.rms_norm (transfer: Llama's norm)."""

from __future__ import annotations

import torch

from ...core import Case, Task, register
from ..common import float32_digits, randn
from .layer_norm import D_FROM_FRONT, NO_KEEPDIM, POWER_HALF

STD = (
    "you divided by the standard deviation (x.var and x.std subtract the mean first): RMSNorm "
    "divides by sqrt(mean(x**2) + eps), the mean of the squares of x itself"
)

NO_EPS = (
    "your result is RMSNorm without eps (or with a far smaller one, as when eps is added to the "
    "sum of the squares, sqrt(sum(x**2) + eps) / sqrt(d), where it weighs d times less): add eps "
    "to the MEAN of the squares, inside the square root, sqrt(mean(x**2) + eps), with the "
    "default eps=1e-6"
)

MISTAKES = {
    "mean_subtracted": "you subtracted the mean: that is LayerNorm without its bias. "
    "RMSNorm only divides by the root mean square, sqrt(mean(x**2) + eps), and keeps "
    "the mean",
    "eps_outside": "eps goes inside the square root: sqrt(mean(x**2) + eps)",
    "eps_rooted": "sqrt(mean(x**2)) + sqrt(eps) is not sqrt(mean(x**2) + eps): a square root "
    "of a sum is not the sum of the roots. Add eps under the one square root: "
    "torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)",
    "batch_axis": "the mean is over the last dimension (each vector's d features): "
    "mean(dim=-1, keepdim=True)",
    "no_sqrt": "divide by the ROOT mean square: take the square root of mean(x**2) + eps",
    "no_keepdim": NO_KEEPDIM.replace("x - mean does", "x / rms does"),
    "weight_added": "weight scales the normalised x: multiply by it, x / rms * weight, do not "
    "add it",
    "no_weight": "weight is missing: multiply the normalised x by it, x / rms * weight",
    "sum": "divide by the root MEAN square: the mean of x**2 over the d features, not the sum "
    "(which would give every vector length 1 instead of RMS 1)",
    "times_rms": "you multiplied by the root mean square instead of dividing by it: "
    "x / sqrt(mean(x**2) + eps), or x * torch.rsqrt(mean(x**2) + eps) (rsqrt is already "
    "1 / sqrt)",
    "mean_squared": "the mean of the squares, mean(x**2), is not the square of the mean, "
    "mean(x)**2: square x first, then average",
    "eps_ignored": "the eps argument is ignored (a fixed 1e-6 is used instead): with eps=0.5 the "
    "result must change; use the eps you are given, sqrt(mean(x**2) + eps)",
    "default_eps": "the default eps of rms_norm is 1e-6 (Llama's), not 1e-5 (LayerNorm's): "
    "def rms_norm(x, weight, eps=1e-6)",
    "dim1": "the mean is taken over dim=1, the last dimension only when x is 2-D: use "
    "dim=-1 (keepdim=True), whatever the batch dimensions",
    "whole_tensor": "the mean square is taken over the whole tensor (no dim); each vector gets "
    "its own, over the last dimension: x.pow(2).mean(dim=-1, keepdim=True)",
    "variance": STD,
    "variance_unbiased": STD,
    "mean_abs": "you divided by the mean absolute value, mean(|x|): RMSNorm divides by the "
    "ROOT MEAN SQUARE, sqrt(mean(x**2) + eps): square x, average over the last dimension, add "
    "eps, then take the square root",
    "weight_plus_one": "you scaled by 1 + weight (Gemma's RMSNorm, whose weight starts at 0); "
    "Llama's, this task's, multiplies by the weight itself: x / sqrt(mean(x**2) + eps) * weight",
    "no_eps": NO_EPS,
    "eps_on_sum": NO_EPS,  # sqrt(sum(x**2) + eps) / sqrt(d): eps / d, no_eps's result in float64
    "sum_sqrt_d": "you divided the sum of the squares by sqrt(d): the mean square divides it by "
    "d itself (sqrt(d) belongs to the norm: ||x|| / sqrt(d) = sqrt(sum(x**2) / d)); use "
    "x.pow(2).mean(dim=-1, keepdim=True) inside the square root",
    "power_half": POWER_HALF.replace("var + eps", "mean(x**2) + eps"),
    "power_half_inline": POWER_HALF.replace("var + eps", "mean(x**2) + eps"),
    "rms_detached": "the root mean square is cut off from the gradient (.detach() or "
    "torch.no_grad() around it, or a plain Python number: math.sqrt of a tensor, .item(), "
    "float()): the values are right, but no gradient flows through it, so training differs "
    "from RMSNorm's; keep it a tensor, torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)",
    "weight_before_norm": "weight scales x before it is normalised, so dividing by the root mean "
    "square of x * weight takes its scale back out: normalise x itself first, then multiply, "
    "x / sqrt(mean(x**2) + eps) * weight",
    "sum_by_shape0": D_FROM_FRONT.replace("x.mean(", "x.pow(2).mean(").replace(
        "the sums", "the sum of the squares"
    ),
    "eps_at_end": "eps is added to the result, x / sqrt(mean(x**2)) * weight + eps: it belongs "
    "under the square root, x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight "
    "(mind the brackets)",
}


def wrong_rms_norm(x, weight, eps=None, *, mistake=""):
    """x / sqrt(mean(x**2) + eps) * weight over the last axis, with one named mistake."""
    if eps is None or mistake == "eps_ignored":
        eps = 1e-5 if mistake == "default_eps" else 1e-6
    eps = 0.0 if mistake == "no_eps" else eps
    eps = eps / x.shape[-1] if mistake == "eps_on_sum" else eps  # sqrt(sum + eps) / sqrt(d)
    if mistake == "weight_before_norm":  # x = x * weight, then the normalisation
        return wrong_rms_norm(x * weight, torch.ones_like(weight), eps)
    if mistake == "mean_abs":  # x / (mean(|x|) + eps): the mean absolute value for the rms
        return x / (x.abs().mean(dim=-1, keepdim=True) + eps) * weight
    if mistake == "mean_subtracted":
        x = x - x.mean(dim=-1, keepdim=True)
    dim, keepdim = {"batch_axis": 0, "dim1": 1}.get(mistake, -1), mistake != "no_keepdim"
    if mistake.startswith("sum"):  # sum_sqrt_d: sum / sqrt(d), the norm's sqrt(d) misplaced
        root_d = {"sum_sqrt_d": x.shape[-1] ** 0.5, "sum_by_shape0": x.shape[0]}.get(mistake, 1)
        mean_square = x.pow(2).sum(dim=dim, keepdim=keepdim) / root_d
    elif mistake == "whole_tensor":
        mean_square = x.pow(2).mean()
    elif mistake.startswith("variance"):  # x.var(-1, ...): the mean is subtracted inside
        mean_square = x.var(dim=dim, keepdim=keepdim, unbiased=mistake == "variance_unbiased")
    elif mistake == "mean_squared":
        mean_square = x.mean(dim=dim, keepdim=keepdim).pow(2)
    else:
        mean_square = x.pow(2).mean(dim=dim, keepdim=keepdim)
    if mistake in ("eps_outside", "eps_rooted"):
        rms = torch.sqrt(mean_square) + (eps**0.5 if mistake == "eps_rooted" else eps)
    else:
        rms = mean_square + eps if mistake == "no_sqrt" else torch.sqrt(mean_square + eps)
        halves = {
            "power_half": (mean_square + eps) / 2,
            "power_half_inline": 2 * (mean_square + eps),
        }
        rms = halves.get(mistake, rms.detach() if mistake == "rms_detached" else rms)
    normed = x * rms if mistake == "times_rms" else x / rms
    if mistake == "no_weight":
        return normed
    if mistake == "eps_at_end":  # x / sqrt(mean(x**2)) * weight + eps
        return x / mean_square.sqrt() * weight + eps
    weight = 1 + weight if mistake == "weight_plus_one" else weight  # Gemma's (1 + weight)
    return normed + weight if mistake == "weight_added" else normed * weight


@register
class RMSNormTask(Task):
    id = "ex07.rms_norm"
    lesson = "lesson 07, section 'LayerNorm from scratch'"
    reference = "course_lib.llama.rms_norm"
    backward = True  # x and weight are learned: its gradients are judged too
    mistake_table = MISTAKES
    wrong = staticmethod(wrong_rms_norm)
    forbidden = (
        "torch.nn.functional.rms_norm",
        "torch.nn.RMSNorm",
        "torch.nn.functional.layer_norm",
        "torch.nn.LayerNorm",
        "torch.rms_norm",
    )

    def cases(self, gen):
        def case(description, shape, dtype=torch.float32, scale=3.0, shift=0.0, eps=None):
            d = shape[-1]
            x = scale * randn(gen, *shape, dtype=dtype) + shift
            weight = 1.0 + 0.5 * randn(gen, d, dtype=dtype)
            kwargs = {} if eps is None else {"eps": eps}
            return Case(description, (x, weight), kwargs)

        return [
            case("x (2, 5, 8) with a mean of 2 per feature (RMSNorm keeps the mean)",
                 (2, 5, 8), shift=2.0),
            case("x (7, 4), one vector per row", (7, 4), shift=-1.0),
            case("float64 x (2, 3, 4, 16)", (2, 3, 4, 16), dtype=torch.float64, shift=0.5),
            case("x (1, 3, 6) of tiny values (about 1e-3), default eps = 1e-6",
                 (1, 3, 6), scale=1e-3),
            case("float64 x (3, 5) with eps=0.5 given", (3, 5), dtype=torch.float64, eps=0.5),
            case("x (4, 1): a single feature", (4, 1), shift=1.0),
        ]  # fmt: skip

    def diagnose(self, got, want, case):
        return float32_digits(got, want, "; Llama's upcast is for float16 and bfloat16 input")
