"""ex07.layer_norm: LayerNorm from scratch."""

from __future__ import annotations

import torch

from ...core import Case, Task, compare_values, register
from ..common import float32_digits, randn

NO_KEEPDIM = (
    "mean(dim=-1) without keepdim=True drops the last axis, so x - mean does not line up "
    "with x: keep it, x.mean(dim=-1, keepdim=True), shape (..., 1)"
)

POWER_HALF = (
    "(var + eps) ** 1/2 is ((var + eps) ** 1) / 2: ** binds tighter than /, so that divides by "
    "(var + eps) / 2 (or, inline in x / (var + eps) ** 1/2, by 2 (var + eps)); write "
    "(var + eps) ** 0.5 or torch.sqrt(var + eps)"
)

D_FROM_FRONT = (  # also rms_norm's
    "d is the size of the LAST dimension, x.shape[-1]: x.shape[0] (or len(x)) is the first "
    "one, the batch's, and equals d only for a single vector; average with "
    "x.mean(dim=-1, keepdim=True), or divide the sums by x.shape[-1]"
)

FORBIDDEN = (  # also for ex07.LayerNorm, which calls the learner's layer_norm
    "torch.nn.functional.layer_norm",
    "torch.layer_norm",
    "torch.native_layer_norm",
    "torch.nn.LayerNorm",
    "torch.nn.functional.group_norm",
    "torch.nn.functional.rms_norm",
)

MISTAKES = {
    "batch_axis": "the statistics must be taken per token, over the last dimension "
    "(the d features): mean(dim=-1, keepdim=True), not over the batch or sequence",
    "unbiased": "LayerNorm uses the biased variance (divide by d, not d - 1): "
    "x.var(dim=-1, unbiased=False) or ((x - mean) ** 2).mean(-1)",
    "eps_outside": "eps goes inside the square root: (x - mean) / sqrt(var + eps), "
    "not (x - mean) / (sqrt(var) + eps)",
    "no_keepdim": NO_KEEPDIM,
    "gamma_beta_swapped": "gamma and beta are swapped: gamma scales the normalised x and beta "
    "shifts it, x_hat * gamma + beta",
    "not_centred": "the mean is not subtracted from x: the result is (x - mean) / "
    "sqrt(var + eps), not x / sqrt(var + eps)",
    "second_moment": "the variance is the mean of (x - mean) ** 2; the mean of x ** 2 is the "
    "variance only when the mean is 0",
    "by_variance": "divide by the standard deviation sqrt(var + eps), not by the variance "
    "var + eps",
    "no_beta": "beta is missing: the result is x_hat * gamma + beta",
    "no_affine": "gamma and beta are not applied: scale and shift the normalised x, "
    "x_hat * gamma + beta",
    "shift_before_scale": "beta is added before gamma scales: scale first, then shift, "
    "x_hat * gamma + beta, not (x_hat + beta) * gamma",
    "whole_tensor": "the mean and variance are taken over the whole tensor (no dim); each "
    "vector gets its own, over the last dimension: x.mean(dim=-1, keepdim=True)",
    "dim1": "the statistics are taken over dim=1, the last dimension only when x is 2-D: "
    "use dim=-1 (keepdim=True), whatever the batch dimensions",
    "eps_ignored": "the eps argument is ignored (a fixed 1e-5 is used instead): with eps=0.5 "
    "the result must change; use the eps you are given, sqrt(var + eps)",
    "default_eps": "the default eps is 1e-5 (nn.LayerNorm's), not 1e-6: "
    "def layer_norm(x, gamma, beta, eps=1e-5)",
    "eps_after_division": "eps is added to the normalised x, (x - mean) / sqrt(var) + eps: it "
    "belongs under the square root, (x - mean) / sqrt(var + eps) (mind the brackets)",
    "unbracketed": "x - mean / sqrt(var + eps) divides only the mean: / binds tighter than -, "
    "so bracket the centred x, (x - mean) / sqrt(var + eps) * gamma + beta",
    "power_half": POWER_HALF,
    "power_half_inline": POWER_HALF,
    "stats_detached": "the mean and variance are detached (.detach() or torch.no_grad()): the "
    "values are right, but no gradient flows through them, so training differs from "
    "nn.LayerNorm's; compute them from x with tensor operations",
    "std_as_number": "the standard deviation became a plain Python number (math.sqrt of a "
    "tensor, .item() or float()): the values are right, but no gradient flows through it, so "
    "training differs from nn.LayerNorm's; keep it a tensor, torch.sqrt(var + eps) (a .detach() "
    "of the variance alone cuts it the same way)",
    "eps_times_gamma": "eps is in the wrong place and gamma no longer scales: (x - mean) / "
    "sqrt(var) + eps * gamma + beta adds eps * gamma to the normalised x; eps goes under the "
    "square root and gamma multiplies: (x - mean) / sqrt(var + eps) * gamma + beta",
    "d_minus_1_unbracketed": "/ binds tighter than -: sum / d - 1 is (sum / d) - 1, your "
    "variance minus 1; and LayerNorm divides by d itself anyway (the biased variance): "
    "((x - mean) ** 2).mean(dim=-1, keepdim=True)",
    "eps_on_sum": "eps is added to the sum of the squares, sqrt(sum((x - mean) ** 2) + eps) "
    "/ sqrt(d) (as in ||x - mean|| / sqrt(d)), so it weighs d times less: add it to the "
    "variance, the mean of the squares, torch.sqrt(var + eps)",
    "no_eps": "your result is LayerNorm without eps (or with a far smaller one): add eps to the "
    "variance inside the square root, sqrt(var + eps), with the default eps=1e-5",
    "gamma_before_norm": "gamma scales x before it is normalised, so the normalisation divides "
    "its scale back out: normalise x itself first, then scale and shift the result, "
    "(x - mean) / sqrt(var + eps) * gamma + beta",
    "d_from_front": D_FROM_FRONT,
    "var_d_from_front": D_FROM_FRONT,
    "affine_before_norm": "gamma and beta are applied before the normalisation, which then "
    "takes their scale and shift back out: normalise x itself first, then scale and shift the "
    "result, (x - mean) / sqrt(var + eps) * gamma + beta",
    "eps_rooted": "std + sqrt(eps) is not sqrt(var + eps): a square root of a sum is not the "
    "sum of the roots. Add eps to the variance under the one square root: "
    "(x - mean) / torch.sqrt(var + eps)",
}


def wrong_layer_norm(x, gamma, beta, eps=None, *, mistake=""):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis, with one named mistake."""
    if eps is None or mistake == "eps_ignored":
        eps = 1e-6 if mistake == "default_eps" else 1e-5
    eps = 0.0 if mistake == "no_eps" else eps
    eps = eps / x.shape[-1] if mistake == "eps_on_sum" else eps  # sqrt(sum + eps) / sqrt(d)
    if mistake in ("gamma_before_norm", "affine_before_norm"):  # x * gamma (+ beta) first
        shift = beta if mistake == "affine_before_norm" else torch.zeros_like(beta)
        return wrong_layer_norm(x * gamma + shift, torch.ones_like(gamma), beta - shift, eps)
    dim = {"batch_axis": 0, "dim1": 1, "whole_tensor": None}.get(mistake, -1)
    keepdim = mistake != "no_keepdim"
    mean = x.mean() if dim is None else x.mean(dim=dim, keepdim=keepdim)
    spread = x if mistake == "second_moment" else x - mean
    var = (spread**2).mean() if dim is None else (spread**2).mean(dim=dim, keepdim=keepdim)
    if mistake in ("d_from_front", "var_d_from_front"):  # d = x.shape[0] (or len(x)): sum / d
        mean = x.sum(dim=-1, keepdim=True) / x.shape[0] if mistake == "d_from_front" else mean
        var = ((x - mean) ** 2).sum(dim=-1, keepdim=True) / x.shape[0]
    if mistake == "stats_detached":
        mean, var = mean.detach(), var.detach()
    if mistake == "unbiased":
        var = x.var(dim=dim, unbiased=True, keepdim=True)
    if mistake == "d_minus_1_unbracketed":  # ((x - mean) ** 2).sum(-1) / d - 1
        var = var - 1
    if mistake == "eps_times_gamma":  # (x - mean) / sqrt(var) + eps * gamma + beta
        return (x - mean) / var.sqrt() + eps * gamma + beta
    if mistake in ("eps_outside", "eps_rooted"):  # x.std(...) + eps, or + math.sqrt(eps)
        x_hat = (x - mean) / (var.sqrt() + (eps**0.5 if mistake == "eps_rooted" else eps))
    elif mistake == "eps_after_division":
        x_hat = (x - mean) / var.sqrt() + eps
    else:
        halves = {"power_half": (var + eps) / 2, "power_half_inline": 2 * (var + eps)}
        root = {"by_variance": var + eps, **halves}.get(mistake)
        root = torch.sqrt(var + eps) if root is None else root
        root = root.detach() if mistake == "std_as_number" else root  # math.sqrt of each row
        if mistake == "unbracketed":  # x - mean / sqrt(var + eps) * gamma + beta
            return x - mean / root * gamma + beta
        x_hat = (x if mistake == "not_centred" else x - mean) / root
    if mistake == "gamma_beta_swapped":
        return x_hat * beta + gamma
    if mistake == "no_affine":
        return x_hat
    if mistake == "shift_before_scale":
        return (x_hat + beta) * gamma
    return x_hat * gamma if mistake == "no_beta" else x_hat * gamma + beta


@register
class LayerNormTask(Task):
    id = "ex07.layer_norm"
    lesson = "lesson 07, section 'LayerNorm from scratch'"
    reference = "course_lib.blocks.layer_norm"
    backward = True  # x, gamma and beta are learned: its gradients are judged too
    mistake_table = MISTAKES
    wrong = staticmethod(wrong_layer_norm)
    forbidden = FORBIDDEN

    def cases(self, gen):
        def case(description, shape, dtype=torch.float32, scale=3.0, eps=None, grad=False):
            d = shape[-1]
            # an offset, except for tiny rows (float32 cannot centre 1.5 + 1e-3 noise exactly)
            x = scale * randn(gen, *shape, dtype=dtype) + (1.5 if scale >= 1 else 0.0)
            gamma = 1 + randn(gen, d, dtype=dtype)
            beta = randn(gen, d, dtype=dtype)
            kwargs = {} if eps is None else {"eps": eps}
            data = {"grad_weights": randn(gen, *shape, dtype=dtype)} if grad else {}
            return Case(description, (x, gamma, beta), kwargs, data=data)

        return [
            case("x (4, 6), the default eps", (4, 6)),
            case("a batch x (2, 5, 8)", (2, 5, 8)),
            case("x (3, 4, 2, 6) with two batch dimensions", (3, 4, 2, 6)),
            case("a single vector x (10,)", (10,)),
            case("float64 x (2, 3, 7)", (2, 3, 7), dtype=torch.float64),
            case("x (2, 4, 5) with eps=0.5", (2, 4, 5), eps=0.5),
            case("nearly constant rows, x (3, 6) * 1e-3 (variance close to eps)",
                 (3, 6), scale=1e-3),
            case("float64 x (5, 5) * 1e-3 with eps=1e-4",
                 (5, 5), dtype=torch.float64, scale=1e-3, eps=1e-4),
            # the values alone passed with the mean and variance detached
            case("the gradient with respect to x, float64 x (3, 6)", (3, 6), torch.float64,
                 grad=True),
        ]  # fmt: skip

    def call(self, obj, case):
        if "grad_weights" not in case.data:
            return super().call(obj, case)
        x = case.args[0].requires_grad_(True)  # the case's own copy: training back-propagates
        out = obj(*case.args, **case.kwargs)
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            return out, None
        weights = case.data["grad_weights"]
        return out.detach(), torch.autograd.grad((out * weights).sum(), x, allow_unused=True)[0]

    def diagnose(self, got, want, case):  # x.float() and back: float32's digits
        return float32_digits(got, want)

    def compare(self, got, want, case):
        if "grad_weights" not in case.data:
            return super().compare(got, want, case)
        got, got_grad = got if isinstance(got, tuple) else (got, None)
        return compare_values(got, want[0]) or compare_values(
            got_grad, want[1], "your result has the right values, but its gradient"
        )
