"""ex06 grading: the reference passes, each named mistake fails with its hint, alternatives pass."""

import functools
import math

import pytest
import torch
from torch import nn

from course_lib.attention import scaled_dot_product_attention
from course_lib.cross_attention import CrossAttentionSublayer, cross_attention
from course_lib.grading import check_result, get_task
from course_lib.grading.core import judge, run_cases
from course_lib.grading.tasks import ex06
from course_lib.multihead import MultiHeadAttention


def _status(task_id, obj):
    result = check_result(task_id, obj)
    return result.status, result.feedback


@pytest.mark.parametrize(
    "task_id, reference",
    [
        ("ex06.cross_attention", cross_attention),
        ("ex06.CrossAttentionSublayer", CrossAttentionSublayer),
    ],
)
def test_reference_matches_every_case(task_id, reference):
    """The reference itself, judged without the 'calls the reference' rule, passes."""
    task = get_task(task_id)
    cases = task.cases(torch.Generator().manual_seed(123))
    run = run_cases(task, reference, cases)
    run["seen"] = [name for name in run["seen"] if name != task.reference]
    assert judge(task, cases, run).status == "passed"


@pytest.mark.parametrize(
    "task_id, reference",
    [
        ("ex06.cross_attention", cross_attention),
        ("ex06.CrossAttentionSublayer", CrossAttentionSublayer),
    ],
)
def test_calling_the_reference_is_forbidden(task_id, reference):
    assert _status(task_id, reference)[0] == "forbidden"

    if task_id == "ex06.cross_attention":

        def wrapper(*args, **kwargs):
            return cross_attention(*args, **kwargs)
    else:

        class wrapper(CrossAttentionSublayer):  # noqa: N801
            pass

    assert _status(task_id, wrapper)[0] == "forbidden"


# --- alternative correct implementations ------------------------------------------------------


def cross_attention_einsum(x, memory, w_q, w_k, w_v, memory_mask=None):
    q = torch.einsum("...qd,dk->...qk", x, w_q)
    k = torch.einsum("...md,dk->...mk", memory, w_k)
    v = torch.einsum("...md,dv->...mv", memory, w_v)
    scores = torch.einsum("...qk,...mk->...qm", q, k) / q.shape[-1] ** 0.5
    if memory_mask is not None:
        scores = scores.masked_fill(~memory_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def cross_attention_sdpa_route(x, memory, w_q, w_k, w_v, memory_mask=None):
    return scaled_dot_product_attention(x @ w_q, memory @ w_k, memory @ w_v, memory_mask)


class SublayerFunctional(nn.Module):
    def __init__(self, d_model, num_heads, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, num_heads)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x, memory, memory_mask=None):
        query = self.norm(x) if self.norm_first else x
        out = x + self.attn(query, memory, memory, memory_mask, need_weights=False)[0]
        return out if self.norm_first else self.norm(out)


@pytest.mark.parametrize(
    "task_id, obj",
    [
        ("ex06.cross_attention", cross_attention_einsum),
        ("ex06.cross_attention", cross_attention_sdpa_route),
        ("ex06.CrossAttentionSublayer", SublayerFunctional),
    ],
)
def test_alternative_correct_implementations_pass(task_id, obj):
    status, feedback = _status(task_id, obj)
    assert status == "passed", feedback


# --- the named mistakes -----------------------------------------------------------------------


def queries_from_memory(x, memory, w_q, w_k, w_v, memory_mask=None):
    return scaled_dot_product_attention(memory @ w_q, x @ w_k, x @ w_v)


def mask_ignored(x, memory, w_q, w_k, w_v, memory_mask=None):
    return scaled_dot_product_attention(x @ w_q, memory @ w_k, memory @ w_v)


class NoResidual(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):
        query = self.norm(x) if self.norm_first else x
        out = self.attn(query, memory, memory, memory_mask)[0]
        return out if self.norm_first else self.norm(out)


class AlwaysPostNorm(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):
        return self.norm(x + self.attn(x, memory, memory, memory_mask)[0])


class AlwaysPreNorm(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):
        return x + self.attn(self.norm(x), memory, memory, memory_mask)[0]


class MemoryNormalised(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):
        return super().forward(x, self.norm(memory), memory_mask)


class MemoryKept(SublayerFunctional):
    """The memory of the first call kept: "the source is the same at every decoding step"."""

    def forward(self, x, memory, memory_mask=None):
        if getattr(self, "memory", None) is None:
            self.memory = memory
        return super().forward(x, self.memory, memory_mask)


@pytest.mark.parametrize(
    "task_id, wrong, hint",
    [
        ("ex06.cross_attention", queries_from_memory, "the queries come from x"),
        ("ex06.cross_attention", mask_ignored, "memory_mask was ignored"),
        ("ex06.CrossAttentionSublayer", NoResidual, "the residual connection is missing"),
        ("ex06.CrossAttentionSublayer", AlwaysPostNorm, "the LayerNorm is in the wrong place"),
        ("ex06.CrossAttentionSublayer", AlwaysPreNorm, "the LayerNorm is in the wrong place"),
        ("ex06.CrossAttentionSublayer", MemoryNormalised, "memory was normalised"),
        ("ex06.CrossAttentionSublayer", MemoryKept, "kept an input from an earlier call"),
    ],
)
def test_named_mistakes_fail_with_their_hint(task_id, wrong, hint):
    status, feedback = _status(task_id, wrong)
    assert status == "failed"
    assert hint in feedback, feedback


def test_queries_from_memory_hint_also_comes_from_the_shape():
    task = get_task("ex06.cross_attention")
    case = task.cases(torch.Generator().manual_seed(0))[0]
    got = queries_from_memory(*case.args)
    assert "the queries come from x" in task.diagnose(got, None, case)


def test_stubs_are_not_implemented():
    def cross_attention_stub(x, memory, w_q, w_k, w_v, memory_mask=None):
        raise NotImplementedError()

    class SublayerStub(nn.Module):
        def __init__(self, d_model, num_heads, norm_first=False):
            super().__init__()
            raise NotImplementedError()

    assert _status("ex06.cross_attention", cross_attention_stub)[0] == "not implemented"
    assert _status("ex06.CrossAttentionSublayer", SublayerStub)[0] == "not implemented"


def test_badly_named_submodules_get_a_clear_message():
    class WrongNames(nn.Module):
        def __init__(self, d_model, num_heads, norm_first=False):
            super().__init__()
            self.attention = MultiHeadAttention(d_model, num_heads)
            self.layer_norm = nn.LayerNorm(d_model)

    status, feedback = _status("ex06.CrossAttentionSublayer", WrongNames)
    assert status == "failed" and "no parameter named 'attn.q_proj.weight'" in feedback


def test_keeps_float64():
    def float32_only(x, memory, w_q, w_k, w_v, memory_mask=None):
        out, weights = cross_attention_sdpa_route(
            x.float(), memory.float(), w_q.float(), w_k.float(), w_v.float(), memory_mask
        )
        return out, weights

    status, feedback = _status("ex06.cross_attention", float32_only)
    assert status == "failed" and "dtype" in feedback


def test_cases_cover_the_brief():
    descriptions = [
        c.description
        for c in get_task("ex06.cross_attention").cases(torch.Generator().manual_seed(0))
    ]
    assert any("float64" in d for d in descriptions)
    assert any("padding" in d for d in descriptions)
    sub_cases = get_task("ex06.CrossAttentionSublayer").cases(torch.Generator().manual_seed(0))
    assert {c.data["norm_first"] for c in sub_cases} == {False, True}
    assert any(c.args[0].dtype == torch.float64 for c in sub_cases)
    assert all(c.args[0].shape[1] != c.args[1].shape[1] for c in sub_cases)
    assert ex06.source_padding_mask([3, 1], 4).tolist() == [
        [[True, True, True, False]],
        [[True, False, False, False]],
    ]


def test_no_hidden_case_leaves_a_query_with_nothing_to_attend_to():
    # the statement does not ask what such a query returns, so no seed may draw one: a correct
    # by-hand solution (masked_fill with -inf, then softmax) must not get NaN from the grader
    task = get_task("ex06.cross_attention")
    for seed in range(200):
        for case in task.cases(torch.Generator().manual_seed(seed)):
            mask = case.kwargs.get("memory_mask")
            if mask is not None:
                assert mask.any(-1).all(), (seed, case.description)


# ---- found by a fresh reader: wrong answers that passed -------------------------------------


def _sublayer(
    dropout=0.0,
    default_norm_first=False,
    eps=1e-5,
    first=lambda pair: pair[0],
    read=None,
    residual=lambda x: x,
):
    from course_lib.multihead import MultiHeadAttention

    class Sublayer(torch.nn.Module):
        def __init__(self, d_model, num_heads, norm_first=default_norm_first):
            super().__init__()
            self.norm_first = norm_first
            self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
            self.norm = torch.nn.LayerNorm(d_model, eps=eps)

        def forward(self, x, memory, memory_mask=None):
            memory = memory if read is None else read(memory)
            if self.norm_first:
                return residual(x) + first(self.attn(self.norm(x), memory, memory, memory_mask))
            return self.norm(residual(x) + first(self.attn(x, memory, memory, memory_mask)))

    return Sublayer


def test_the_sublayer_is_built_right_and_alternatives_that_differ_fail():
    assert check_result("ex06.CrossAttentionSublayer", _sublayer()).status == "passed"
    # dropout the task does not ask for was invisible in eval mode (passed 7/7)
    dropped = check_result("ex06.CrossAttentionSublayer", _sublayer(dropout=0.1))
    assert dropped.status == "failed" and "dropout the task does not ask for" in dropped.feedback
    # a default of norm_first=True was never built (every case passed norm_first)
    pre = check_result("ex06.CrossAttentionSublayer", _sublayer(default_norm_first=True))
    assert pre.status == "failed" and "built without norm_first" in pre.feedback
    # ... and is told the default, not "the LayerNorm is in the wrong place" (#33 hunt)
    assert "the default is norm_first=False" in pre.feedback, pre.feedback
    assert pre.passed == pre.total - 1


def test_hunt6_a_sublayer_that_detaches_memory_fails():
    # hunt 6: full marks before (outputs only were compared), though the encoder below it would
    # never learn through the cross-attention
    detached = check_result("ex06.CrossAttentionSublayer", _sublayer(read=lambda m: m.detach()))
    assert detached.status == "failed" and "no gradient reaches memory" in detached.feedback


# ---- #33: slips a learner makes, written as a learner would; each gets its own hint ---------


def _cross_attention_transposing_axes_1_2(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    scores = q @ k.transpose(1, 2) / q.shape[-1] ** 0.5
    if memory_mask is not None:
        scores = scores.masked_fill(~memory_mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


def _cross_attention_zeroing_after_softmax(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    weights = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(dim=-1)
    if memory_mask is not None:
        weights = weights * memory_mask  # blocked keys get 0, but the rows no longer sum to 1
    return weights @ v, weights


def _pool(slip):
    def attention_pool(x, queries, w_k, w_v, mask=None):
        k, v = x @ w_k, x @ w_v
        d_k = queries.shape[0] if slip == "scale by num_queries" else k.shape[-1]
        scores = queries @ k.transpose(-2, -1) / d_k**0.5  # (batch, num_queries, n)
        if mask is not None and slip == "fill 0":
            scores = scores.masked_fill(~mask[:, None, :], 0.0)
        if mask is not None and slip == "flat mask":  # (batch, n) used as it is given
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        if mask is not None and slip == "zeroed after softmax":
            weights = weights.masked_fill(~mask[:, None, :], 0.0)
        return weights @ v, weights

    return attention_pool


class _SublayerNormalisingTheAttention(nn.Module):
    def __init__(self, d_model, num_heads, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, num_heads)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x, memory, memory_mask=None):
        attended = self.attn(x, memory, memory, memory_mask)[0]
        return x + self.norm(attended)  # "norm, then add", in both modes


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex06.cross_attention", _cross_attention_transposing_axes_1_2, "k.transpose(-2, -1)"),
        ("ex06.CrossAttentionSublayer", _SublayerNormalisingTheAttention, "attention's output"),
        ("ex06.cross_attention", _cross_attention_zeroing_after_softmax, "AFTER the softmax"),
        ("ex06.attention_pool", _pool("fill 0"), "exp(0) = 1"),
        ("ex06.attention_pool", _pool("zeroed after softmax"), "AFTER the softmax"),
    ],
)
def test_a_learners_slip_fails_the_notebook_check_with_its_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback, result.feedback


# ---- hunt 2: slips that got a bare error or the generic hint ----------------------------------


def _cross_attention_linear_convention(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q.T, memory @ w_k.T, memory @ w_v.T  # as nn.Linear stores its weight
    return scaled_dot_product_attention(q, k, v, memory_mask)


def _cross_attention_d_k_from_shape_2(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[2])  # passed: n_q = d_k = 4 in 4-D
    if memory_mask is not None:
        scores = scores.masked_fill(~memory_mask, float("-inf"))
    weights = scores.softmax(-1)
    return weights @ v, weights


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex06.cross_attention", _cross_attention_d_k_from_shape_2, "d_k from shape[2]"),
        ("ex06.cross_attention", _cross_attention_linear_convention, "nn.Linear's convention"),
        ("ex06.CrossAttentionSublayer", _sublayer(first=lambda pair: pair), "returns a pair"),
        ("ex06.CrossAttentionSublayer", _sublayer(eps=1e-6), "another eps"),
    ],
)
def test_hunt2_slips_get_their_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


# ---- hunt 3: slips a learner without the grader made, that got the generic hint or NaN --------


def _cross_by_hand(slip):
    def learner(x, memory, w_q, w_k, w_v, memory_mask=None):
        q, v = x @ w_q, memory @ (w_k if slip == "v with w_k" else w_v)
        k = memory @ (w_q if slip == "k with w_q" else w_k)  # copy-paste of the q line
        k_t = {"k.T": lambda: k.T, "bmm": lambda: k.transpose(1, 2)}.get(slip, lambda: k.mT)()
        scores = (torch.bmm(q, k_t) if slip == "bmm" else q @ k_t) / math.sqrt(q.shape[-1])
        if memory_mask is not None:  # "mask": filled where True, the ~ forgotten
            scores = scores.masked_fill(memory_mask if slip == "mask" else ~memory_mask, -math.inf)
        weights = scores.softmax(-1)
        return weights @ v, weights

    return learner


def _pool_inverted_through_sdpa(x, queries, w_k, w_v, mask=None):
    mask = None if mask is None else ~mask.unsqueeze(1)  # True = real was read as True = pad
    return scaled_dot_product_attention(queries, x @ w_k, x @ w_v, mask)


def _pool_zeroing_the_pads(x, queries, w_k, w_v, mask=None):
    x = x if mask is None else x * mask.unsqueeze(-1)  # the pads made 0, "so they count 0"
    return scaled_dot_product_attention(queries, x @ w_k, x @ w_v)


def _pool_mask_truth_test(x, queries, w_k, w_v, mask=None):
    mask = mask.unsqueeze(1) if mask else None  # a bare "Boolean value of Tensor ..." error
    return scaled_dot_product_attention(queries, x @ w_k, x @ w_v, mask)


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex06.attention_pool", _pool_mask_truth_test, "if t is not None"),
        ("ex06.attention_pool", _pool_zeroing_the_pads, "zeroing the padded tokens"),
        ("ex06.cross_attention", _cross_by_hand("mask"), "masked_fill(~memory_mask"),
        ("ex06.cross_attention", _cross_by_hand("k with w_q"), "projected with w_q"),
        ("ex06.cross_attention", _cross_by_hand("k.T"), "k.T reverses every axis"),
        ("ex06.cross_attention", _cross_by_hand("bmm"), "torch.bmm takes 3-D tensors only"),
        ("ex06.attention_pool", _pool_inverted_through_sdpa, "the mask is inverted"),
    ],
)
def test_hunt3_slips_get_their_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


@pytest.mark.parametrize(
    "task_id, learner, words",
    [  # hunt 6: a bare broadcast error, and only a shape, before
        ("ex06.attention_pool", _pool("flat mask"), "mask[:, None, :]"),
        ("ex06.cross_attention", _cross_by_hand("v with w_k"), "values are projected with w_k"),
    ],
)
def test_hunt6_slips_get_their_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


# ---- fourth hunt (a fresh reader) --------------------------------------------------------


def _attend_then_renormalise(q, k, v, keep):
    weights = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1)
    if keep is not None:  # "zero the blocked keys, then make the rows sum to 1 again"
        weights = weights * keep
        weights = weights / weights.sum(-1, keepdim=True)
    return weights @ v, weights


def _cross_renormalised(x, memory, w_q, w_k, w_v, memory_mask=None):
    return _attend_then_renormalise(x @ w_q, memory @ w_k, memory @ w_v, memory_mask)


def _pool_renormalised(x, queries, w_k, w_v, mask=None):
    keep = None if mask is None else mask.unsqueeze(1)
    return _attend_then_renormalise(queries, x @ w_k, x @ w_v, keep)


def _cross_mask_with_a_heads_axis(x, memory, w_q, w_k, w_v, memory_mask=None):
    mask = None if memory_mask is None else memory_mask.unsqueeze(1)  # lesson 03's habit
    return scaled_dot_product_attention(x @ w_q, memory @ w_k, memory @ w_v, mask)


def _pool_values_with_w_k(x, queries, w_k, w_v, mask=None):
    mask = None if mask is None else mask.unsqueeze(1)
    return scaled_dot_product_attention(queries, x @ w_k, x @ w_k, mask)  # copied the k line


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex06.cross_attention", _cross_renormalised, "underflow to 0 before you rescale"),
        ("ex06.attention_pool", _pool_renormalised, "underflow to 0 before you rescale"),
        ("ex06.cross_attention", _cross_mask_with_a_heads_axis, "mask.unsqueeze(1) moves"),
        ("ex06.attention_pool", _pool_values_with_w_k, "v = x @ w_v"),
    ],
)
def test_hunt4_slips_fail_with_their_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


class _SublayerAskingFromMemory(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):  # attn(query, key, value) read backwards
        h = self.norm(x) if self.norm_first else x
        out = x + self.attn(memory, h, h, memory_mask)[0]
        return out if self.norm_first else self.norm(out)


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex06.attention_pool", _pool("scale by num_queries"), "not by sqrt(queries.shape[0])"),
        ("ex06.CrossAttentionSublayer", _SublayerAskingFromMemory, "not attn(memory, x, x"),
    ],
)
def test_hunt5_slips_fail_with_their_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


# ---- hunt F11 (a fresh learner): the scale's slips and a mask on the wrong axis --------------


def _cross_scaled(scale_of, weigh=lambda scores: scores.softmax(dim=-1)):
    def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
        q, k, v = x @ w_q, memory @ w_k, memory @ w_v
        scores = q @ k.transpose(-2, -1) / scale_of(q, k)
        if memory_mask is not None:
            scores = scores.masked_fill(~memory_mask, float("-inf"))
        weights = weigh(scores)
        return weights @ v, weights

    return cross_attention


def _pool_by_hand(
    scale_of=lambda q, k: math.sqrt(q.shape[-1]),
    mask_axis=1,
    transpose=False,
    weigh=lambda scores: scores.softmax(dim=-1),
):
    def attention_pool(x, queries, w_k, w_v, mask=None):
        k, v = x @ w_k, x @ w_v
        k_t = k.T if transpose else k.transpose(-2, -1)  # .T: every axis reversed
        scores = queries @ k_t / scale_of(queries, k)
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(mask_axis), float("-inf"))
        weights = weigh(scores)
        return weights @ v, weights

    return attention_pool


def _mean_pool(x, queries, w_k, w_v, mask=None):
    """Mean pooling over the real tokens: the queries never used."""
    keep = torch.ones(x.shape[:2], dtype=torch.bool) if mask is None else mask
    weights = keep.to(x.dtype) / keep.sum(-1, keepdim=True)  # (batch, n)
    weights = weights[:, None, :].expand(-1, len(queries), -1)  # (batch, num_queries, n)
    return weights @ (x @ w_v), weights


class _SublayerWithFunctionalNorm(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):  # F.layer_norm: self.norm's weights unused
        def norm(h):
            return nn.functional.layer_norm(h, h.shape[-1:])

        if self.norm_first:
            return x + self.attn(norm(x), memory, memory, memory_mask)[0]
        return norm(x + self.attn(x, memory, memory, memory_mask)[0])


_SQRT_D_K = lambda q, k: math.sqrt(q.shape[-1])  # noqa: E731


class _SublayerNormingXThenAdding(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):
        if self.norm_first:
            return x + self.attn(self.norm(x), memory, memory, memory_mask)[0]
        return self.norm(x) + self.attn(x, memory, memory, memory_mask)[0]  # post: norm, then add


class _SublayerWithKeyPaddingMask(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):  # the lesson's nn.MultiheadAttention call
        blocked = None if memory_mask is None else ~memory_mask.squeeze(1)
        h = self.norm(x) if self.norm_first else x
        out = x + self.attn(h, memory, memory, key_padding_mask=blocked)[0]
        return out if self.norm_first else self.norm(out)


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex06.cross_attention", _cross_scaled(lambda q, k: q.shape[-1]), "divided the scores "
         "by d_k"),
        ("ex06.cross_attention", _cross_scaled(lambda q, k: 1 / math.sqrt(q.shape[-1])),
         "multiplied the scores by sqrt(d_k)"),
        ("ex06.cross_attention", _cross_scaled(lambda q, k: math.sqrt(k.shape[1])),
         "number of memory positions"),
        ("ex06.cross_attention", _cross_scaled(lambda q, k: math.sqrt(q.shape[-2])),
         "number of queries"),
        ("ex06.attention_pool", _pool_by_hand(lambda q, k: q.shape[-1]), "divided the scores "
         "by d_k"),
        ("ex06.attention_pool", _pool_by_hand(lambda q, k: 1 / math.sqrt(q.shape[-1])),
         "multiplied the scores by sqrt(d_k)"),
        ("ex06.attention_pool", _pool_by_hand(lambda q, k: math.sqrt(k.shape[-2])),
         "number of tokens"),
        ("ex06.attention_pool", _pool_by_hand(mask_axis=-1), "mask.unsqueeze(-1) is (batch, n, 1)"),
        # the lesson's d_k = 4 kept: the first case with another d_k has n_q = 4, which named
        # "the number of queries" once that row existed
        ("ex06.cross_attention", _cross_scaled(lambda q, k: 2.0), "the lesson's d_k"),
        ("ex06.attention_pool", _pool_by_hand(lambda q, k: math.sqrt(q.shape[-1]), transpose=True),
         "k.T reverses every axis"),
        ("ex06.CrossAttentionSublayer", _SublayerNormingXThenAdding, "not norm(x) + attn(x"),
        ("ex06.CrossAttentionSublayer", _SublayerWithKeyPaddingMask, "fourth argument"),
        # the rarer slips the f11 learner left with the generic feedback
        ("ex06.cross_attention", _cross_scaled(_SQRT_D_K, lambda s: s.log_softmax(-1)),
         "you took log_softmax"),
        ("ex06.cross_attention", _cross_scaled(_SQRT_D_K, lambda s: s.softmax(dim=0)),
         "softmax(dim=0) normalises across the sequences"),
        ("ex06.attention_pool", _pool_by_hand(weigh=lambda s: s.log_softmax(-1)),
         "you took log_softmax"),
        ("ex06.attention_pool", _mean_pool, "you averaged the tokens"),
        ("ex06.CrossAttentionSublayer", _SublayerWithFunctionalNorm, "F.layer_norm(x, (d_model,))"),
    ],
)  # fmt: skip
def test_hunt_f11_slips_get_their_own_hint(task_id, learner, words):
    """Each got 'None of the usual single mistakes' (or a bare broadcast error) before."""
    result = check_result(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


def test_hunt_f11_right_pool_by_hand_passes():
    assert check_result("ex06.attention_pool", _pool_by_hand()).status == "passed"


# ---- d12: answers whose values are right but whose gradient is cut ----------------------------


def _d12_cross(cut_memory=False):
    def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
        memory = memory.detach() if cut_memory else memory
        return scaled_dot_product_attention(x @ w_q, memory @ w_k, memory @ w_v, memory_mask)

    return cross_attention


def _d12_pool(cut_queries=False):
    def attention_pool(x, queries, w_k, w_v, mask=None):
        q = (queries.detach() if cut_queries else queries).expand(x.shape[0], -1, -1)
        mask = None if mask is None else mask.unsqueeze(1)
        return scaled_dot_product_attention(q, x @ w_k, x @ w_v, mask)

    return attention_pool


def test_d12_a_cut_gradient_fails_where_the_values_alone_passed():
    # each had full marks: only the sub-layer's memory was followed back, never x (a detached
    # residual starves every layer below it), and the functions' gradients not at all
    detached = _sublayer(residual=lambda x: x.detach())
    result = check_result("ex06.CrossAttentionSublayer", detached)
    assert result.status == "failed", result.feedback
    assert "gradient with respect to the input x is not" in result.feedback, result.feedback
    assert check_result("ex06.cross_attention", _d12_cross()).score == 1.0
    result = check_result("ex06.cross_attention", _d12_cross(cut_memory=True))
    assert result.status == "failed" and "no gradient reaches memory" in result.feedback
    assert check_result("ex06.attention_pool", _d12_pool()).score == 1.0
    result = check_result("ex06.attention_pool", _d12_pool(cut_queries=True))
    assert result.status == "failed" and "no gradient reaches queries" in result.feedback


# ---- hunt f06 (a second fresh learner): a float32 scale, the scale after the softmax ---------


def _float32_root(q, k):  # torch.sqrt(torch.tensor(d_k)): a float32 number, 7 digits
    return torch.sqrt(torch.tensor(q.shape[-1]))


class _SublayerNormingTheQueryInPostNorm(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):  # h = norm(x) in both modes
        h = self.norm(x)
        out = x + self.attn(h, memory, memory, memory_mask)[0]
        return out if self.norm_first else self.norm(out)


@pytest.mark.parametrize("seed", [0, 1, 2, 5, 14])
@pytest.mark.parametrize(
    "task_id, learner",
    [
        ("ex06.cross_attention", _cross_scaled(_float32_root)),
        ("ex06.attention_pool", _pool_by_hand(_float32_root)),
    ],
)
def test_hunt_f06_a_float32_scale_fails_under_every_seed(task_id, learner, seed):
    """cross_attention's float64 case had d_k = 4, whose root float32 holds exactly: full marks
    under every seed. attention_pool's had d_k = 6: 'None of the usual single mistakes' in the
    notebook, full marks under hidden seeds 5 and 14. Both float64 cases now have d_k = 18."""
    task = get_task(task_id)
    cases = task.cases(torch.Generator().manual_seed(seed))
    result = judge(task, cases, run_cases(task, learner, cases))
    assert result.status == "failed" and "your scale is a float32 tensor" in result.feedback, (
        result.feedback
    )


def _cross_scaled_after_softmax(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    scores = q @ k.transpose(-2, -1)
    if memory_mask is not None:
        scores = scores.masked_fill(~memory_mask, float("-inf"))
    weights = scores.softmax(dim=-1) / math.sqrt(q.shape[-1])
    return weights @ v, weights


def _pool_scaled_after_softmax(x, queries, w_k, w_v, mask=None):
    k, v = x @ w_k, x @ w_v
    scores = queries @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    weights = scores.softmax(dim=-1) / math.sqrt(queries.shape[-1])
    return weights @ v, weights


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex06.cross_attention", _cross_scaled_after_softmax, "divided the weights by sqrt(d_k) "
         "after the softmax"),
        ("ex06.attention_pool", _pool_scaled_after_softmax, "divided the weights by sqrt(d_k) "
         "after the softmax"),
        ("ex06.attention_pool", _pool_by_hand(weigh=lambda s: s.softmax(dim=0)),
         "softmax(dim=0) normalises across the sequences"),
        ("ex06.CrossAttentionSublayer", _SublayerNormingTheQueryInPostNorm,
         "its attention reads x itself, not norm(x)"),
    ],
)  # fmt: skip
def test_hunt_f06_slips_get_their_own_hint(task_id, learner, words):
    """Each got 'None of the usual single mistakes' before."""
    result = check_result(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


def _cross_output_before_mask(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    output = scores.softmax(dim=-1) @ v  # computed before the mask
    if memory_mask is not None:
        scores = scores.masked_fill(~memory_mask, float("-inf"))
    return output, scores.softmax(dim=-1)


def _cross_sdpa_output_unmasked_weights(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    output = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=memory_mask)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)  # no mask
    return output, weights


@pytest.mark.parametrize(
    "learner, words",
    [
        (_cross_output_before_mask, "your weights are right but your output is not weights @ v"),
        (_cross_sdpa_output_unmasked_weights, "your output is right but the weights you return"),
    ],
)
def test_hunt_f06_output_and_weights_computed_apart_are_told_so(learner, words):
    """Both got 'None of the usual single mistakes' before."""
    result = check_result("ex06.cross_attention", learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


class _SublayerWithItsOwnMaskName(SublayerFunctional):
    """Right: its mask argument is called `mask`; the checks pass it by position."""

    def forward(self, x, memory, mask=None):
        return super().forward(x, memory, mask)


def test_g13_a_mask_argument_of_another_name_passes_the_gradient_pass_too():
    # the values were judged with the mask passed by position, the gradients with
    # memory_mask=...: 3/7, told 'an in-place operation changed a tensor' (a TypeError)
    result = check_result("ex06.CrossAttentionSublayer", _SublayerWithItsOwnMaskName)
    assert result.status == "passed", result.feedback


# ---- a third fresh reader: steps in the wrong order, a float32 softmax, pre-norm unnormed -----


def _cross_masked_after_softmax(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    if memory_mask is not None:  # the -inf fill, one step too late
        weights = weights.masked_fill(~memory_mask, float("-inf"))
    return weights @ v, weights


def _cross_memory_zeroed(x, memory, w_q, w_k, w_v, memory_mask=None):
    if memory_mask is not None:  # (batch, 1, n_kv) -> (batch, n_kv, 1): the pads read as zeros
        memory = memory * memory_mask.transpose(-2, -1)
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    return weights @ v, weights


def _pool_masked_after_softmax(x, queries, w_k, w_v, mask=None):
    k, v = x @ w_k, x @ w_v
    weights = (queries @ k.transpose(-2, -1) / math.sqrt(queries.shape[-1])).softmax(dim=-1)
    if mask is not None:  # the -inf fill, one step too late
        weights = weights.masked_fill(~mask[:, None, :], float("-inf"))
    return weights @ v, weights


def _swapped(right):
    def swapped(*args, **kwargs):
        output, weights = right(*args, **kwargs)
        return weights, output

    return swapped


class _SublayerPreNormOfX(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):
        if self.norm_first:  # "normalise first, then add the attention"
            return self.norm(x) + self.attn(x, memory, memory, memory_mask)[0]
        return super().forward(x, memory, memory_mask)


class _SublayerNormSandwich(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):  # L15: norm before AND after, post-norm
        if self.norm_first:
            return super().forward(x, memory, memory_mask)
        h = self.norm(x)
        return self.norm(h + self.attn(h, memory, memory, memory_mask)[0])


class _SublayerNormSandwichInBothModes(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):
        h = self.norm(x)
        return self.norm(h + self.attn(h, memory, memory, memory_mask)[0])


class _SublayerPreNormWithoutNorm(SublayerFunctional):
    def forward(self, x, memory, memory_mask=None):
        if self.norm_first:  # self.norm forgotten in this branch
            return x + self.attn(x, memory, memory, memory_mask)[0]
        return super().forward(x, memory, memory_mask)


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex06.cross_attention", _cross_masked_after_softmax, "-inf AFTER the softmax"),
        ("ex06.cross_attention", _cross_memory_zeroed, "zeroing the padded memory positions"),
        ("ex06.cross_attention",
         _cross_scaled(lambda q, k: math.sqrt(q.shape[-1]),
                       lambda s: s.softmax(dim=-1, dtype=torch.float32).to(s.dtype)),
         "your softmax ran in float32"),
        ("ex06.CrossAttentionSublayer", _SublayerPreNormWithoutNorm,
         "your pre-norm branch never calls self.norm"),
        ("ex06.CrossAttentionSublayer", _SublayerPreNormOfX,
         "not norm(x) + attn(x, memory) (the attention reads the normalised copy"),
        ("ex06.CrossAttentionSublayer", _SublayerNormSandwich, "before AND after the sub-layer"),
        ("ex06.CrossAttentionSublayer", _SublayerNormSandwichInBothModes,
         "before AND after the sub-layer"),
        ("ex06.cross_attention", _swapped(cross_attention_sdpa_route),
         "the return order is swapped"),
        ("ex06.attention_pool", _swapped(_pool_by_hand()), "the return order is swapped"),
        ("ex06.attention_pool", _pool_masked_after_softmax, "-inf AFTER the softmax"),
        ("ex06.attention_pool",
         _pool_by_hand(weigh=lambda s: s.softmax(dim=-1, dtype=torch.float32).to(s.dtype)),
         "your softmax ran in float32"),
    ],
)  # fmt: skip
def test_third_reader_slips_get_their_own_hint(task_id, learner, words):
    """Each got 'None of the usual single mistakes' (or a bare 'contains NaN') before."""
    result = check_result(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


_LEARNER_POOL_ON_OWN_CROSS = """
import torch
from course_lib.attention import scaled_dot_product_attention


def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
    mask = memory_mask if {use_mask} else None
    return scaled_dot_product_attention(x @ w_q, memory @ w_k, memory @ w_v, mask)


def attention_pool(x, queries, w_k, w_v, mask=None):
    eye = torch.eye(queries.shape[-1], dtype=queries.dtype)  # the queries are not projected
    keep = None if mask is None else mask[:, None, :]
    return cross_attention(queries.expand(len(x), -1, -1), x, eye, w_k, w_v, keep)
"""


@pytest.mark.parametrize("use_mask", [True, False])
def test_a_pool_on_the_learners_own_cross_attention_blames_it_when_it_is_wrong(use_mask):
    # a third reader: built on its own cross_attention that ignores the mask, the pool was told
    # 'the mask is ignored: turn the (batch, n) mask into (batch, 1, n)', which it had done
    namespace: dict = {}
    exec(_LEARNER_POOL_ON_OWN_CROSS.format(use_mask=use_mask), namespace)  # noqa: S102
    result = check_result("ex06.attention_pool", namespace["attention_pool"])
    assert result.status == ("passed" if use_mask else "failed"), result.feedback
    assert ("fix cross_attention first" in result.feedback) != use_mask, result.feedback


# ---- L16: norm(norm(x) + attn(x)), in either branch ----


class _SublayerNormingXAndTheSum(SublayerFunctional):
    branch = "both"

    def forward(self, x, memory, memory_mask=None):
        if self.branch in ("both", "pre" if self.norm_first else "post"):
            return self.norm(self.norm(x) + self.attn(x, memory, memory, memory_mask)[0])
        return super().forward(x, memory, memory_mask)


@pytest.mark.parametrize("branch", ["both", "pre", "post"])
def test_l16_the_norm_of_normed_x_plus_attention_is_named_under_every_seed(branch):
    # before: 'None of the usual single mistakes gives this result'
    import course_lib.grading as grading

    learner = type("Sublayer", (_SublayerNormingXAndTheSum,), {"branch": branch})
    try:
        for seed in (0, 1, 2, 3, 4, 5):
            grading.NOTEBOOK_SEED = seed  # the batch grader's hidden seeds
            result = check_result("ex06.CrossAttentionSublayer", learner)
            assert result.status == "failed", (seed, result.feedback)
            assert "norm(norm(x) + attn(x, memory))" in result.feedback, (seed, result.feedback)
    finally:
        grading.NOTEBOOK_SEED = 0


# ---- h6: a softmax by hand without each row's maximum, a mask kept by its shape ----


def _exp_over_sum(shift):
    def weigh(scores):  # exp(scores - shift) / sum: the formula, as ex02 warns it overflows
        e = (scores - shift(scores)).exp()
        return e / e.sum(dim=-1, keepdim=True)

    return weigh


_NO_MAX = _exp_over_sum(lambda scores: 0.0)
_MAX_OF_ALL = _exp_over_sum(lambda scores: scores.max())  # no dim: the whole tensor's maximum
_D_K_ROOT = lambda q, k: math.sqrt(q.shape[-1])  # noqa: E731


def _cross_keeping_the_mask_of_its_shape():
    kept = {}  # a global table, "the same mask for every batch of this shape"

    def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
        q, k, v = x @ w_q, memory @ w_k, memory @ w_v
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if memory_mask is not None:
            keep = kept.setdefault(tuple(memory_mask.shape), memory_mask)
            scores = scores.masked_fill(~keep, float("-inf"))
        weights = scores.softmax(dim=-1)
        return weights @ v, weights

    return cross_attention


def _pool_keeping_the_mask_of_its_shape():
    kept = {}

    def attention_pool(x, queries, w_k, w_v, mask=None):
        k, v = x @ w_k, x @ w_v
        scores = queries @ k.transpose(-2, -1) / math.sqrt(queries.shape[-1])
        if mask is not None:
            keep = kept.setdefault(tuple(mask.shape), mask[:, None, :])
            scores = scores.masked_fill(~keep, float("-inf"))
        weights = scores.softmax(dim=-1)
        return weights @ v, weights

    return attention_pool


@pytest.mark.parametrize("seed", [0, 1, 2, 7])
@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex06.cross_attention", lambda: _cross_scaled(_D_K_ROOT, _NO_MAX),
         "exp of a score near 300 overflows"),
        ("ex06.cross_attention", lambda: _cross_scaled(_D_K_ROOT, _MAX_OF_ALL),
         "largest score of the whole tensor"),
        ("ex06.attention_pool", lambda: _pool_by_hand(weigh=_NO_MAX),
         "exp of a score near 300 overflows"),
        ("ex06.attention_pool", lambda: _pool_by_hand(weigh=_MAX_OF_ALL),
         "largest score of the whole tensor"),
        ("ex06.cross_attention", _cross_keeping_the_mask_of_its_shape, ""),
        ("ex06.attention_pool", _pool_keeping_the_mask_of_its_shape, ""),
    ],
)  # fmt: skip
def test_h6_a_softmax_without_the_row_max_and_a_kept_mask_fail_under_every_seed(
    task_id, learner, words, seed
):
    """Every score was small unless masked, so exp(scores) / sum, with no maximum subtracted
    or with the whole tensor's, had full marks in both tasks (ex02 and ex05 name it); and no
    two masks shared a shape, so a mask kept by its shape from an earlier call had full marks
    too. The last case of each scores 0 and +-300 through a mask, of the case before's shape,
    that blocks nothing. A fresh learner per seed: the batch grader's fresh kernel."""
    task = get_task(task_id)
    cases = task.cases(torch.Generator().manual_seed(seed))
    result = judge(task, cases, run_cases(task, learner(), cases))
    assert result.status == "failed" and words in result.feedback, result.feedback
    if seed == 0:  # the notebook's check, too
        result = check_result(task_id, learner())
        assert result.status == "failed" and words in result.feedback, result.feedback
    if task_id == "ex06.cross_attention":  # the same by hand, each row's maximum subtracted
        right = _cross_scaled(_D_K_ROOT, _exp_over_sum(lambda s: s.amax(-1, keepdim=True)))
        assert judge(task, cases, run_cases(task, right, cases)).status == "passed"


def _cross_projected(project, route="sdpa"):
    """q, k, v from `project(x, memory, w_q, w_k, w_v)`, attended through the notebook's
    scaled_dot_product_attention or by hand (the two raise different errors on bad shapes)."""

    def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
        q, k, v = project(x, memory, w_q, w_k, w_v)
        if route == "sdpa":
            return scaled_dot_product_attention(q, k, v, memory_mask)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if memory_mask is not None:
            scores = scores.masked_fill(~memory_mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        return weights @ v, weights

    return cross_attention


@pytest.mark.parametrize(
    "project, route, words",
    [
        *[(lambda x, m, w_q, w_k, w_v: (x @ w_k, m @ w_q, m @ w_v), route,
           "the queries are projected with w_k and the keys with w_q")
          for route in ("sdpa", "by hand")],
        *[(lambda x, m, w_q, w_k, w_v: (x @ w_q, m @ w_k, x @ w_v), route,
           "the values come from memory, like the keys") for route in ("sdpa", "by hand")],
        (lambda x, m, w_q, w_k, w_v: (x @ w_q, x @ w_k, m @ w_v), "sdpa",
         "the keys come from memory, like the values"),
    ],
)  # fmt: skip
def test_h6_a_projection_from_the_wrong_sequence_or_matrix_is_named(project, route, words):
    """Each got 'None of the usual single mistakes' or a bare shape error ('k has n_k=5 keys but
    v has 3 values', 'Expected size for first two dimensions of batch2 tensor')."""
    result = check_result("ex06.cross_attention", _cross_projected(project, route))
    assert result.status == "failed" and words in result.feedback, result.feedback


def _cross_keys_times_queries(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    weights = (k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    return weights @ v, weights  # (n_kv, n_q) @ (n_kv, d_v): the crash keys from x give by hand


def test_h6_k_times_q_transposed_is_not_told_the_keys_come_from_x():
    result = check_result("ex06.cross_attention", _cross_keys_times_queries)
    assert result.status == "failed" and "keys come from memory" not in result.feedback


# ---- h06: keys and values kept between calls (functools.lru_cache, a cache keyed by id) ----


def _cross_kept_by_lru_cache():
    @functools.lru_cache  # tensors hash by identity: the same tensors, k and v kept
    def project(t, w):
        return t @ w

    def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
        return scaled_dot_product_attention(
            x @ w_q, project(memory, w_k), project(memory, w_v), memory_mask
        )

    return cross_attention


def _cross_kept_by_id():
    kept = {}  # "the encoder's memory is the same at every decoding step": k and v computed once

    def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
        k, v = kept.setdefault(id(memory), (memory @ w_k, memory @ w_v))
        return scaled_dot_product_attention(x @ w_q, k, v, memory_mask)

    return cross_attention


def _pool_kept_by_lru_cache():
    @functools.lru_cache
    def project(t, w):
        return t @ w

    def attention_pool(x, queries, w_k, w_v, mask=None):
        mask = None if mask is None else mask[:, None, :]
        q = queries.expand(x.shape[0], -1, -1)
        return scaled_dot_product_attention(q, project(x, w_k), project(x, w_v), mask)

    return attention_pool


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "task_id, learner, read",
    [
        ("ex06.cross_attention", _cross_kept_by_lru_cache, "memory"),
        ("ex06.cross_attention", _cross_kept_by_id, "memory"),
        ("ex06.attention_pool", _pool_kept_by_lru_cache, "x"),
    ],
)
def test_h06_keys_and_values_kept_between_calls_fail_with_their_hint(task_id, learner, read, seed):
    """Each case came in new tensors, so k and v cached on the tensors (an lru_cache on the
    projection, a dict keyed by id(memory)) were never stale: full marks in the notebook and
    under the hidden seeds (by id: but for a seed where an id came back), though a training
    step, which changes w_k and w_v in place, would leave them stale. The check now calls once
    with w_k and w_v negated in place, then restored; a fresh learner per seed."""
    task = get_task(task_id)
    cases = task.cases(torch.Generator().manual_seed(seed))
    result = judge(task, cases, run_cases(task, learner(), cases))
    words = f"a cache keyed by id({read})"
    assert result.status == "failed" and words in result.feedback, result.feedback
    if seed == 0:  # the notebook's check, too
        result = check_result(task_id, learner())
        assert result.status == "failed" and words in result.feedback, result.feedback


def _cross_power_then_half(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / d_k**1 / 2  # d_k ** 1/2 as a learner types it
    if memory_mask is not None:
        scores = scores.masked_fill(~memory_mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


def _pool_power_then_half(x, queries, w_k, w_v, mask=None):
    k, v = x @ w_k, x @ w_v
    scores = queries @ k.transpose(-2, -1) / queries.shape[-1] ** 1 / 2
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


@pytest.mark.parametrize(
    "task_id, learner",
    [("ex06.cross_attention", _cross_power_then_half),
     ("ex06.attention_pool", _pool_power_then_half)],
)  # fmt: skip
def test_h06_d_k_to_the_power_one_half_is_named(task_id, learner):
    """scores / d_k ** 1/2 divides by 2 d_k: it got 'None of the usual single mistakes'."""
    result = check_result(task_id, learner)
    assert result.status == "failed" and "d_k ** 1/2 is (d_k ** 1) / 2" in result.feedback, (
        result.feedback
    )
