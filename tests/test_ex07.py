"""The ex07 grader: references pass, each mistake fails with its hint, shortcuts are caught."""

import copy

import pytest
import torch
import torch.nn.functional as F
from helpers import mistake_params
from torch import nn

from course_lib.blocks import EncoderLayer, FeedForward, layer_norm
from course_lib.grading import NOTEBOOK_SEED, check_result, get_task
from course_lib.grading.core import judge, run_cases
from course_lib.grading.tasks import ex07
from course_lib.multihead import MultiHeadAttention


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


class FeedForwardEinsum(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        hidden = torch.einsum("...d,fd->...f", x, self.linear1.weight) + self.linear1.bias
        return (
            torch.einsum("...f,df->...d", self.dropout(hidden.clamp(min=0)), self.linear2.weight)
            + self.linear2.bias
        )


class EncoderLayerByHand(nn.Module):
    """Uses course_lib's MultiHeadAttention (allowed) and nn.LayerNorm."""

    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        def sa(h):
            return self.self_attn(h, h, h, mask=mask, need_weights=False)[0]

        def ff(h):
            return self.linear2(F.relu(self.linear1(h)))

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
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        raise NotImplementedError()


class EncoderLayerStub(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
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
    cases = task.cases(torch.Generator().manual_seed(NOTEBOOK_SEED))
    result = judge(task, cases, run_cases(unwatched, obj, cases))
    assert result.status == "passed", result.feedback
    assert result.score == result.max_score


@pytest.mark.parametrize(
    "task_id, obj",
    [
        ("ex07.layer_norm", layer_norm_var_mean),
        ("ex07.layer_norm", layer_norm_float64_path),
        ("ex07.FeedForward", FeedForwardEinsum),
        ("ex07.EncoderLayer", EncoderLayerByHand),
    ],
)
def test_alternative_correct_implementations_pass(task_id, obj):
    result = status(task_id, obj)
    assert result.status == "passed", result.feedback


def _mistake_params():
    return mistake_params("ex07.layer_norm", "ex07.FeedForward", "ex07.EncoderLayer")


def test_every_named_mistake_is_covered():
    names = {w.__name__ for _, w, _ in (p.values for p in _mistake_params())}
    assert {"_ln_wrong_axis", "_ln_unbiased", "_ln_eps_outside"} <= names
    assert {"_FFNoActivation", "_FFActivationAfter", "_FFNoDropout", "_FFDropoutOnOutput"} <= names
    assert {"_EncSwapped", "_EncResidualNormed"} <= names


@pytest.mark.parametrize(
    "task_id, obj, needle",
    [
        ("ex07.layer_norm", ln_via_F, "torch.nn.functional.layer_norm"),
        ("ex07.layer_norm", ln_via_module, "torch.nn.LayerNorm"),
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


# ---- found by a fresh reader: wrong answers that passed -------------------------------------


class _DecoderSlicingMasks(ex07._DecoderMistake):
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
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            self.linear1 = nn.Linear(d_model, d_ff)
            self.linear2 = nn.Linear(d_ff, d_model)
            self.net = nn.Sequential(self.linear1, nn.ReLU(), nn.Dropout(dropout), self.linear2)

        def forward(self, x):
            return self.net(x)

    assert status("ex07.FeedForward", FeedForward).status == "passed"
