"""The ex07 grader: references pass, each mistake fails with its hint, shortcuts are caught."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import mistake_params, task_statement
from torch import nn

from course_lib.blocks import EncoderLayer, FeedForward, layer_norm
from course_lib.grading import NOTEBOOK_SEED, check_result, get_task
from course_lib.grading.core import judge, run_cases
from course_lib.grading.tasks import ex07
from course_lib.multihead import MultiHeadAttention
from course_lib.norms import LayerNorm as CourseLayerNorm


def status(task_id, obj):
    result = check_result(task_id, obj)
    assert not isinstance(result, str), result
    return result


# ---- alternative correct implementations ----------------------------------------------------


def layer_norm_var_mean(x, gamma, beta, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + eps) * gamma + beta


def layer_norm_float64_path(x, gamma, beta, eps=1e-5):
    x64 = x.double()
    centred = x64 - x64.mean(-1, keepdim=True)
    out = centred / (centred.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return (out * gamma.double() + beta.double()).to(x.dtype)


def activation_module(name):
    """The activation called `name` as a module, as a learner may write it (nn.ReLU, ...)."""

    class ReLUSquared(nn.Module):
        def forward(self, h):
            return torch.relu(h).square()

    makers = {
        "relu": nn.ReLU,
        "gelu": nn.GELU,
        "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
        "relu2": ReLUSquared,
    }
    if name not in makers:
        raise ValueError(f"activation must be one of {sorted(makers)}, got {name!r}")
    return makers[name]()


class FeedForwardEinsum(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.act = activation_module(activation)

    def forward(self, x):
        hidden = torch.einsum("...d,fd->...f", x, self.linear1.weight)
        if self.linear1.bias is not None:
            hidden = hidden + self.linear1.bias
        out = torch.einsum("...f,df->...d", self.dropout(self.act(hidden)), self.linear2.weight)
        return out if self.linear2.bias is None else out + self.linear2.bias


class EncoderLayerByHand(nn.Module):
    """Uses course_lib's MultiHeadAttention (allowed) and its own LayerNorm (`norm_class`: the
    learner's, LayerNormByHand, unless a subclass says otherwise)."""

    norm_class = None

    def __init__(self, d_model, num_heads, d_ff, norm_first=False, activation="relu", bias=True):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=bias)
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        norm_class = self.norm_class or LayerNormByHand
        self.norm1 = norm_class(d_model, bias=bias)
        self.norm2 = norm_class(d_model, bias=bias)
        self.act = activation_module(activation)

    def forward(self, x, mask=None):
        def sa(h):
            return self.self_attn(h, h, h, mask=mask, need_weights=False)[0]

        def ff(h):
            return self.linear2(self.act(self.linear1(h)))

        if self.norm_first:
            x = x + sa(self.norm1(x))
            return x + ff(self.norm2(x))
        x = self.norm1(x + sa(x))
        return self.norm2(x + ff(x))


class EncoderLayerWrapsTorch(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__()
        self.inner = nn.TransformerEncoderLayer(
            d_model, num_heads, d_ff, 0.0, batch_first=True, norm_first=norm_first
        )

    def forward(self, x, mask=None):
        return self.inner(x, src_mask=None if mask is None else ~mask)


class EncoderLayerCallsReference(EncoderLayerByHand):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, norm_first)
        self.ref = EncoderLayer(d_model, num_heads, d_ff, norm_first=norm_first)

    def forward(self, x, mask=None):
        self.ref.load_state_dict(self.state_dict(), strict=False)
        return self.ref(x, mask)


class LayerNormByHand(nn.Module):
    """A correct alternative: its own statistics (var_mean), no bias tensor when bias=False."""

    def __init__(self, d_model, eps=1e-5, bias=True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        if bias:
            self.bias = nn.Parameter(torch.zeros(d_model))
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        out = layer_norm_var_mean(x, self.weight, torch.zeros_like(self.weight), self.eps)
        return out if self.bias is None else out + self.bias


class AlwaysBiasedLayerNorm(LayerNormByHand):
    def __init__(self, d_model, eps=1e-5, bias=True):
        super().__init__(d_model, eps, bias=True)


class LayerNormViaF(LayerNormByHand):
    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


def ln_via_F(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)


def ln_via_module(x, gamma, beta, eps=1e-5):
    norm = nn.LayerNorm(x.shape[-1], eps=eps).to(x.dtype)
    with torch.no_grad():
        norm.weight.copy_(gamma)
        norm.bias.copy_(beta)
    return norm(x).detach()


def ln_via_reference(x, gamma, beta, eps=1e-5):
    return layer_norm(x, gamma, beta, eps)


class FeedForwardStub(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__()
        raise NotImplementedError()


class EncoderLayerStub(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False, activation="relu", bias=True):
        super().__init__()
        raise NotImplementedError()


def layer_norm_stub(x, gamma, beta, eps=1e-5):
    raise NotImplementedError()


# ---- tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task_id, obj",
    [
        ("ex07.layer_norm", layer_norm),
        ("ex07.FeedForward", FeedForward),
        ("ex07.EncoderLayer", EncoderLayer),
    ],
)
def test_reference_passes(task_id, obj):
    # The reference calling itself would count as "calls the reference": run it unwatched.
    task = get_task(task_id)
    unwatched = copy.copy(task)
    unwatched.reference = ""
    unwatched.borrowable = ()  # its norms are the course's LayerNorm, borrowed in a learner's layer
    cases = task.cases(torch.Generator().manual_seed(NOTEBOOK_SEED))
    result = judge(task, cases, run_cases(unwatched, obj, cases))
    assert result.status == "passed", result.feedback
    assert result.score == result.max_score


@pytest.mark.parametrize(
    "task_id, obj",
    [
        ("ex07.layer_norm", layer_norm_var_mean),
        ("ex07.layer_norm", layer_norm_float64_path),
        ("ex07.LayerNorm", LayerNormByHand),
        ("ex07.FeedForward", FeedForwardEinsum),
        ("ex07.EncoderLayer", EncoderLayerByHand),
    ],
)
def test_alternative_correct_implementations_pass(task_id, obj):
    result = status(task_id, obj)
    assert result.status == "passed", result.feedback


def _mistake_params():
    return mistake_params(
        "ex07.layer_norm", "ex07.LayerNorm", "ex07.FeedForward", "ex07.EncoderLayer"
    )


def test_every_named_mistake_is_covered():
    names = {w.__name__ for _, w, _ in (p.values for p in _mistake_params())}
    # one wrong implementation per task, named by its mistake (e.g. wrong_layer_norm_unbiased)
    assert {f"wrong_layer_norm_{m}" for m in ("batch_axis", "unbiased", "eps_outside")} <= names
    assert {
        f"WrongFeedForward_{m}"
        for m in ("no_activation", "activation_after", "no_dropout", "dropout_on_output")
    } <= names
    assert {"WrongEncoderLayer_pre_post_swapped", "WrongEncoderLayer_residual_normed"} <= names


@pytest.mark.parametrize(
    "task_id, obj, needle",
    [
        ("ex07.layer_norm", ln_via_F, "torch.nn.functional.layer_norm"),
        ("ex07.layer_norm", ln_via_module, "torch.nn.LayerNorm"),
        ("ex07.LayerNorm", LayerNormViaF, "torch.nn.functional.layer_norm"),
        ("ex07.EncoderLayer", EncoderLayerWrapsTorch, "torch.nn.TransformerEncoderLayer"),
    ],
)
def test_forbidden_calls(task_id, obj, needle):
    result = status(task_id, obj)
    assert result.status == "forbidden", result.feedback
    assert needle in result.feedback


@pytest.mark.parametrize(
    "task_id, obj",
    [("ex07.layer_norm", ln_via_reference), ("ex07.EncoderLayer", EncoderLayerCallsReference)],
)
def test_calling_the_reference_is_forbidden(task_id, obj):
    result = status(task_id, obj)
    assert result.status == "forbidden"
    assert "course_lib.blocks" in result.feedback and result.score == 0


@pytest.mark.parametrize(
    "task_id, obj",
    [
        ("ex07.layer_norm", layer_norm_stub),
        ("ex07.FeedForward", FeedForwardStub),
        ("ex07.EncoderLayer", EncoderLayerStub),
    ],
)
def test_stub_is_not_implemented(task_id, obj):
    assert status(task_id, obj).status == "not implemented"


def test_layer_norm_module_equals_torch_and_names_its_mistakes():
    # the learner's module, with and without bias, equals nn.LayerNorm loaded with its weights
    for bias in (True, False):
        theirs = nn.LayerNorm(6, eps=1e-3, bias=bias)
        with torch.no_grad():
            theirs.weight.normal_()
            if bias:
                theirs.bias.normal_()
        ours = LayerNormByHand(6, eps=1e-3, bias=bias)
        ours.load_state_dict(theirs.state_dict())
        x = torch.randn(2, 3, 6)
        torch.testing.assert_close(ours(x), theirs(x))
    # a module that keeps its bias with bias=False is told to pass bias on
    result = status("ex07.LayerNorm", AlwaysBiasedLayerNorm)
    assert result.status == "failed" and "pass bias=bias on" in result.feedback, result.feedback


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("bias", [True, False])
def test_the_encoder_layer_by_hand_equals_torch_for_its_activations(activation, bias):
    # what the task promises: equal to nn.TransformerEncoderLayer for the activations torch has
    from course_lib.multihead import torch_attention_state

    for norm_first in (False, True):
        theirs = nn.TransformerEncoderLayer(
            8, 2, 16, 0.0, activation, bias=bias, norm_first=norm_first, batch_first=True
        ).eval()
        ours = EncoderLayerByHand(8, 2, 16, norm_first, activation, bias).eval()
        ours.load_state_dict(torch_attention_state(theirs.state_dict()))
        x = torch.randn(2, 5, 8)
        with torch.no_grad():
            torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-5)
    assert status("ex07.EncoderLayer", EncoderLayerByHand).status == "passed"


def test_biases_left_on_with_bias_false_get_the_bias_hint():
    class AlwaysBiased(EncoderLayerByHand):
        def __init__(
            self, d_model, num_heads, d_ff, norm_first=False, activation="relu", bias=True
        ):
            super().__init__(d_model, num_heads, d_ff, norm_first, activation, bias=True)

    result = status("ex07.EncoderLayer", AlwaysBiased)
    assert result.status == "failed" and "pass bias=bias on" in result.feedback, result.feedback


class LayerNormWithZerosAttribute(LayerNormByHand):
    """bias=False's zeros made once in __init__ as a plain tensor: right on the CPU, but
    module.to("cuda") leaves it behind."""

    def __init__(self, d_model, eps=1e-5, bias=True):
        super().__init__(d_model, eps, bias)
        self.zeros = torch.zeros(d_model)

    def forward(self, x):
        out = layer_norm_var_mean(x, self.weight, self.zeros, self.eps)
        return out if self.bias is None else out + self.bias


class LayerNormWithZerosBuffer(LayerNormWithZerosAttribute):
    def __init__(self, d_model, eps=1e-5, bias=True):
        super().__init__(d_model, eps, bias)
        del self.zeros
        self.register_buffer("zeros", torch.zeros(d_model), persistent=False)


def test_a_layer_norm_with_a_plain_tensor_attribute_fails_as_it_would_on_a_gpu():
    # #hunt19: a device-only bug that every CPU check passed
    assert status("ex07.LayerNorm", LayerNormWithZerosBuffer).status == "passed"
    result = status("ex07.LayerNorm", LayerNormWithZerosAttribute)
    assert result.status == "failed", result.feedback
    assert "keeps the tensor zeros as a plain attribute" in result.feedback, result.feedback


class LayerNormWithZerosOnTheCpu(LayerNormByHand):
    """bias=False's zeros made in forward, torch.zeros(d_model): the right values on the CPU
    (a float32 beta promotes to float64), but on a GPU they meet CUDA tensors and fail."""

    def forward(self, x):
        beta = torch.zeros(self.weight.shape[0]) if self.bias is None else self.bias
        return layer_norm_var_mean(x, self.weight, beta, self.eps)


def test_h07c_a_layer_norm_making_cpu_zeros_in_forward_fails_as_it_would_on_a_gpu():
    # before: passed all 8 checks (notebook and hidden seeds); exercise 09 on Colab's GPU then
    # failed with 'Expected all tensors to be on the same device'
    for seed, r in _hidden_seed_results("ex07.LayerNorm", LayerNormWithZerosOnTheCpu, (0, 1, 5)):
        assert r.status == "failed" and "makes a tensor on the CPU" in r.feedback, (seed, r)
    result = status("ex07.LayerNorm", LayerNormWithZerosOnTheCpu)
    assert result.status == "failed" and "zeros_like(self.weight)" in result.feedback


def test_badly_named_submodules_get_a_clear_message():
    class Misnamed(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            self.first = nn.Linear(d_model, d_ff)
            self.second = nn.Linear(d_ff, d_model)

        def forward(self, x):
            return self.second(torch.relu(self.first(x)))

    result = status("ex07.FeedForward", Misnamed)
    assert result.status == "failed"
    assert "no parameter named 'linear1.weight'" in result.feedback


def test_a_feed_forward_nested_as_in_the_lesson_is_told_where_its_weights_go():
    # #hunt4: the lesson's MyEncoderLayer keeps self.feed_forward = FeedForward(...); the task
    # names linear1 and linear2 on the layer. It got only the list of its parameter names.
    class Nested(EncoderLayerByHand):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.feed_forward = nn.Sequential()
            self.feed_forward.linear1, self.feed_forward.linear2 = self.linear1, self.linear2
            del self.linear1, self.linear2

    result = status("ex07.EncoderLayer", Nested)
    assert result.status == "failed"
    assert "one level deeper, as 'feed_forward.linear1.weight'" in result.feedback


# ---- found by a fresh reader: wrong answers that passed -------------------------------------


class _DecoderSlicingMasks(ex07.decoder_layer.WrongDecoderLayer):
    """Right for (n, n) and (batch, 1, n_src) masks, the only shapes the check used to pass;
    wrong for per-sequence masks, which the statement allows (passed 7/7)."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self_mask is not None and self_mask.dim() == 3:
            self_mask = self_mask[0]  # the first sequence's mask for every sequence
        if memory_mask is not None and memory_mask.dim() == 3:
            memory_mask = memory_mask[:, :1, :]  # the first query's mask for every query
        return super().forward(x, memory, self_mask, memory_mask)


def test_a_decoder_that_handles_only_the_usual_mask_shapes_fails():
    result = status("ex07.DecoderLayer", _DecoderSlicingMasks)
    assert result.status == "failed" and "per-sequence masks" in result.feedback, result


def test_a_feed_forward_that_also_holds_its_layers_in_a_sequential_passes():
    # the same two layers under a second name are not extra parameters (it failed 0/7)
    class FeedForward(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
            super().__init__()
            self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
            self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
            act = activation_module(activation)
            self.net = nn.Sequential(self.linear1, act, nn.Dropout(dropout), self.linear2)

        def forward(self, x):
            return self.net(x)

    assert status("ex07.FeedForward", FeedForward).status == "passed"


# ---- single mistakes, written as a learner would: before they had their hints, each got "more
# than one thing may be wrong" (or the hint of another mistake), and keep-probability dropout
# passed every check ------------------------------------------------------------------------


def _ln_stats(x):
    var, mu = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return mu, var


def ln_eps_fixed(x, gamma, beta, eps=1e-5):
    mu, var = _ln_stats(x)
    return gamma * (x - mu) * torch.rsqrt(var + 1e-5) + beta


def ln_bert_eps(x, gamma, beta, eps=1e-6):
    mu, var = _ln_stats(x)
    return gamma * (x - mu) * torch.rsqrt(var + eps) + beta


def ln_without_eps(x, gamma, beta, eps=1e-5):
    mu, var = _ln_stats(x)
    return gamma * (x - mu) / var.sqrt() + beta


def ln_gamma_beta_swapped(x, gamma, beta, eps=1e-5):
    mu, var = _ln_stats(x)
    return beta * (x - mu) / (var + eps).sqrt() + gamma


def ln_not_centred(x, gamma, beta, eps=1e-5):
    mu, var = _ln_stats(x)
    return gamma * x / (var + eps).sqrt() + beta


def ln_mean_of_squares(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    return gamma * (x - mu) / ((x * x).mean(-1, keepdim=True) + eps).sqrt() + beta


def ln_statistics_without_gradient(x, gamma, beta, eps=1e-5):  # #hunt6: passed 8/8
    with torch.no_grad():
        mu, var = _ln_stats(x)
    return gamma * (x - mu) / (var + eps).sqrt() + beta


def ln_rows_with_math_sqrt(x, gamma, beta, eps=1e-5):  # #s9: "None of the usual" on 8/9
    # a loop over the rows, each one's divisor taken with math.sqrt: a Python float, so the
    # values are right but no gradient flows through the standard deviation (the statement
    # now says that the check compares the gradient too)
    rows = x.reshape(-1, x.shape[-1])
    out = torch.empty_like(rows)
    for i, row in enumerate(rows):
        mu = row.sum() / row.numel()
        var = ((row - mu) ** 2).sum() / row.numel()
        out[i] = (row - mu) / math.sqrt(var + eps) * gamma + beta
    return out.reshape(x.shape)


def ln_by_variance(x, gamma, beta, eps=1e-5):
    mu, var = _ln_stats(x)
    return gamma * (x - mu) / (var + eps) + beta


def ln_no_shift(x, gamma, beta, eps=1e-5):
    mu, var = _ln_stats(x)
    return gamma * (x - mu) / (var + eps).sqrt()


def ln_no_affine(x, gamma, beta, eps=1e-5):  # the statement's gamma and beta forgotten
    mu, var = _ln_stats(x)
    return (x - mu) / (var + eps).sqrt()


def ln_shift_then_scale(x, gamma, beta, eps=1e-5):
    mu, var = _ln_stats(x)
    return ((x - mu) / (var + eps).sqrt() + beta) * gamma


def ln_global(x, gamma, beta, eps=1e-5):
    mu, sigma2 = x.mean(), x.var(unbiased=False)
    return gamma * (x - mu) / (sigma2 + eps).sqrt() + beta


def ln_dim_one(x, gamma, beta, eps=1e-5):
    mu = torch.mean(x, 1, keepdim=True)
    var = torch.mean((x - mu) ** 2, 1, keepdim=True)
    return gamma * (x - mu) / (var + eps).sqrt() + beta


def ln_no_keepdim(x, gamma, beta, eps=1e-5):
    centred = x - torch.mean(x, -1)
    return gamma * centred / (torch.mean(centred**2, -1) + eps).sqrt() + beta


def _ms(x):
    return torch.mean(x * x, dim=-1, keepdim=True)


def rms_eps_fixed(x, weight, eps=1e-6):
    return weight * x * torch.rsqrt(_ms(x) + 1e-6)


def rms_layer_norm_eps(x, weight, eps=1e-5):
    return weight * x * torch.rsqrt(_ms(x) + eps)


def rms_without_eps(x, weight, eps=1e-6):
    return weight * x / _ms(x).sqrt()


def rms_plus_weight(x, weight, eps=1e-6):
    return x * torch.rsqrt(_ms(x) + eps) + weight


def rms_unweighted(x, weight, eps=1e-6):
    return x * torch.rsqrt(_ms(x) + eps)


def rms_sum_of_squares(x, weight, eps=1e-6):
    return weight * x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def rms_divided_by_rsqrt(x, weight, eps=1e-6):
    return weight * x / torch.rsqrt(_ms(x) + eps)


def rms_square_of_mean(x, weight, eps=1e-6):
    return weight * x / torch.sqrt(x.mean(-1, keepdim=True) ** 2 + eps)


def rms_by_std(unbiased):  # the "root mean square" taken as a standard deviation
    def rms_norm(x, weight, eps=1e-6):
        return x / torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=unbiased) + eps) * weight

    return rms_norm


def rms_no_keepdim(x, weight, eps=1e-6):
    return weight * x / torch.sqrt(torch.mean(x**2, -1) + eps)


class FFLearner(nn.Module):
    """linear1, ReLU, dropout, linear2 as a learner writes it; subclasses change one thing."""

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = activation_module(activation)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.drop(self.activation(self.linear1(x))))


class FFKeepProb(FFLearner):
    def __init__(self, d_model, d_ff, dropout=0.0, **kwargs):
        super().__init__(d_model, d_ff, dropout, **kwargs)
        self.drop = nn.Dropout(1.0 - dropout)  # TensorFlow 1's keep_prob


class FFOwnRate(FFLearner):
    def __init__(self, d_model, d_ff, dropout=0.0, **kwargs):
        super().__init__(d_model, d_ff, dropout, **kwargs)
        self.drop = nn.Dropout(0.1)


class FFDropsInput(FFLearner):
    def forward(self, x):
        return self.linear2(self.activation(self.linear1(self.drop(x))))


class FFGelu(FFLearner):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", **kwargs):
        super().__init__(d_model, d_ff, dropout, activation, **kwargs)
        if activation == "relu":
            self.activation = nn.GELU()


class FFWithResidual(FFLearner):
    def forward(self, x):
        return super().forward(x) + x


class EncLearner(EncoderLayerByHand):
    """A learner's encoder layer written out step by step; subclasses change one thing."""

    mask_inverted = ff_on_input = always_post = always_pre = norms_swapped = False
    attn_residual = ff_residual = True

    def forward(self, x, mask=None):
        if self.mask_inverted and mask is not None:
            mask = mask.logical_not()
        n_a, n_f = (self.norm2, self.norm1) if self.norms_swapped else (self.norm1, self.norm2)
        pre = self.norm_first
        pre = False if self.always_post else True if self.always_pre else pre
        source = x
        if pre:
            h = n_a(x)
            a = self.self_attn(h, h, h, mask=mask)[0]
            x = x + a if self.attn_residual else a
            f = self.linear2(F.relu(self.linear1(n_f(source if self.ff_on_input else x))))
            return x + f if self.ff_residual else f
        a = self.self_attn(x, x, x, mask=mask)[0]
        x = n_a(x + a if self.attn_residual else a)
        f = self.linear2(F.relu(self.linear1(source if self.ff_on_input else x)))
        return n_f(x + f if self.ff_residual else f)


def _enc(name, **attrs):
    return type(name, (EncLearner,), attrs)


class NaNWhereAllMasked(MultiHeadAttention):  # like ex03's own: no guard for a masked-out row
    def forward(self, query, key, value, mask=None):
        out, weights = super().forward(query, key, value, mask=mask)
        dead = torch.zeros(1, dtype=torch.bool) if mask is None else ~mask.any(-1)
        return out.masked_fill(dead[..., None], float("nan")), weights


class EncNotMaskNaN(EncLearner):  # #hunt6: the NaN rows were told "it has dropout"
    mask_inverted = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.self_attn.__class__ = NaNWhereAllMasked


class EncWithABuffer(EncLearner):  # #hunt6: its buffer was called a parameter
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("scale", torch.ones(1))


class EncEps(EncLearner):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, norm_first)
        self.norm1 = nn.LayerNorm(d_model, eps=1e-6)
        self.norm2 = nn.LayerNorm(d_model, eps=1e-6)


class DecLearner(nn.Module):
    """A learner's decoder layer written out step by step; subclasses change one thing."""

    masks_inverted = queries_from_memory = gelu = one_norm = no_residual = False
    residual_normed = no_final_norm = cross_first = always_post = norm2_for_ffn = False
    eps = 1e-5

    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.multihead_attn = MultiHeadAttention(d_model, num_heads)
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model, eps=self.eps)
        self.norm2 = nn.LayerNorm(d_model, eps=self.eps)
        self.norm3 = nn.LayerNorm(d_model, eps=self.eps)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.masks_inverted:
            self_mask = None if self_mask is None else self_mask.logical_not()
            memory_mask = None if memory_mask is None else memory_mask.logical_not()

        def attend_self(h):
            return self.self_attn(h, h, h, mask=self_mask)[0]

        def attend_memory(h):
            if self.queries_from_memory:
                return self.multihead_attn(memory, h, h, mask=memory_mask)[0]
            return self.multihead_attn(h, memory, memory, mask=memory_mask)[0]

        def ffn(h):
            return self.linear2((F.gelu if self.gelu else F.relu)(self.linear1(h)))

        steps = [(self.norm1, attend_self), (self.norm2, attend_memory), (self.norm3, ffn)]
        if self.cross_first:
            steps[0], steps[1] = (self.norm1, attend_memory), (self.norm2, attend_self)
        if self.one_norm:
            steps = [(self.norm1, f) for _, f in steps]
        if self.norm2_for_ffn:  # #hunt6: "None of the usual single mistakes"
            steps[2] = (self.norm2, ffn)
        for k, (norm, f) in enumerate(steps):
            if self.norm_first and not self.always_post:
                x = f(norm(x)) if self.no_residual else x + f(norm(x))
            elif self.no_residual:
                x = norm(f(x))
            elif self.residual_normed:
                x = x + norm(f(x))
            elif self.no_final_norm and k == 2:
                x = x + f(x)
            else:
                x = norm(x + f(x))
        return x


def _dec(name, **attrs):
    return type(name, (DecLearner,), attrs)


class EncFinalNorm(EncLearner):  # a pre-norm layer that ends with GPT-2's ln_f of its own
    def forward(self, x, mask=None):
        out = super().forward(x, mask)
        return self.norm2(out) if self.norm_first else out


def dec_pre_norm_cross(slip):  # #hunt4: the cross-attention's queries in pre-norm
    class DecPreCross(DecLearner):
        def forward(self, x, memory, self_mask=None, memory_mask=None):
            if not self.norm_first:
                return super().forward(x, memory, self_mask, memory_mask)
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, mask=self_mask)[0]
            if slip != "stale h":  # stale h: norm1(x) of before the self-attention, reused
                h = x if slip == "unnormed" else (self.norm1 if slip == "norm1" else self.norm2)(x)
            x = x + self.multihead_attn(h, memory, memory, mask=memory_mask)[0]
            return x + self.linear2(F.relu(self.linear1(self.norm3(x))))

    return DecPreCross


class EncStaleH(EncLearner):  # #hunt4: pre-norm, h = norm1(x) reused by the feed-forward
    def forward(self, x, mask=None):
        if not self.norm_first:
            return super().forward(x, mask)
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, mask=mask)[0]
        return x + self.linear2(F.relu(self.linear1(h)))


class DecFinalNorm(DecLearner):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        out = super().forward(x, memory, self_mask, memory_mask)
        return self.norm3(out) if self.norm_first else out


class SwiGLULearner(nn.Module):
    combine = "silu_gate"

    def __init__(self, d_model, d_ff=None):
        super().__init__()
        d_ff = d_ff or 8 * d_model // 3
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        g, u = self.gate_proj(x), self.up_proj(x)
        if self.combine == "relu":
            h = torch.relu(g) * u
        elif self.combine == "silu_of_product":
            h = torch.nn.functional.silu(g * u)
        else:  # "plus"
            h = g * torch.sigmoid(g) + u
        return self.down_proj(h)


# ---- found by the #33 hunt: a learner's slips that were generic or passed ----------------


class FFDropoutBeforeActivation(FFLearner):
    # passed all checks: with ReLU (every dropout case) the two orders give the same numbers
    def forward(self, x):
        return self.linear2(self.activation(self.drop(self.linear1(x))))


class FFEvalScaled(FFLearner):  # #hunt7: "None of the usual single mistakes"
    def forward(self, x):  # the Predict cell's belief: eval mode must make up for dropout
        scale = 1.0 if self.training else 1.0 - self.drop.p
        return self.linear2(self.drop(self.activation(self.linear1(x))) * scale)


class FFSquaredBeforeReLU(FFLearner):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__(d_model, d_ff, dropout, activation, bias)
        self.squared = activation == "relu2"

    def forward(self, x):
        h = self.linear1(x)
        h = F.relu(h**2) if self.squared else self.activation(h)
        return self.linear2(self.drop(h))


class EncPreNormsTheSum(EncLearner):
    def forward(self, x, mask=None):
        if not self.norm_first:
            return super().forward(x, mask)
        h = self.norm1(x)
        x = self.norm1(x + self.self_attn(h, h, h, mask=mask)[0])
        return self.norm2(x + self.linear2(F.relu(self.linear1(self.norm2(x)))))


class DecSelfMaskInCross(DecLearner):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        return super().forward(x, memory, self_mask, self_mask)  # the self-attention line copied


class DecMemoryMaskAsColumn(DecLearner):  # #hunt7: "None of the usual single mistakes"
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if memory_mask is not None:  # "one flag per source position", made a column
            memory_mask = memory_mask.mT
        return super().forward(x, memory, self_mask, memory_mask)


class EncLessonHeads(EncLearner):  # #hunt7: "None of the usual single mistakes"
    def __init__(self, d_model, num_heads, d_ff, norm_first=False, activation="relu", bias=True):
        super().__init__(d_model, 4, d_ff, norm_first, activation, bias)  # the lesson's 4 heads


class DecLessonHeads(DecLearner):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__(d_model, 4, d_ff, norm_first)


class EncOneNormModule(EncLearner):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False, activation="relu", bias=True):
        super().__init__(d_model, num_heads, d_ff, norm_first, activation, bias)
        self.norm1 = self.norm2 = nn.LayerNorm(d_model, bias=bias)  # one module, two names


class DecOneNormModule(DecLearner):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, norm_first)
        self.norm1 = self.norm2 = self.norm3 = nn.LayerNorm(d_model)


class EncKeysNotNormed(EncLearner):
    def forward(self, x, mask=None):
        if not self.norm_first:
            return super().forward(x, mask)
        x = x + self.self_attn(self.norm1(x), x, x, mask=mask)[0]  # only the queries normalised
        return x + self.linear2(F.relu(self.linear1(self.norm2(x))))


class DecKeysNotNormed(DecLearner):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if not self.norm_first:
            return super().forward(x, memory, self_mask, memory_mask)
        x = x + self.self_attn(self.norm1(x), x, x, mask=self_mask)[0]  # as in cross-attention
        x = x + self.multihead_attn(self.norm2(x), memory, memory, mask=memory_mask)[0]
        return x + self.linear2(F.relu(self.linear1(self.norm3(x))))


class EncPreFeedForwardUnnormed(EncLearner):
    def forward(self, x, mask=None):
        if not self.norm_first:
            return super().forward(x, mask)
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, mask=mask)[0]
        return x + self.linear2(F.relu(self.linear1(x)))  # norm2 left out


class DecPreFeedForwardUnnormed(DecLearner):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if not self.norm_first:
            return super().forward(x, memory, self_mask, memory_mask)
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, mask=self_mask)[0]
        x = x + self.multihead_attn(self.norm2(x), memory, memory, mask=memory_mask)[0]
        return x + self.linear2(F.relu(self.linear1(x)))  # norm3 left out


def ln_eps_after_division(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return ((x - mean) / torch.sqrt(var) + eps) * gamma + beta


class LayerNormDrawnWeight(LayerNormByHand):  # #hunt6: "None of the usual single mistakes"
    def __init__(self, d_model, eps=1e-5, bias=True):
        super().__init__(d_model, eps, bias)
        self.weight = nn.Parameter(torch.randn(d_model))


class LayerNormBertEps(LayerNormByHand):
    def __init__(self, d_model, eps=1e-6, bias=True):
        super().__init__(d_model, eps, bias)


def rms_dim_one(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(dim=1, keepdim=True) + eps) * weight


class SwiGLURounded(SwiGLULearner):  # 8 * 64 / 3 = 170.67 rounded to the nearest, 171
    def __init__(self, d_model, d_ff=None):
        super().__init__(d_model, round(8 * d_model / 3) if d_ff is None else d_ff)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SwiGLUWithoutSiLU(SwiGLULearner):
    def forward(self, x):
        return self.down_proj(self.gate_proj(x) * self.up_proj(x))


SINGLE_MISTAKES = [
    ("ex07.layer_norm", ln_eps_fixed, "the eps argument is ignored"),
    ("ex07.layer_norm", ln_bert_eps, "the default eps is 1e-5"),
    ("ex07.layer_norm", ln_without_eps, "your result is LayerNorm without eps"),
    ("ex07.layer_norm", ln_gamma_beta_swapped, "gamma and beta are swapped"),
    ("ex07.layer_norm", ln_not_centred, "the mean is not subtracted from x"),
    ("ex07.layer_norm", ln_mean_of_squares, "the variance is the mean of (x - mean) ** 2"),
    ("ex07.layer_norm", ln_by_variance, "divide by the standard deviation"),
    ("ex07.layer_norm", ln_statistics_without_gradient, "no gradient flows through them"),
    ("ex07.layer_norm", ln_rows_with_math_sqrt, "no gradient flows through it"),
    ("ex07.layer_norm", ln_no_shift, "beta is missing"),
    ("ex07.layer_norm", ln_no_affine, "gamma and beta are not applied"),
    ("ex07.layer_norm", ln_shift_then_scale, "beta is added before gamma scales"),
    ("ex07.layer_norm", ln_global, "taken over the whole tensor"),
    ("ex07.layer_norm", ln_dim_one, "the statistics are taken over dim=1"),
    ("ex07.layer_norm", ln_no_keepdim, "without keepdim=True drops the last axis"),
    ("ex07.rms_norm", rms_eps_fixed, "the eps argument is ignored"),
    ("ex07.rms_norm", rms_layer_norm_eps, "the default eps of rms_norm is 1e-6"),
    ("ex07.rms_norm", rms_without_eps, "your result is RMSNorm without eps"),
    ("ex07.rms_norm", rms_plus_weight, "multiply by it, x / rms * weight, do not add it"),
    ("ex07.rms_norm", rms_unweighted, "weight is missing"),
    ("ex07.rms_norm", rms_sum_of_squares, "not the sum"),
    ("ex07.rms_norm", rms_divided_by_rsqrt, "you multiplied by the root mean square"),
    ("ex07.rms_norm", rms_square_of_mean, "is not the square of the mean"),
    ("ex07.rms_norm", rms_no_keepdim, "without keepdim=True drops the last axis"),
    ("ex07.rms_norm", rms_by_std(True), "you divided by the standard deviation"),
    ("ex07.rms_norm", rms_by_std(False), "you divided by the standard deviation"),
    ("ex07.FeedForward", FFKeepProb, "not nn.Dropout(1 - dropout)"),
    ("ex07.FeedForward", FFOwnRate, "the dropout probability is the `dropout` argument"),
    ("ex07.FeedForward", FFDropsInput, "not on the input x"),
    ("ex07.FeedForward", FFGelu, "ReLU (F.relu), not GELU"),
    ("ex07.FeedForward", FFWithResidual, "no residual connection of its own"),
    ("ex07.EncoderLayer", _enc("EncPost", always_post=True), "norm_first is ignored"),
    ("ex07.EncoderLayer", _enc("EncPre", always_pre=True), "always pre-norm"),
    ("ex07.EncoderLayer", _enc("EncNotMask", mask_inverted=True), "the mask is inverted"),
    ("ex07.EncoderLayer", EncWithABuffer, "persistent=False"),
    ("ex07.EncoderLayer", EncNotMaskNaN, "keys are all masked, as when the mask is inverted"),
    ("ex07.EncoderLayer", _enc("EncNorms", norms_swapped=True), "norm1 and norm2 are swapped"),
    ("ex07.EncoderLayer", _enc("EncFFIn", ff_on_input=True), "reads the layer's input x"),
    (
        "ex07.EncoderLayer",
        _enc("EncNoRes1", attn_residual=False),
        "the residual connection around the self-attention is missing",
    ),
    (
        "ex07.EncoderLayer",
        _enc("EncNoRes2", ff_residual=False),
        "the residual connection around the feed-forward network is missing",
    ),
    ("ex07.EncoderLayer", EncEps, "your LayerNorms use another eps"),
    # #hunt4: got only "gate_proj.weight has shape (171, 64), expected (170, 64)"
    ("ex07.SwiGLU", SwiGLURounded, "then round down (not round()"),
    ("ex07.EncoderLayer", EncFinalNorm, "normalises its output once more"),
    ("ex07.DecoderLayer", DecFinalNorm, "normalises its output once more"),
    ("ex07.EncoderLayer", EncStaleH, "the feed-forward network reads norm1(x) from before"),
    ("ex07.DecoderLayer", dec_pre_norm_cross("stale h"), "norm1(x) from before the self-att"),
    ("ex07.DecoderLayer", dec_pre_norm_cross("unnormed"), "queries are normalised too"),
    ("ex07.DecoderLayer", dec_pre_norm_cross("norm1"), "the cross-attention uses norm1 again"),
    ("ex07.DecoderLayer", _dec("DecPost", always_post=True), "norm_first is ignored"),
    ("ex07.DecoderLayer", _dec("DecNotMasks", masks_inverted=True), "the masks are inverted"),
    (
        "ex07.DecoderLayer",
        _dec("DecQ", queries_from_memory=True),
        "the cross-attention takes its queries from memory",
    ),
    ("ex07.DecoderLayer", _dec("DecGelu", gelu=True), "ReLU (F.relu), not GELU"),
    ("ex07.DecoderLayer", _dec("DecOneNorm", one_norm=True), "norm1 is used for every sub-layer"),
    ("ex07.DecoderLayer", _dec("DecNorm2Twice", norm2_for_ffn=True), "uses norm2 again"),
    (
        "ex07.DecoderLayer",
        _dec("DecNoRes", no_residual=True),
        "the residual connections are missing",
    ),
    (
        "ex07.DecoderLayer",
        _dec("DecResNormed", residual_normed=True),
        "not x + norm(sublayer(x))",
    ),
    ("ex07.DecoderLayer", _dec("DecNoNorm3", no_final_norm=True), "has no LayerNorm"),
    ("ex07.DecoderLayer", _dec("DecOrder", cross_first=True), "in the wrong order"),
    ("ex07.DecoderLayer", _dec("DecEps", eps=1e-6), "your LayerNorms use another eps"),
    ("ex07.SwiGLU", type("ReGLU", (SwiGLULearner,), {"combine": "relu"}), "not ReLU"),
    (
        "ex07.SwiGLU",
        type("SiluAfter", (SwiGLULearner,), {"combine": "silu_of_product"}),
        "SiLU goes on the gate alone",
    ),
    (
        "ex07.SwiGLU",
        type("GatePlus", (SwiGLULearner,), {"combine": "plus"}),
        "the gate multiplies the up branch",
    ),
    ("ex07.FeedForward", FFDropoutBeforeActivation, "dropout goes after the activation"),
    ("ex07.FeedForward", FFSquaredBeforeReLU, "is the ReLU first, then the square"),
    ("ex07.FeedForward", FFEvalScaled, "in eval mode nothing is rescaled"),
    ("ex07.EncoderLayer", EncPreNormsTheSum, "the sum is not normalised again"),
    ("ex07.DecoderLayer", DecSelfMaskInCross, "the cross-attention got self_mask"),
    ("ex07.DecoderLayer", DecMemoryMaskAsColumn, "memory_mask is transposed"),
    ("ex07.EncoderLayer", EncLessonHeads, "4 heads, the lesson's"),
    ("ex07.DecoderLayer", DecLessonHeads, "4 heads, the lesson's"),
    ("ex07.EncoderLayer", EncOneNormModule, "one and the same module"),
    ("ex07.DecoderLayer", DecOneNormModule, "one and the same module"),
    ("ex07.EncoderLayer", EncKeysNotNormed, "for its queries, keys and values alike"),
    ("ex07.DecoderLayer", DecKeysNotNormed, "for its queries, keys and values alike"),
    ("ex07.layer_norm", ln_eps_after_division, "eps is added to the normalised x"),
    ("ex07.EncoderLayer", EncPreFeedForwardUnnormed, "the feed-forward network too"),
    ("ex07.DecoderLayer", DecPreFeedForwardUnnormed, "the feed-forward network too"),
    ("ex07.LayerNorm", LayerNormBertEps, "the default eps is 1e-5"),
    ("ex07.LayerNorm", LayerNormDrawnWeight, "starts with weight = ones"),
    ("ex07.rms_norm", rms_dim_one, "the mean is taken over dim=1"),
    ("ex07.SwiGLU", SwiGLUWithoutSiLU, "the gate has no activation"),
]


@pytest.mark.parametrize(
    "task_id, obj, hint",
    SINGLE_MISTAKES,
    ids=[f"{t}-{getattr(o, '__name__', o)}" for t, o, _ in SINGLE_MISTAKES],
)
def test_a_single_learner_mistake_gets_its_own_hint(task_id, obj, hint):
    result = status(task_id, obj)
    assert result.status == "failed", result.feedback
    assert hint in result.feedback, result.feedback
    assert "more than one thing may be wrong" not in result.feedback


def test_dropout_given_as_the_keep_probability_fails_the_new_case():
    # passed all 7 checks before: the only dropout rate in the cases was 0.5 = 1 - 0.5
    result = status("ex07.FeedForward", FFKeepProb)
    # and the case built without dropout (hunt 2): nn.Dropout(1 - 0.0) drops every unit
    assert result.passed == result.total - 2
    assert "dropout=0.2 in train mode" in result.feedback


# ---- hunt 2: slips that passed (dropout, seen only in training mode) or got a bare error ------


class EncDropout(EncLearner):  # nn.TransformerEncoderLayer's default dropout=0.1, copied
    def __init__(self, d_model, num_heads, d_ff, norm_first=False, activation="relu", bias=True):
        super().__init__(d_model, num_heads, d_ff, norm_first, activation, bias)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, mask=None):
        return self.dropout(super().forward(x, mask))


class DecDropout(DecLearner):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, norm_first)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        return self.dropout(super().forward(x, memory, self_mask, memory_mask))


class EncPairAdded(EncLearner):
    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, mask=mask))  # the (output, weights) pair
        return self.norm2(x + self.linear2(F.relu(self.linear1(x))))


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex07.EncoderLayer", EncDropout, "dropout the task does not ask for"),
        ("ex07.DecoderLayer", DecDropout, "dropout the task does not ask for"),
        ("ex07.EncoderLayer", EncPairAdded, "returns a pair (output, weights)"),
    ],
)
def test_hunt2_slips_get_their_own_hint(task_id, learner, words):
    result = status(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


class LayerNormUsingData(LayerNormByHand):  # passed every check: .data cuts the gradient
    def forward(self, x):
        out = layer_norm_var_mean(x, self.weight.data, torch.zeros_like(self.weight), self.eps)
        return out if self.bias is None else out + self.bias.data


class LayerNormOfPlainTensors(LayerNormByHand):
    def __init__(self, d_model, eps=1e-5, bias=True):
        super().__init__(d_model, eps, bias)
        del self.weight
        self.weight = torch.ones(d_model)  # not an nn.Parameter


def _ln(denominator):
    def layer_norm(x, gamma, beta, eps=1e-5):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return denominator(x, mean, var + eps) * gamma + beta

    return layer_norm


def _rms(mean_square, dtype=None):
    def rms_norm(x, weight, eps=1e-6):
        h = x if dtype is None else x.to(dtype)  # Hugging Face Llama's float32 upcast
        return (h * torch.rsqrt(mean_square(h) + eps)).type_as(x) * weight

    return rms_norm


def _ln_unbracketed(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return x - mean / torch.sqrt(var + eps) * gamma + beta


class SwiGLUTrueDivision(SwiGLULearner):  # a bare TypeError from nn.Linear before
    def __init__(self, d_model, d_ff=None):
        super().__init__(d_model, d_ff or 8 * d_model / 3)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SwiGLUWithBiases(SwiGLULearner):  # #hunt6: was told to "pass bias=bias on", no such arg
    def __init__(self, d_model, d_ff=None):
        super().__init__(d_model, d_ff)
        self.gate_proj, self.up_proj, self.down_proj = (
            nn.Linear(m.in_features, m.out_features)
            for m in (self.gate_proj, self.up_proj, self.down_proj)
        )


class FFHandMadeDropout(FFLearner):  # the statement warns; it got "more than one thing"
    def forward(self, x):
        h = self.activation(self.linear1(x))
        if self.training:
            h = h * (torch.rand_like(h) > self.drop.p) / (1 - self.drop.p)
        return self.linear2(h)


class FFDropoutByDefault(FFLearner):  # passed: only the dropout cases ran in training mode
    def __init__(self, d_model, d_ff, dropout=0.1, activation="relu", bias=True):
        super().__init__(d_model, d_ff, dropout, activation, bias)


class EncPreNormByDefault(EncLearner):  # passed: every case gave norm_first explicitly
    def __init__(self, d_model, num_heads, d_ff, norm_first=True, activation="relu", bias=True):
        super().__init__(d_model, num_heads, d_ff, norm_first, activation, bias)


class DecPreNormByDefault(DecLearner):
    def __init__(self, d_model, num_heads, d_ff, norm_first=True):
        super().__init__(d_model, num_heads, d_ff, norm_first)


class DecCausalByDefault(DecLearner):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self_mask is None:  # "a decoder is causal"
            self_mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        return super().forward(x, memory, self_mask, memory_mask)


def _ln_in_float32(x, gamma, beta, eps=1e-5):  # #hunt7: "None of the usual single mistakes"
    h = x.float()  # Llama's RMSNorm upcast, copied into LayerNorm
    h = (h - h.mean(-1, keepdim=True)) * torch.rsqrt(h.var(-1, unbiased=False, keepdim=True) + eps)
    return h.to(x.dtype) * gamma + beta


class LayerNormInFloat32(LayerNormByHand):
    def forward(self, x):
        return _ln_in_float32(x, self.weight, torch.zeros_like(self.weight), self.eps) + (
            0 if self.bias is None else self.bias
        )


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex07.layer_norm", _ln_in_float32, "float32 round trip"),
        ("ex07.LayerNorm", LayerNormInFloat32, "float32 round trip"),
        ("ex07.LayerNorm", LayerNormUsingData, "no gradient reaches your weight and bias"),
        ("ex07.LayerNorm", LayerNormOfPlainTensors, "plain tensor, not a parameter"),
        ("ex07.layer_norm", _ln_unbracketed, "bracket the centred x"),
        ("ex07.layer_norm", _ln(lambda x, mean, v: (x - mean) / v**1 / 2), "binds tighter"),
        ("ex07.rms_norm", _rms(lambda h: h.pow(2).mean()), "over the whole tensor"),
        ("ex07.rms_norm", _rms(lambda h: h.pow(2).mean(-1, True), torch.float32), "precision"),
        ("ex07.DecoderLayer", DecCausalByDefault, "causal all the same"),
        ("ex07.SwiGLU", SwiGLUTrueDivision, "a float (true division)"),
        ("ex07.SwiGLU", SwiGLUWithBiases, "These layers have no bias: build them with bias=False"),
        ("ex07.FeedForward", FFHandMadeDropout, "a hand-made mask draws"),
        ("ex07.FeedForward", FFDropoutByDefault, "the default is dropout=0.0"),
        ("ex07.EncoderLayer", EncPreNormByDefault, "built without norm_first"),
        ("ex07.DecoderLayer", DecPreNormByDefault, "built without norm_first"),
    ],
)
def test_hunt2_slips_that_passed_or_got_the_generic_hint(task_id, learner, words):
    result = status(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


def test_hunt2_learners_without_their_slip_pass():
    assert status("ex07.rms_norm", _rms(lambda h: h.pow(2).mean(-1, True))).status == "passed"
    assert status("ex07.layer_norm", _ln(lambda x, mean, v: (x - mean) / v**0.5)).status == "passed"


# ---- hunt 3: slips a learner without the grader made, that got a misleading or generic hint ----


class LayerNormBiasLeftOut(LayerNormByHand):  # was told ".data, .detach() ... cut it"
    def forward(self, x):
        return layer_norm_var_mean(x, self.weight, torch.zeros_like(self.weight), self.eps)


class DecAttentionsSwapped(DecLearner):  # multihead_attn read as "the" (self-)attention
    attentions = ("multihead_attn", "self_attn")  # the modules of the two attention lines

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        first, second = (getattr(self, name) for name in self.attentions)
        steps = [
            (self.norm1, lambda h: first(h, h, h, mask=self_mask)[0]),
            (self.norm2, lambda h: second(h, memory, memory, mask=memory_mask)[0]),
            (self.norm3, lambda h: self.linear2(F.relu(self.linear1(h)))),
        ]
        for norm, sublayer in steps:
            x = x + sublayer(norm(x)) if self.norm_first else norm(x + sublayer(x))
        return x


class LayerNormBiasTruthTest(LayerNormByHand):  # a bare "Boolean value of Tensor ..." error
    def forward(self, x):
        beta = self.bias if self.bias else torch.zeros_like(self.weight)
        return layer_norm_var_mean(x, self.weight, beta, self.eps)


class EncResidualSetOnce(EncLearner):  # "residual = x" once, as in Hugging Face's layers
    def forward(self, x, mask=None):
        residual = x
        h = self.norm1(x) if self.norm_first else x
        x = residual + self.self_attn(h, h, h, mask=mask)[0]
        x = x if self.norm_first else self.norm1(x)
        h = self.norm2(x) if self.norm_first else x
        x = residual + self.linear2(F.relu(self.linear1(h)))  # residual not set again
        return x if self.norm_first else self.norm2(x)


class DecResidualSetOnce(DecLearner):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        residual, kv = x, (memory, memory, memory_mask)
        steps = [
            (self.norm1, lambda h: self.self_attn(h, h, h, mask=self_mask)[0]),
            (self.norm2, lambda h: self.multihead_attn(h, *kv[:2], mask=kv[2])[0]),
            (self.norm3, lambda h: self.linear2(F.relu(self.linear1(h)))),
        ]
        for norm, sublayer in steps:  # residual is never set again
            x = residual + sublayer(norm(x)) if self.norm_first else norm(residual + sublayer(x))
        return x


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex07.EncoderLayer", EncResidualSetOnce, "set residual = x again"),
        ("ex07.DecoderLayer", DecResidualSetOnce, "set residual = x again"),
        ("ex07.LayerNorm", LayerNormBiasLeftOut, "forward leaves it out"),
        ("ex07.LayerNorm", LayerNormBiasTruthTest, "if t is not None"),
        ("ex07.DecoderLayer", DecAttentionsSwapped, "self_attn and multihead_attn are swapped"),
    ],
)
def test_hunt3_slips_get_a_hint_that_names_them(task_id, learner, words):
    result = status(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


class LayerNormOnTorchs(nn.LayerNorm):  # the learner's own forward on nn.LayerNorm's parameters
    def forward(self, x):
        beta = torch.zeros_like(self.weight) if self.bias is None else self.bias
        return layer_norm_var_mean(x, self.weight, beta, self.eps)


@pytest.mark.parametrize(
    "norm_class, named",
    [
        (None, None),  # the learner's own LayerNorm, as the statement asks: full marks
        (nn.LayerNorm, "PyTorch's torch.nn.LayerNorm"),
        (LayerNormOnTorchs, "PyTorch's torch.nn.LayerNorm"),  # a subclass is nn.LayerNorm too
        (CourseLayerNorm, "the course's course_lib.norms.LayerNorm"),
    ],
)
def test_an_encoder_layer_whose_norms_are_not_the_learners_own_gets_half_marks(norm_class, named):
    learner = type("EncoderLayer", (EncoderLayerByHand,), {"norm_class": norm_class})
    result = status("ex07.EncoderLayer", learner)
    assert result.status == "passed", result.feedback
    if named is None:
        assert result.score == result.max_score and "Built with" not in result.feedback
    else:
        assert result.score == result.max_score / 2 and named in result.feedback, result.feedback
        assert "half marks" in result.feedback


class FFBareError(FFLearner):  # right, but its ValueError for an unknown activation says nothing
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        if activation not in ("relu", "gelu", "gelu_tanh", "relu2"):
            raise ValueError()
        super().__init__(d_model, d_ff, dropout, activation, bias)


def test_a_value_error_without_a_message_fails_its_case():
    result = status("ex07.FeedForward", FFBareError)
    assert result.status == "failed" and result.passed == result.total - 1, result.feedback
    assert "your ValueError carries no message: say what was expected" in result.feedback


class DecCausalInvertedLikeTorch(DecLearner):  # ~causal, as the tgt_mask of PyTorch's layer
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        self_mask = None if self_mask is None else ~self_mask
        return super().forward(x, memory, self_mask, memory_mask)


def test_hunt5_a_self_mask_inverted_alone_is_named():  # got "None of the usual single mistakes"
    result = status("ex07.DecoderLayer", DecCausalInvertedLikeTorch)
    assert result.status == "failed" and "self_mask is inverted" in result.feedback, result.feedback


class LayerNormWithoutABiasAttribute(LayerNormByHand):  # passed: `if bias:` and nothing else
    def __init__(self, d_model, eps=1e-5, bias=True):
        super().__init__(d_model, eps, bias)
        if not bias:
            del self.bias  # as if only `if bias: self.bias = nn.Parameter(...)` had been written

    def forward(self, x):
        out = layer_norm_var_mean(x, self.weight, torch.zeros_like(self.weight), self.eps)
        return out + self.bias if hasattr(self, "bias") else out


def test_hunt5_a_layer_norm_without_bias_none_fails():
    result = status("ex07.LayerNorm", LayerNormWithoutABiasAttribute)
    assert result.status == "failed" and "set self.bias = None" in result.feedback, result.feedback


class EncActivationAfterLinear2(EncLearner):  # the feed-forward network written anew, act last
    def forward(self, x, mask=None):
        def ffn(h):
            return F.relu(self.linear2(self.linear1(h)))

        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, mask=mask)[0]
            return x + ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, x, x, mask=mask)[0])
        return self.norm2(x + ffn(x))


def test_hunt5_an_encoder_activation_after_linear2_is_named():  # got "None of the usual ..."
    result = status("ex07.EncoderLayer", EncActivationAfterLinear2)
    assert result.status == "failed" and "not after linear2" in result.feedback, result.feedback


class FFSquaredInPlace(FFLearner):  # passed all 16 checks; training then fails in exercise 09
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__(d_model, d_ff, dropout, activation, bias)
        self.relu2 = activation == "relu2"

    def forward(self, x):
        h = self.linear1(x)
        h = F.relu(h).pow_(2) if self.relu2 else self.activation(h)
        return self.linear2(self.drop(h))


def test_hunt5_relu_squared_in_place_fails_as_training_would():
    result = status("ex07.FeedForward", FFSquaredInPlace)
    assert result.status == "failed" and "in-place" in result.feedback, result.feedback


class DecSelfAttnTwice(DecAttentionsSwapped):  # hunt 5: self_attn copied into the cross line
    attentions = ("self_attn", "self_attn")


def test_hunt5_self_attn_used_for_the_cross_attention_is_named():  # got "None of the usual"
    result = status("ex07.DecoderLayer", DecSelfAttnTwice)
    assert result.status == "failed", result.feedback
    assert "runs self_attn again" in result.feedback, result.feedback


# ---- hunt T10: every case is one the statement announces ----------------------------------------


class DecoderLayerLikePyTorch(nn.Module):
    """A right decoder layer with PyTorch's default dropout of 0.1 after each sub-layer, as the
    old statement's `nn.TransformerDecoderLayer(batch_first=True)` has it."""

    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.multihead_attn = MultiHeadAttention(d_model, num_heads)
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        def attend(attn, h, kv, mask):
            return self.dropout(attn(h, kv, kv, mask=mask)[0])

        blocks = (
            (self.norm1, lambda h: attend(self.self_attn, h, h, self_mask)),
            (self.norm2, lambda h: attend(self.multihead_attn, h, memory, memory_mask)),
            (self.norm3, lambda h: self.dropout(self.linear2(F.relu(self.linear1(h))))),
        )
        for norm, block in blocks:
            x = x + block(norm(x)) if self.norm_first else norm(x + block(x))
        return x


def test_the_decoder_layer_statement_says_it_has_no_dropout():
    # the statement said "equals nn.TransformerDecoderLayer(batch_first=True)", whose dropout
    # is 0.1; the check runs the layer in training mode too, so that layer scored 0 of 8
    result = status("ex07.DecoderLayer", DecoderLayerLikePyTorch)
    assert result.status == "failed" and "dropout" in result.feedback, result.feedback
    statement = task_statement("07_transformer_blocks.ipynb", "Task 4: `DecoderLayer`")
    assert "dropout=0.0, batch_first=True" in statement
    assert "No dropout" in statement and "training mode" in statement
    # without its dropout the same layer passes: the dropout was its only difference
    assert status("ex07.DecoderLayer", _without_dropout(DecoderLayerLikePyTorch)).score == 1.0


def _without_dropout(layer_class):
    class Layer(layer_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.dropout = nn.Identity()

    return Layer


def dec_one_residual_missing(missing):  # f07: "None of the usual single mistakes" for each
    class Dec(DecLearner):
        def forward(self, x, memory, self_mask=None, memory_mask=None):
            blocks = (
                (self.norm1, lambda h: self.self_attn(h, h, h, mask=self_mask)[0]),
                (self.norm2, lambda h: self.multihead_attn(h, memory, memory, mask=memory_mask)[0]),
                (self.norm3, lambda h: self.linear2(F.relu(self.linear1(h)))),
            )
            for k, (norm, block) in enumerate(blocks):
                residual = 0 if k == missing else x
                x = residual + block(norm(x)) if self.norm_first else norm(residual + block(x))
            return x

    return Dec


class EncAttentionUnused(EncLearner):  # f07: its result under a new name, never read
    def forward(self, x, mask=None):
        if self.norm_first:
            h = x + self.self_attn(self.norm1(x), self.norm1(x), self.norm1(x), mask=mask)[0]
            return x + self.linear2(F.relu(self.linear1(self.norm2(x))))
        h = self.norm1(x + self.self_attn(x, x, x, mask=mask)[0])  # noqa: F841
        return self.norm2(x + self.linear2(F.relu(self.linear1(x))))


class DecCrossUnused(DecLearner):  # f07: the same slip in the decoder's second sub-layer
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, mask=self_mask)[0]
            y = x + self.multihead_attn(self.norm2(x), memory, memory, mask=memory_mask)[0]
            return x + self.linear2(F.relu(self.linear1(self.norm3(x))))
        x = self.norm1(x + self.self_attn(x, x, x, mask=self_mask)[0])
        y = self.norm2(x + self.multihead_attn(x, memory, memory, mask=memory_mask)[0])  # noqa: F841
        return self.norm3(x + self.linear2(F.relu(self.linear1(x))))


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex07.DecoderLayer", dec_one_residual_missing(0), "around the self-attention is missing"),
        ("ex07.DecoderLayer", dec_one_residual_missing(1), "around the cross-attention is missing"),
        ("ex07.DecoderLayer", dec_one_residual_missing(2), "around the feed-forward network is"),
        ("ex07.EncoderLayer", EncAttentionUnused, "attention sub-layer's output is never used"),
        ("ex07.DecoderLayer", DecCrossUnused, "cross-attention sub-layer's output is never used"),
    ],
)
def test_f07_one_sub_layer_left_out_of_the_chain_is_named(task_id, learner, words):
    result = status(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


class EncPostWithoutNorm2(EncLearner):  # f07: "None of the usual single mistakes"
    def forward(self, x, mask=None):
        if self.norm_first:
            return super().forward(x, mask)
        x = self.norm1(x + self.self_attn(x, x, x, mask=mask)[0])
        return x + self.linear2(F.relu(self.linear1(x)))  # norm2 forgotten


class EncPostWithoutNorm1(EncLearner):
    def forward(self, x, mask=None):
        if self.norm_first:
            return super().forward(x, mask)
        x = x + self.self_attn(x, x, x, mask=mask)[0]  # norm1 forgotten
        return self.norm2(x + self.linear2(F.relu(self.linear1(x))))


class DecPostWithoutNorm1(DecLearner):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            return super().forward(x, memory, self_mask, memory_mask)
        x = x + self.self_attn(x, x, x, mask=self_mask)[0]  # norm1 forgotten
        x = self.norm2(x + self.multihead_attn(x, memory, memory, mask=memory_mask)[0])
        return self.norm3(x + self.linear2(F.relu(self.linear1(x))))


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex07.EncoderLayer", EncPostWithoutNorm2, "the feed-forward sub-layer has no LayerNorm"),
        ("ex07.EncoderLayer", EncPostWithoutNorm1, "the attention sub-layer has no LayerNorm"),
        ("ex07.DecoderLayer", DecPostWithoutNorm1, "the self-attention sub-layer has no LayerNorm"),
    ],
)
def test_f07_a_post_norm_sub_layer_without_its_norm_is_named(task_id, learner, words):
    result = status(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert 0 < result.passed < result.total  # its pre-norm cases pass


# ---- hunt R12: rarer slips that got 'None of the usual single mistakes' ----------------------


def _r12_layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var) + eps * gamma + beta  # eps and gamma misplaced


def _r12_rms_norm(x, weight, eps=1e-6):
    return x / (x.abs().mean(dim=-1, keepdim=True) + eps) * weight  # the mean of |x|


def _r12_layer_norm_d_minus_1(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).sum(dim=-1, keepdim=True) / x.shape[-1] - 1  # / (d - 1) meant
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def _r12_gemma_rms_norm(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight)


class _R12SwiGLU(SwiGLULearner):
    def forward(self, x):
        g, u = self.gate_proj(x), self.up_proj(x)
        if self.combine == "gelu_tanh":
            return self.down_proj(F.gelu(g, approximate="tanh") * u)
        if self.combine == "silu_outside":
            return F.silu(self.down_proj(g * u))
        return self.down_proj(F.silu(g) * u)


# ---- d12: answers whose values are right but whose gradient is cut ----------------------------


class EncFeedForwardDetached(EncoderLayerByHand):  # a fresh learner's: 10/10 before
    def forward(self, x, mask=None):
        def sa(h):
            return self.self_attn(h, h, h, mask=mask, need_weights=False)[0]

        def ff(h):  # .detach() on the feed-forward's input: the attention below never learns
            return self.linear2(self.act(self.linear1(h.detach())))

        if self.norm_first:
            x = x + sa(self.norm1(x))
            return x + ff(self.norm2(x))
        x = self.norm1(x + sa(x))
        return self.norm2(x + ff(x))


class DecMemoryDetached(DecLearner):  # the encoder below would never learn
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        return super().forward(x, memory.detach(), self_mask, memory_mask)


class FFHiddenDetached(FFLearner):  # linear1 would never learn
    def forward(self, x):
        return self.linear2(self.drop(self.activation(self.linear1(x)).detach()))


class SwiGLUGateDetached(nn.Module):
    def __init__(self, d_model, d_ff=None):
        super().__init__()
        d_ff = d_ff or 8 * d_model // 3
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)).detach() * self.up_proj(x))


class LayerNormInputDetached(LayerNormByHand):  # nothing below the norm would learn
    def forward(self, x):
        return super().forward(x.detach())


def layer_norm_gamma_detached(x, gamma, beta, eps=1e-5):
    return layer_norm_var_mean(x, gamma.detach(), beta, eps)


def rms_mean_square_detached(x, weight, eps=1e-6):  # the values right, the gradient bent
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True).detach() + eps) * weight


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex07.layer_norm", _r12_layer_norm, "eps is in the wrong place and gamma no longer"),
        ("ex07.rms_norm", _r12_rms_norm, "the mean absolute value"),
        # R12, five more slips each: operators grouped otherwise, another model's convention
        ("ex07.layer_norm", _r12_layer_norm_d_minus_1, "/ binds tighter than -"),
        ("ex07.rms_norm", _r12_gemma_rms_norm, "Gemma's RMSNorm"),
        (
            "ex07.SwiGLU",
            type("SwiGLU", (_R12SwiGLU,), {"combine": "gelu_tanh"}),
            "tanh-approximated or not",
        ),
        (
            "ex07.SwiGLU",
            type("SwiGLU", (_R12SwiGLU,), {"combine": "silu_outside"}),
            "you applied it to the output of down_proj",
        ),
    ],
)
def test_an_r12_slip_is_named(task_id, learner, words):
    result = status(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "None of the usual" not in result.feedback, result.feedback


def test_the_r12_swiglu_passes_without_its_slip():
    result = status("ex07.SwiGLU", type("SwiGLU", (_R12SwiGLU,), {"combine": ""}))
    assert result.status == "passed", result.feedback


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex07.EncoderLayer", EncFeedForwardDetached, "gradient with respect to the input x"),
        ("ex07.DecoderLayer", DecMemoryDetached, "no gradient reaches the input memory"),
        ("ex07.FeedForward", FFHiddenDetached, "the input x, linear1.weight, linear1.bias"),
        ("ex07.SwiGLU", SwiGLUGateDetached, "no gradient reaches gate_proj.weight"),
        ("ex07.LayerNorm", LayerNormInputDetached, "no gradient reaches the input x"),
        ("ex07.layer_norm", layer_norm_gamma_detached, "no gradient reaches gamma"),
        ("ex07.rms_norm", rms_mean_square_detached, "its gradient with respect to x is not"),
    ],
)
def test_d12_a_cut_gradient_fails_where_the_values_alone_passed(task_id, learner, words):
    # each had full marks: the checks compared outputs only (the brief's example is the first)
    result = status(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


def test_d12_the_decoder_learner_without_its_slip_passes():
    assert status("ex07.DecoderLayer", DecLearner).score == 1.0


# ---- f07 (second fresh reader): slips the first one missed, and the gradient's own slips ----


def rms_sum_over_sqrt_d(x, weight, eps=1e-6):  # ||x|| / sqrt(d)'s sqrt(d) put on the sum
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) / math.sqrt(x.shape[-1]) + eps) * weight


def rms_power_half(x, weight, eps=1e-6):  # ** 1/2 for the square root, inline
    return x / (x.pow(2).mean(-1, keepdim=True) + eps) ** 1 / 2 * weight


def rms_power_half_bracketed(x, weight, eps=1e-6):
    return x / ((x.pow(2).mean(-1, keepdim=True) + eps) ** 1 / 2) * weight


def rms_rows_with_math_sqrt(x, weight, eps=1e-6):  # per row, the root a Python float
    rows = x.reshape(-1, x.shape[-1])
    out = torch.stack([r / math.sqrt((r**2).mean().item() + eps) for r in rows])
    return out.reshape(x.shape) * weight


def ln_variance_detached(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True).detach()
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize(
    "task_id, learner, words",
    [  # the first three got "None of the usual single mistakes" (1/6, 0/6, 0/6)
        ("ex07.rms_norm", rms_sum_over_sqrt_d, "divided the sum of the squares by sqrt(d)"),
        ("ex07.rms_norm", rms_power_half, "** binds tighter than /"),
        ("ex07.rms_norm", rms_power_half_bracketed, "** binds tighter than /"),
        # the gradient's generic hint named .detach() and torch.no_grad(), not the Python float
        ("ex07.rms_norm", rms_rows_with_math_sqrt, "math.sqrt of a tensor"),
        # told only of a plain Python number (math.sqrt, .item()), not of the .detach() it has
        ("ex07.layer_norm", ln_variance_detached, "a .detach() of the variance"),
    ],
)
def test_f07b_a_slip_is_named(task_id, learner, words):
    result = status(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "None of the usual" not in result.feedback, result.feedback


class SwiGLUOneLinear(SwiGLULearner):  # self.gate_proj = self.up_proj = nn.Linear(...)
    def __init__(self, d_model, d_ff=None):
        super().__init__(d_model, d_ff)
        self.gate_proj = self.up_proj = nn.Linear(d_model, self.up_proj.out_features, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecOneAttention(DecLearner):  # self.self_attn = self.multihead_attn = ...
    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__(d_model, num_heads, d_ff, norm_first)
        self.self_attn = self.multihead_attn = MultiHeadAttention(d_model, num_heads)


@pytest.mark.parametrize(
    "task_id, learner, words",
    [  # both got "None of the usual single mistakes" (0/7, 0/8); the norms' alias was named
        ("ex07.SwiGLU", SwiGLUOneLinear, "gate_proj and up_proj are one and the same layer"),
        ("ex07.DecoderLayer", DecOneAttention, "self_attn and multihead_attn are one and the"),
    ],
)
def test_f07b_one_module_under_two_names_is_named(task_id, learner, words):
    result = status(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


class FFQuickGelu(FFLearner):  # the GELU paper's sigmoid approximation for the exact one
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__(d_model, d_ff, dropout, activation, bias)
        self.quick = activation == "gelu"

    def forward(self, x):
        h = self.linear1(x)
        h = h * torch.sigmoid(1.702 * h) if self.quick else self.activation(h)
        return self.linear2(self.drop(h))


class FFTanhForGeluTanh(FFLearner):  # the name 'gelu_tanh' read as tanh
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__(d_model, d_ff, dropout, activation, bias)
        if activation == "gelu_tanh":
            self.activation = nn.Tanh()


@pytest.mark.parametrize(
    "learner, words",
    [  # both got "None of the usual single mistakes" (13/16, 15/16)
        (FFQuickGelu, "sigmoid approximation (CLIP's quick GELU)"),
        (FFTanhForGeluTanh, "not torch.tanh itself"),
    ],
)
def test_f07b_another_function_for_the_named_activation_is_named(learner, words):
    result = status("ex07.FeedForward", learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


# ---- l14: slips that got 'None of the usual single mistakes', or a message that led elsewhere --


class FFDropoutWithoutTraining(FFLearner):  # F.dropout's training=True default: drops in eval
    def __init__(self, d_model, d_ff, dropout=0.0, **kwargs):
        super().__init__(d_model, d_ff, dropout, **kwargs)
        self.p = dropout

    def forward(self, x):
        return self.linear2(F.dropout(self.activation(self.linear1(x)), self.p))


class _TanhGeluSquared(nn.Module):
    def forward(self, h):
        return 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**2)))


class FFTanhGeluSquared(FFLearner):  # h ** 2 for h ** 3 in the tanh approximation
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", **kwargs):
        super().__init__(d_model, d_ff, dropout, activation=activation, **kwargs)
        if activation == "gelu_tanh":
            self.activation = _TanhGeluSquared()


def rms_eps_rooted(x, weight, eps=1e-6):  # sqrt(ms) + sqrt(eps): the root split over the sum
    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + math.sqrt(eps)) * weight


class DecMemoryNorm1(DecLearner):  # pre-norm: memory normalised by the self-attention's norm1
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if not self.norm_first:
            return super().forward(x, memory, self_mask, memory_mask)
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, mask=self_mask)[0]
        m = self.norm1(memory)
        x = x + self.multihead_attn(self.norm2(x), m, m, mask=memory_mask)[0]
        return x + self.linear2(F.relu(self.linear1(self.norm3(x))))


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        # before: 'your result is right, but its gradient ...' first, the dropout hint after it
        ("ex07.FeedForward", FFDropoutWithoutTraining, "never: Hint: the dropout also drops"),
        # before: 'None of the usual single mistakes gives this result' (all three)
        ("ex07.FeedForward", FFTanhGeluSquared, "cubes h inside the tanh"),
        ("ex07.rms_norm", rms_eps_rooted, "a square root of a sum is not the sum of the roots"),
        ("ex07.DecoderLayer", DecMemoryNorm1, "norm1 belongs to the self-attention's input"),
    ],
)
def test_l14_slips_are_named(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


# ---- L16: the activation after linear2, or on the residual sum ----


class EncActivated(EncoderLayerByHand):
    where = ""

    def forward(self, x, mask=None):
        def ff(h):
            out = self.linear2(self.act(self.linear1(h)))
            return self.act(out) if self.where == "both" else out

        def summed(s):
            return self.act(s) if self.where == "sum" else s

        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, mask=mask)[0]
            return summed(x + ff(self.norm2(x)))
        x = self.norm1(x + self.self_attn(x, x, x, mask=mask)[0])
        return self.norm2(summed(x + ff(x)))


class DecActivated(DecLearner):
    where = ""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        def ff(h):
            if self.where == "after":
                return F.relu(self.linear2(self.linear1(h)))
            out = self.linear2(F.relu(self.linear1(h)))
            return F.relu(out) if self.where == "both" else out

        steps = [
            (self.norm1, lambda h: self.self_attn(h, h, h, mask=self_mask)[0]),
            (self.norm2, lambda h: self.multihead_attn(h, memory, memory, mask=memory_mask)[0]),
            (self.norm3, ff),
        ]
        for k, (norm, f) in enumerate(steps):
            activate = F.relu if k == 2 and self.where == "sum" else nn.Identity()
            x = activate(x + f(norm(x))) if self.norm_first else norm(activate(x + f(x)))
        return x


class FFResidualActivated(FFLearner):
    def forward(self, x):
        return self.activation(x + super().forward(x))


L16_SLIPS = [
    ("ex07.EncoderLayer", type("E", (EncActivated,), {"where": "both"}), "is not activated again"),
    ("ex07.EncoderLayer", type("E", (EncActivated,), {"where": "sum"}), "not on the residual sum"),
    ("ex07.DecoderLayer", type("D", (DecActivated,), {"where": "both"}), "is not activated again"),
    ("ex07.DecoderLayer", type("D", (DecActivated,), {"where": "sum"}), "not on the residual sum"),
    ("ex07.DecoderLayer", type("D", (DecActivated,), {"where": "after"}), "not after linear2"),
    ("ex07.FeedForward", FFResidualActivated, "not relu(x + ...)"),
]


@pytest.mark.parametrize(
    "task_id, cls, hint",
    L16_SLIPS,
    ids=["enc both", "enc sum", "dec both", "dec sum", "dec after", "ff relu(x + ffn)"],
)
def test_l16_an_activation_after_linear2_or_on_the_sum_is_named(task_id, cls, hint):
    # before: 'None of the usual single mistakes gives this result'
    import course_lib.grading as grading

    try:
        for seed in (0, 1, 2, 3, 4, 5):
            grading.NOTEBOOK_SEED = seed  # the batch grader's hidden seeds
            r = check_result(task_id, cls)
            assert r.status == "failed" and r.score < r.max_score, (seed, r.feedback)
            assert hint in r.feedback, (seed, r.feedback)
    finally:
        grading.NOTEBOOK_SEED = 0


@pytest.mark.parametrize(
    "task_id, cls", [("ex07.EncoderLayer", EncActivated), ("ex07.DecoderLayer", DecActivated)]
)
def test_l16_the_layers_written_out_step_by_step_pass(task_id, cls):
    r = check_result(task_id, cls)
    assert r.status == "passed", r.feedback


# ---- L16: a sub-layer's LayerNorm both before and after ----


def _normed_twice(x, steps, form):
    for norm, f in steps:
        h = norm(x)
        x = norm(h + f(h if form == "sandwich" else x))
    return x


class EncNormedTwice(EncoderLayerByHand):
    form = "sandwich"

    def forward(self, x, mask=None):
        steps = [
            (self.norm1, lambda h: self.self_attn(h, h, h, mask=mask)[0]),
            (self.norm2, lambda h: self.linear2(self.act(self.linear1(h)))),
        ]
        return _normed_twice(x, steps, self.form)


class DecNormedTwice(DecLearner):
    form = "sandwich"

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        steps = [
            (self.norm1, lambda h: self.self_attn(h, h, h, mask=self_mask)[0]),
            (self.norm2, lambda h: self.multihead_attn(h, memory, memory, mask=memory_mask)[0]),
            (self.norm3, lambda h: self.linear2(F.relu(self.linear1(h)))),
        ]
        return _normed_twice(x, steps, self.form)


@pytest.mark.parametrize("form", ["sandwich", "norm(norm(x) + sublayer(x))"])
@pytest.mark.parametrize(
    "task_id, base", [("ex07.EncoderLayer", EncNormedTwice), ("ex07.DecoderLayer", DecNormedTwice)]
)
def test_l16_a_layer_normalising_before_and_after_is_named(task_id, base, form):
    # before: 'None of the usual single mistakes gives this result' (ex06's sub-layer named both)
    import course_lib.grading as grading

    learner = type("Layer", (base,), {"form": form})
    words = "h = norm(x), then x = norm(h + sublayer(h))" if form == "sandwich" else form
    try:
        for seed in (0, 1, 2, 3, 4, 5):
            grading.NOTEBOOK_SEED = seed  # the batch grader's hidden seeds
            r = check_result(task_id, learner)
            assert r.status == "failed" and words in r.feedback, (seed, r.feedback)
    finally:
        grading.NOTEBOOK_SEED = 0


# ---- hunt 17: state kept between forwards, and one sub-layer in the other norm mode -----------


class DecMasksKept(DecLearner):  # the first call's masks kept on self: passed all 8 checks
    kept = "masks"

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.kept == "masks":
            self_mask, memory_mask = self.__dict__.setdefault("masks", (self_mask, memory_mask))
        elif self.kept == "causal":  # "the causal mask is the same at every step"
            self_mask = self.__dict__.setdefault("causal", self_mask)
        else:  # memory: was told "no gradient reaches the input memory ... .detach()"
            if getattr(self, "memory", None) is None:
                self.memory = memory
            memory = self.memory
        return super().forward(x, memory, self_mask, memory_mask)


class EncMaskKept(EncoderLayerByHand):  # masks cached by shape in a mutable default argument
    def forward(self, x, mask=None, _cache={}):  # noqa: B006
        if mask is not None:
            mask = _cache.setdefault(tuple(mask.shape), mask)
        return super().forward(x, mask)


def _hidden_seed_results(task_id, learner, seeds=(0, 1, 2)):
    task = get_task(task_id)
    for seed in seeds:
        cases = task.cases(torch.Generator().manual_seed(seed))
        yield seed, judge(task, cases, run_cases(task, learner, cases))


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex07.DecoderLayer", type("Dec", (DecMasksKept,), {"kept": "masks"}), "kept the mask"),
        ("ex07.DecoderLayer", type("Dec", (DecMasksKept,), {"kept": "causal"}), "kept the mask"),
        ("ex07.DecoderLayer", type("Dec", (DecMasksKept,), {"kept": "memory"}), "kept an input"),
        ("ex07.EncoderLayer", EncMaskKept, "kept the mask"),
    ],
)
def test_h17_a_mask_or_memory_kept_from_the_first_forward_fails_and_is_named(
    task_id, learner, words
):
    result = status(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback
    for seed, hidden in _hidden_seed_results(task_id, learner):
        assert hidden.status == "failed" and words in hidden.feedback, (seed, hidden.feedback)


def _mixed_modes(base, other):
    """A layer whose sub-layer number `other` (-1: the last; None: none) is in the other norm
    mode."""

    class Mixed(base):
        def forward(self, x, *args, **kwargs):
            steps = self.steps(*args, **kwargs)
            for i, (norm, sublayer) in enumerate(steps):
                pre = self.norm_first != (other is not None and i == other % len(steps))
                x = x + sublayer(norm(x)) if pre else norm(x + sublayer(x))
            return x

    return Mixed


class EncSteps(EncoderLayerByHand):
    def steps(self, mask=None):
        return [
            (self.norm1, lambda h: self.self_attn(h, h, h, mask=mask)[0]),
            (self.norm2, lambda h: self.linear2(self.act(self.linear1(h)))),
        ]


class DecSteps(DecLearner):
    def steps(self, memory, self_mask=None, memory_mask=None):
        return [
            (self.norm1, lambda h: self.self_attn(h, h, h, mask=self_mask)[0]),
            (self.norm2, lambda h: self.multihead_attn(h, memory, memory, mask=memory_mask)[0]),
            (self.norm3, lambda h: self.linear2(F.relu(self.linear1(h)))),
        ]


@pytest.mark.parametrize(
    "task_id, base, other, words",
    [
        ("ex07.EncoderLayer", EncSteps, 0, "your self-attention sub-layer is in the other"),
        ("ex07.EncoderLayer", EncSteps, -1, "your feed-forward sub-layer is in the other"),
        ("ex07.DecoderLayer", DecSteps, 0, "your self-attention sub-layer is in the other"),
        ("ex07.DecoderLayer", DecSteps, 1, "your cross-attention sub-layer is in the other"),
        ("ex07.DecoderLayer", DecSteps, -1, "your feed-forward sub-layer is in the other"),
    ],
)
def test_h17_one_sub_layer_in_the_other_norm_mode_is_named(task_id, base, other, words):
    # before: 'None of the usual single mistakes gives this result'
    result = status(task_id, _mixed_modes(base, other))
    assert result.status == "failed" and words in result.feedback, result.feedback


@pytest.mark.parametrize(
    "task_id, base", [("ex07.EncoderLayer", EncSteps), ("ex07.DecoderLayer", DecSteps)]
)
def test_h17_the_step_by_step_layers_pass_in_one_mode(task_id, base):
    result = status(task_id, _mixed_modes(base, None))
    assert result.status == "passed", result.feedback


class FFDropoutInPlace(FFLearner):  # h18: 16/16, then training mode could not back-propagate
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__(d_model, d_ff, dropout, activation, bias)
        self.drop = nn.Dropout(dropout, inplace=True)  # overwrites ReLU's output in training


def test_h18_in_place_dropout_fails_as_training_would():
    x = torch.randn(3, 8)
    layer = FFDropoutInPlace(8, 16, dropout=0.5).train()
    with pytest.raises(RuntimeError, match="inplace"):  # what the learner's training would meet
        layer(x).sum().backward()
    result = status("ex07.FeedForward", FFDropoutInPlace)
    assert result.status == "failed" and "inplace=True" in result.feedback, result.feedback
    for seed, hidden in _hidden_seed_results("ex07.FeedForward", FFDropoutInPlace):
        assert hidden.status == "failed" and "inplace=True" in hidden.feedback, (seed, hidden)


class FFTanhGeluNoHalf(FFLearner):  # h18: the tanh GELU by hand without its 0.5
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", bias=True):
        super().__init__(d_model, d_ff, dropout, activation, bias)
        self.by_hand = activation == "gelu_tanh"

    def forward(self, x):
        h = self.linear1(x)
        if self.by_hand:
            h = h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
        else:
            h = self.activation(h)
        return self.linear2(self.drop(h))


def layer_norm_std_plus_root_eps(x, gamma, beta, eps=1e-5):  # h18
    std = x.std(dim=-1, keepdim=True, unbiased=False)
    return (x - x.mean(dim=-1, keepdim=True)) / (std + math.sqrt(eps)) * gamma + beta


def rms_norm_eps_at_end(x, weight, eps=1e-6):  # h18
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)) * weight + eps


@pytest.mark.parametrize(
    "task_id, learner, words",
    [  # each got 'None of the usual single mistakes' or another cause's hint (float32 digits)
        ("ex07.FeedForward", FFTanhGeluNoHalf, "starts with 0.5"),
        ("ex07.layer_norm", layer_norm_std_plus_root_eps, "std + sqrt(eps) is not"),
        ("ex07.rms_norm", rms_norm_eps_at_end, "eps is added to the result"),
    ],
)
def test_h18_slips_are_named(task_id, learner, words):
    result = status(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback
    for seed, hidden in _hidden_seed_results(task_id, learner):
        assert hidden.status == "failed" and words in hidden.feedback, (seed, hidden.feedback)


# ---- h07c: the residual taken from the normed input, and the encoder's sub-layers swapped -----


def _residual_slip(x, steps, pre, slip):
    """Each (norm, sublayer) step in a residual connection, post- or pre-norm; `slip` is
    (mode, which): in that mode the steps `which` ("first", "last", "all") take norm(x) as
    their residual, h = norm(x) then x = h + sublayer(h or x)."""
    mode, which = slip
    for k, (norm, f) in enumerate(steps):
        picked = {"first": k == 0, "last": k == len(steps) - 1, "all": True}.get(which, False)
        if mode == ("pre" if pre else "post") and picked:
            h = norm(x)
            x = h + f(h if pre else x)
        else:
            x = x + f(norm(x)) if pre else norm(x + f(x))
    return x


class EncResidualSlip(EncoderLayerByHand):
    slip = ("post", "all")

    def forward(self, x, mask=None):
        steps = [
            (self.norm1, lambda h: self.self_attn(h, h, h, mask=mask)[0]),
            (self.norm2, lambda h: self.linear2(self.act(self.linear1(h)))),
        ]
        if self.slip == "ffn first":  # each line right, the two in the wrong order
            return _residual_slip(x, steps[::-1], self.norm_first, ("none", "none"))
        return _residual_slip(x, steps, self.norm_first, self.slip)


class DecResidualSlip(DecLearner):
    slip = ("post", "all")

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        steps = [
            (self.norm1, lambda h: self.self_attn(h, h, h, mask=self_mask)[0]),
            (self.norm2, lambda h: self.multihead_attn(h, memory, memory, mask=memory_mask)[0]),
            (self.norm3, lambda h: self.linear2(F.relu(self.linear1(h)))),
        ]
        return _residual_slip(x, steps, self.norm_first, self.slip)


AROUND_THE_SUM = "in post-norm the LayerNorm goes around the sum"
SLIPS_H07C = [
    ("ex07.EncoderLayer", EncResidualSlip, ("post", "all"), AROUND_THE_SUM),
    ("ex07.DecoderLayer", DecResidualSlip, ("post", "all"), AROUND_THE_SUM),
    ("ex07.EncoderLayer", EncResidualSlip, ("post", "first"), AROUND_THE_SUM),
    ("ex07.DecoderLayer", DecResidualSlip, ("post", "first"), AROUND_THE_SUM),
    ("ex07.EncoderLayer", EncResidualSlip, ("post", "last"), AROUND_THE_SUM),
    ("ex07.DecoderLayer", DecResidualSlip, ("post", "last"), AROUND_THE_SUM),
    ("ex07.EncoderLayer", EncResidualSlip, ("pre", "last"), "x + ffn(norm2(x))"),
    ("ex07.DecoderLayer", DecResidualSlip, ("pre", "last"), "x + ffn(norm3(x))"),
    ("ex07.EncoderLayer", EncResidualSlip, ("pre", "first"), "self-attention sub-layer's resid"),
    ("ex07.DecoderLayer", DecResidualSlip, ("pre", "first"), "self-attention sub-layer's resid"),
    ("ex07.EncoderLayer", EncResidualSlip, "ffn first", "the wrong order"),
]


@pytest.mark.parametrize("task_id, base, slip, words", SLIPS_H07C)
def test_h07c_a_residual_from_the_normed_input_or_the_sublayers_swapped_are_named(
    task_id, base, slip, words
):
    # before: 'None of the usual single mistakes gives this result' (5/10, 4/8), every seed
    learner = type("Layer", (base,), {"slip": slip})
    for seed, r in _hidden_seed_results(task_id, learner, (0, 1, 2)):
        assert r.status == "failed" and r.score < r.max_score, (seed, r.feedback)
        assert words in r.feedback and "None of the usual" not in r.feedback, (seed, r.feedback)
    r = status(task_id, learner)
    assert r.status == "failed" and words in r.feedback, r.feedback
    right = type("Layer", (base,), {"slip": ("none", "none")})
    assert status(task_id, right).status == "passed"


# ---- h07c: d read from the front of x's shape, and the affine applied before the norm ---------


def ln_d_from_front(x, gamma, beta, eps=1e-5):  # d = x.shape[0]: the batch's size, not d
    d = x.shape[0]
    mean = x.sum(dim=-1, keepdim=True) / d
    var = ((x - mean) ** 2).sum(dim=-1, keepdim=True) / d
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def ln_var_by_len(x, gamma, beta, eps=1e-5):  # the mean right, the variance's sum / len(x)
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).sum(dim=-1, keepdim=True) / len(x)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def ln_affine_first(x, gamma, beta, eps=1e-5):  # two right steps in the wrong order
    y = x * gamma + beta
    mean = y.mean(dim=-1, keepdim=True)
    return (y - mean) / torch.sqrt(((y - mean) ** 2).mean(dim=-1, keepdim=True) + eps)


def rms_by_len(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) / len(x) + eps) * weight


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex07.layer_norm", ln_d_from_front, "the size of the LAST dimension, x.shape[-1]"),
        ("ex07.layer_norm", ln_var_by_len, "the size of the LAST dimension, x.shape[-1]"),
        ("ex07.rms_norm", rms_by_len, "x.pow(2).mean(dim=-1, keepdim=True)"),
        ("ex07.layer_norm", ln_affine_first, "gamma and beta are applied before the norm"),
    ],
)
def test_h07c_d_from_the_front_and_the_affine_first_are_named(task_id, learner, words):
    # before: 'None of the usual single mistakes gives this result' (2/9, 0/6, 0/9), every seed
    for seed, r in _hidden_seed_results(task_id, learner, (0, 1, 2)):
        assert r.status == "failed" and words in r.feedback, (seed, r.feedback)
    r = status(task_id, learner)
    assert r.status == "failed" and words in r.feedback, r.feedback


def ln_eps_on_sum(x, gamma, beta, eps=1e-5):  # ||x - mean|| / sqrt(d), eps under the sum
    centred = x - x.mean(dim=-1, keepdim=True)
    norm = torch.sqrt((centred**2).sum(dim=-1, keepdim=True) + eps)
    return centred / norm * math.sqrt(x.shape[-1]) * gamma + beta


def rms_eps_on_sum(x, weight, eps=1e-6):
    return (
        x
        / (torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps) / math.sqrt(x.shape[-1]))
        * (weight)
    )


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex07.layer_norm", ln_eps_on_sum, "eps is added to the sum of the squares"),
        ("ex07.rms_norm", rms_eps_on_sum, "sqrt(sum(x**2) + eps) / sqrt(d)"),
    ],
)
def test_h07c_eps_added_to_the_sum_of_squares_is_named(task_id, learner, words):
    # before: layer_norm was told 'your float64 result has float32's precision' (4/9), rms_norm
    # 'RMSNorm without eps' (3/6) or, under a hidden seed, 'None of the usual single mistakes'
    for seed, r in _hidden_seed_results(task_id, learner, (0, 1, 2)):
        assert r.status == "failed" and words in r.feedback, (seed, r.feedback)
        assert "float32's precision" not in r.feedback, (seed, r.feedback)
