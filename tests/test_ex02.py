"""ex02: the references pass, every named mistake fails with its hint, shortcuts are forbidden."""

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.grading import check_result, tasks_for
from course_lib.grading.core import _gradients_apart, compare_gradients, get_task, resolve


def result(task_id, obj):
    r = check_result(task_id, obj)
    assert not isinstance(r, str), r  # a string means the checker itself could not run
    return r


def test_ex02_has_its_tasks_in_order():
    assert [t.id for t in tasks_for("ex02")] == [
        "ex02.softmax",
        "ex02.scaled_dot_product_attention",
        "ex02.self_attention",
        "ex02.distance_biased_attention",
    ]


# ---------------------------------------------------------------- independent correct solutions


def softmax_max(x, dim=-1):
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def softmax_logsumexp(x, dim=-1):
    return (x - torch.logsumexp(x, dim=dim, keepdim=True)).exp()


def softmax_moved_axis(x, dim=-1):
    moved = x.movedim(dim, -1)
    e = (moved - moved.max(dim=-1, keepdim=True).values).exp()
    return (e / e.sum(-1, keepdim=True)).movedim(-1, dim)


def attention_transpose(q, k, v):
    weights = softmax_max(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    return weights @ v, weights


def attention_einsum(q, k, v):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5
    weights = softmax_logsumexp(scores)
    return torch.einsum("...qk,...kv->...qv", weights, v), weights


def attention_mT_float64(q, k, v):
    weights = softmax_max(q.double() @ k.double().mT * q.shape[-1] ** -0.5)
    return (weights @ v.double()).to(q.dtype), weights.to(q.dtype)


def self_attention_matmul(x, w_q, w_k, w_v):
    return attention_transpose(x @ w_q, x @ w_k, x @ w_v)


def self_attention_einsum(x, w_q, w_k, w_v):
    project = lambda w: torch.einsum("...nd,de->...ne", x, w)
    return attention_einsum(project(w_q), project(w_k), project(w_v))


def self_attention_linear(x, w_q, w_k, w_v):
    # F.linear(x, W) computes x @ W.T, so pass the transposed matrices
    return attention_transpose(F.linear(x, w_q.T), F.linear(x, w_k.T), F.linear(x, w_v.T))


CORRECT = [
    ("ex02.softmax", softmax_max),
    ("ex02.softmax", softmax_logsumexp),
    ("ex02.softmax", softmax_moved_axis),
    ("ex02.scaled_dot_product_attention", attention_transpose),
    ("ex02.scaled_dot_product_attention", attention_einsum),
    ("ex02.scaled_dot_product_attention", attention_mT_float64),
    ("ex02.self_attention", self_attention_matmul),
    ("ex02.self_attention", self_attention_einsum),
    ("ex02.self_attention", self_attention_linear),
]


@pytest.mark.parametrize("task_id, fn", CORRECT, ids=[f"{t}-{f.__name__}" for t, f in CORRECT])
def test_correct_solutions_pass(task_id, fn):
    r = result(task_id, fn)
    assert r.status == "passed", r.feedback
    assert r.score == r.max_score


@pytest.mark.parametrize("task", tasks_for("ex02"), ids=lambda t: t.id)
def test_reference_matches_itself_on_every_case(task):
    ref = resolve(task.reference)
    for case in task.cases(torch.Generator().manual_seed(1)):
        (got, got_gradients), (want, want_gradients) = (  # d12: with their gradients
            _gradients_apart(task.call(ref, case)),
            _gradients_apart(task.expected(case)),
        )
        assert task.compare(got, want, case) is None
        assert want_gradients is None or compare_gradients(got_gradients, want_gradients) is None


@pytest.mark.parametrize("task", tasks_for("ex02"), ids=lambda t: t.id)
def test_calling_the_course_reference_is_forbidden(task):
    ref = resolve(task.reference)
    r = result(task.id, lambda *args, **kwargs: ref(*args, **kwargs))
    assert r.status == "forbidden" and "course's finished version" in r.feedback


# ----------------------------------------------------------------------------------- mistakes
# Written here independently of the grader's own list, as learners would write them.


def no_max(x, dim=-1):
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)


def ignores_dim(x, dim=-1):
    return softmax_max(x, -1)


def log_softmax(x, dim=-1):
    return x - torch.logsumexp(x, dim=dim, keepdim=True)


def global_max_shift(x, dim=-1):
    return (x - x.max()).exp() / (x - x.max()).exp().sum(dim=dim, keepdim=True)


def min_shift(x, dim=-1):
    shifted = x - x.min(dim=dim, keepdim=True).values
    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)


def _attn(q, k, v, scale, axis=-1):
    weights = softmax_max(q @ k.transpose(-2, -1) * scale, axis)
    return weights @ v, weights


def no_scaling(q, k, v):
    return _attn(q, k, v, 1.0)


def scale_by_d_k(q, k, v):
    return _attn(q, k, v, 1 / q.shape[-1])


def scale_by_d_v(q, k, v):
    return _attn(q, k, v, 1 / v.shape[-1])


def scale_by_sqrt_d_v(q, k, v):
    return _attn(q, k, v, 1 / math.sqrt(v.shape[-1]))


def softmax_over_queries(q, k, v):
    return _attn(q, k, v, 1 / math.sqrt(q.shape[-1]), axis=-2)


def dot_T(q, k, v):
    weights = softmax_max(torch.matmul(q, k.T) / math.sqrt(q.shape[-1]))
    return weights @ v, weights


def method_t(q, k, v):
    weights = softmax_max(q @ k.t() / math.sqrt(q.shape[-1]))
    return weights @ v, weights


def swapped_order(q, k, v):
    output, weights = attention_transpose(q, k, v)
    return weights, output


def weights_on_left(x, w_q, w_k, w_v):
    return attention_transpose(w_q @ x, w_k @ x, w_v @ x)


def weights_transposed(x, w_q, w_k, w_v):
    return attention_transpose(x @ w_q.T, x @ w_k.T, x @ w_v.T)


MISTAKES = [
    ("ex02.softmax", no_max, "subtract the maximum"),
    ("ex02.softmax", ignores_dim, "use the `dim` argument"),
    ("ex02.softmax", log_softmax, "that is log-softmax"),
    ("ex02.softmax", global_max_shift, "the maximum of the whole tensor"),
    ("ex02.softmax", min_shift, "you subtracted the minimum"),
    ("ex02.scaled_dot_product_attention", no_scaling, "not scaled"),
    ("ex02.scaled_dot_product_attention", scale_by_d_k, "divide by its square root"),
    ("ex02.scaled_dot_product_attention", scale_by_d_v, "you divided by d_v"),
    ("ex02.scaled_dot_product_attention", scale_by_sqrt_d_v, "scaled by sqrt(d_v)"),
    ("ex02.scaled_dot_product_attention", softmax_over_queries, "over the query axis"),
    ("ex02.scaled_dot_product_attention", dot_T, "`.T` transposes only 2-D"),
    ("ex02.scaled_dot_product_attention", method_t, "`.t()` works only on 2-D"),
    ("ex02.scaled_dot_product_attention", swapped_order, "return order is swapped"),
    ("ex02.self_attention", weights_on_left, "projections are applied on the wrong side"),
    ("ex02.self_attention", weights_transposed, "projections are applied on the wrong side"),
]


@pytest.mark.parametrize("task_id, fn, hint", MISTAKES, ids=[m[1].__name__ for m in MISTAKES])
def test_each_mistake_fails_with_its_hint(task_id, fn, hint):
    r = result(task_id, fn)
    assert r.status == "failed", r.feedback
    assert r.score < r.max_score
    assert hint in r.feedback, r.feedback


@pytest.mark.parametrize(
    "attention, hint",
    [
        (no_scaling, "not scaled"),
        (dot_T, "`.T` transposes only 2-D"),
        (softmax_over_queries, "over the query axis"),
    ],
)
def test_self_attention_on_a_wrong_attention_points_to_the_attention(attention, hint):
    def bad(x, w_q, w_k, w_v):
        return attention(x @ w_q, x @ w_k, x @ w_v)

    r = result("ex02.self_attention", bad)
    assert r.status == "failed"
    assert "the projections are right, but the attention step is not" in r.feedback
    assert hint in r.feedback, r.feedback


def test_dtype_must_be_kept():
    r = result("ex02.softmax", lambda x, dim=-1: softmax_max(x.float(), dim))
    assert r.status == "failed" and "dtype" in r.feedback


# ------------------------------------------------------------------------------ forbidden calls

FORBIDDEN_SOFTMAX = {
    "torch.softmax": lambda x, dim=-1: torch.softmax(x, dim),
    "F.softmax": lambda x, dim=-1: F.softmax(x, dim=dim),
    "Tensor.softmax": lambda x, dim=-1: x.softmax(dim),
    "nn.Softmax": lambda x, dim=-1: nn.Softmax(dim=dim)(x),
    "torch.log_softmax": lambda x, dim=-1: torch.log_softmax(x, dim).exp(),
    "F.log_softmax": lambda x, dim=-1: F.log_softmax(x, dim=dim).exp(),
    "Tensor.log_softmax": lambda x, dim=-1: x.log_softmax(dim).exp(),
    "nn.LogSoftmax": lambda x, dim=-1: nn.LogSoftmax(dim=dim)(x).exp(),
    "torch.special.softmax": lambda x, dim=-1: torch.special.softmax(x, dim),
}


@pytest.mark.parametrize("name", list(FORBIDDEN_SOFTMAX))
def test_forbidden_softmax_calls(name):
    r = result("ex02.softmax", FORBIDDEN_SOFTMAX[name])
    assert r.status == "forbidden", r.feedback
    assert r.score == 0


def test_forbidden_torch_attention():
    def fused(q, k, v):
        return F.scaled_dot_product_attention(q, k, v), None

    r = result("ex02.scaled_dot_product_attention", fused)
    assert r.status == "forbidden" and "scaled_dot_product_attention" in r.feedback


def test_torch_softmax_inside_attention_is_allowed():
    def uses_torch_softmax(q, k, v):
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
        return weights @ v, weights

    # the attention task allows any softmax except the fused attention itself
    assert result("ex02.scaled_dot_product_attention", uses_torch_softmax).status == "passed"


# ---------------------------------------------------------------------------- not implemented


@pytest.mark.parametrize("task", tasks_for("ex02"), ids=lambda t: t.id)
def test_stub_is_not_implemented(task):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    r = result(task.id, stub)
    assert r.status == "not implemented" and r.score == 0


def test_an_unrelated_error_is_reported_as_is():
    def broken(q, k, v):
        raise ValueError("my own bug")

    r = result("ex02.scaled_dot_product_attention", broken)
    assert r.status == "failed" and "my own bug" in r.feedback and "Hint" not in r.feedback


def test_an_error_gets_a_mistakes_hint_only_when_it_fails_the_same_way():
    # The hint follows what failed (the same torch operation, on arguments of the same shapes),
    # never PyTorch's wording: `q @ k` without a transpose fails in a matmul, as `.T` does on a
    # batch, but on other shapes, so it is not told about `.T`.
    from course_lib.grading import GradingError, get_task

    task = get_task("ex02.scaled_dot_product_attention")
    batched = task.cases(torch.Generator().manual_seed(0))[1]  # q (2, 3, 8), k (2, 5, 8)

    def no_transpose(q, k, v):
        weights = softmax_max(q @ k / math.sqrt(q.shape[-1]))
        return weights @ v, weights

    with pytest.raises(GradingError, match="`.T` transposes only 2-D"):
        task.call(dot_T, batched)
    with pytest.raises(RuntimeError) as raised:
        task.call(no_transpose, batched)
    assert not isinstance(raised.value, GradingError)


def test_a_correct_attention_passes_the_large_values_case_under_every_seed():
    # q / sqrt(d_k) before the product is as right as dividing the scores; with float32 scores
    # of size ~4500 the two differ by up to ~4e-4, and a grader seed must not fail either
    task = get_task("ex02.scaled_dot_product_attention")
    for seed in range(300):
        for case in task.cases(torch.Generator().manual_seed(seed)):
            if not case.description.startswith("large values"):
                continue
            q, k, v = case.args[:3]
            scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)
            weights = (scores - scores.amax(-1, keepdim=True)).exp()
            weights = weights / weights.sum(-1, keepdim=True)
            want = _gradients_apart(task.expected(case))[0]  # d12: the values, not the gradients
            assert task.compare((weights @ v, weights), want, case) is None, seed


def test_distance_biased_attention_with_a_naive_softmax_fails_on_large_scores():
    # no case had large scores, so exp without the maximum passed (found by a fresh reader)
    def naive(q, k, v, slope):
        n_q, n_k = q.shape[-2], k.shape[-2]
        distance = (torch.arange(n_q)[:, None] - torch.arange(n_k)[None, :]).abs().to(q.dtype)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) - slope * distance
        e = scores.exp()
        weights = e / e.sum(-1, keepdim=True)
        return weights @ v, weights

    result = check_result("ex02.distance_biased_attention", naive)
    assert result.status == "failed" and "use your stable softmax" in result.feedback


# ------------------------------------------------- #33: slips an outside learner found next
# Each written as a learner would; the notebook's own check (its fixed seed) must not give full
# marks, and the feedback must name the slip.


def max_without_keepdim(x, dim=-1):
    e = (x - x.max(dim=dim).values).exp()
    return e / e.sum(dim=dim, keepdim=True)


def max_pair_subtracted(x, dim=-1):
    e = (x - x.max(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def max_over_last_axis(x, dim=-1):
    e = (x - x.max(-1, keepdim=True).values).exp()
    return e / e.sum(dim=dim, keepdim=True)


def d_k_from_shape_1(q, k, v):
    return _attn(q, k, v, 1 / math.sqrt(q.shape[1]))


def d_k_from_k_size_1(q, k, v):
    return _attn(q, k, v, 1 / math.sqrt(k.size(1)))


def batched_by_bmm(q, k, v):
    weights = softmax_max(torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1]))
    return torch.bmm(weights, v), weights


def power_half_bracketed(q, k, v):
    d_k = q.shape[-1]
    weights = softmax_max(q @ k.transpose(-2, -1) / (d_k**1 / 2))
    return weights @ v, weights


def power_half_unbracketed(q, k, v):
    d_k = q.shape[-1]
    weights = softmax_max(q @ k.transpose(-2, -1) / d_k**1 / 2)
    return weights @ v, weights


def scaled_after_softmax(q, k, v):
    weights = softmax_max(q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return weights @ v, weights


def transpose_0_1(q, k, v):
    weights = softmax_max(q @ k.transpose(0, 1) / math.sqrt(q.shape[-1]))
    return weights @ v, weights


def scaled_by_d_model(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = softmax_max(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]))
    return weights @ v, weights


def keys_projected_with_w_q(x, w_q, w_k, w_v):
    q = x @ w_q
    k = x @ w_q  # copied from the line above
    return attention_transpose(q, k, x @ w_v)


def _biased(q, k, v, slope, distance, scale):
    scores = q @ k.transpose(-2, -1) / scale - slope * distance
    weights = softmax_max(scores)
    return weights @ v, weights


def _positions(q, k):
    return torch.arange(q.shape[-2], dtype=q.dtype)[:, None], torch.arange(
        k.shape[-2], dtype=q.dtype
    )


def biased_without_scaling(q, k, v, slope):
    i, j = _positions(q, k)
    return _biased(q, k, v, slope, (i - j).abs(), 1.0)


def biased_like_causal_alibi(q, k, v, slope):
    i, j = _positions(q, k)
    return _biased(q, k, v, slope, (i - j).clamp(min=0), math.sqrt(q.shape[-1]))


def biased_with_queries_counted_twice(q, k, v, slope):
    i = torch.arange(q.shape[-2], dtype=q.dtype)[:, None]
    return _biased(q, k, v, slope, (i - i.T).abs(), math.sqrt(q.shape[-1]))


def biased_with_lengths_from_shape_1(q, k, v, slope):
    i = torch.arange(q.shape[1], dtype=q.dtype)[:, None]
    j = torch.arange(k.shape[1], dtype=q.dtype)
    return _biased(q, k, v, slope, (i - j).abs(), math.sqrt(q.shape[-1]))


NEXT_SLIPS = [
    ("ex02.softmax", max_without_keepdim, "(or max(dim=dim)) drops that axis"),
    ("ex02.softmax", max_pair_subtracted, "returns a pair (values, indices)"),
    ("ex02.softmax", max_over_last_axis, "maximum over the last axis but normalised over"),
    ("ex02.scaled_dot_product_attention", d_k_from_shape_1, "you took d_k from shape[1]"),
    ("ex02.scaled_dot_product_attention", d_k_from_k_size_1, "you took d_k from shape[1]"),
    ("ex02.scaled_dot_product_attention", batched_by_bmm, "k.transpose(1, 2) (like torch.bmm)"),
    ("ex02.scaled_dot_product_attention", power_half_bracketed, "** binds tighter than /"),
    ("ex02.scaled_dot_product_attention", power_half_unbracketed, "** binds tighter than /"),
    ("ex02.scaled_dot_product_attention", scaled_after_softmax, "after the softmax"),
    ("ex02.scaled_dot_product_attention", transpose_0_1, "k.transpose(0, 1) swaps"),
    ("ex02.self_attention", scaled_by_d_model, "you scaled by sqrt(d_model)"),
    ("ex02.self_attention", keys_projected_with_w_q, "your keys were projected with w_q"),
    ("ex02.distance_biased_attention", biased_without_scaling, "the scores are not scaled"),
    ("ex02.distance_biased_attention", biased_like_causal_alibi, "only the keys before"),
    ("ex02.distance_biased_attention", biased_with_queries_counted_twice, "the scores' shape"),
    ("ex02.distance_biased_attention", biased_with_lengths_from_shape_1, "lengths from shape[1]"),
]


@pytest.mark.parametrize("task_id, fn, hint", NEXT_SLIPS, ids=[m[1].__name__ for m in NEXT_SLIPS])
def test_next_slips_fail_in_the_notebook_with_their_hint(task_id, fn, hint):
    r = result(task_id, fn)
    assert r.status == "failed" and r.score < r.max_score, r.feedback
    assert hint in r.feedback, r.feedback


# ---------------------------- hunt 2: steps in the wrong order, arguments passed on in another


def softmax_unsqueezed_last(x, dim=-1):
    e = (x - x.max(dim=dim).values.unsqueeze(-1)).exp()
    return e / e.sum(dim=dim).unsqueeze(-1)


def _attention(q, k, v, slip=""):
    """A learner's attention; `slip` is the one step written otherwise."""
    k_t = k.permute(0, 2, 1) if slip == "permute" else k.transpose(-2, -1)
    scores = k @ q.transpose(-2, -1) if slip == "k_q" else q @ k_t
    d = len(k) if slip == "len" else q.shape[-1]
    scores = scores if slip == "output" else scores * d**0.5 if slip == "times" else scores / d**0.5
    weights = softmax_max(scores)
    output = v @ weights if slip == "v_first" else weights @ v
    output = (weights * v).sum(-1) if slip == "elementwise" else output
    return (output / d**0.5 if slip == "output" else output), weights


def _self_attention(order, x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return _attention(*({"q": q, "k": k, "v": v}[name] for name in order))


def _biased_reusing(slip, q, k, v, slope):
    i, j = _positions(q, k)
    if slip == "softmax_again":  # the weights of task 2, biased and softmaxed again
        weights = softmax_max(_attention(q, k, v)[1] - slope * (i - j).abs())
        return weights @ v, weights
    if slip == "tensor_slope":
        slope = torch.tensor(slope)
    return _biased(q, k, v, slope, (i - j).abs(), math.sqrt(q.shape[-1]))


def _named(fn, name, *args, **kwargs):
    one = functools.partial(fn, *args, **kwargs)
    one.__name__ = name
    return one


def softmax_without_gradients(x, dim=-1):  # hunt 2: full marks, and a GPT that cannot learn
    with torch.no_grad():
        return softmax_max(x, dim)


def biased_by_one_dimensional_distances(q, k, v, slope):  # equal lengths: a bias of zeros
    i, j = torch.arange(q.shape[-2], dtype=q.dtype), torch.arange(k.shape[-2], dtype=q.dtype)
    return _biased(q, k, v, slope, (i - j).abs(), math.sqrt(q.shape[-1]))


SDPA = "ex02.scaled_dot_product_attention"
HUNT2_SLIPS = [
    ("ex02.distance_biased_attention", biased_by_one_dimensional_distances, "two 1-D aranges"),
    ("ex02.softmax", softmax_without_gradients, "your result carries no gradients"),
    ("ex02.softmax", softmax_unsqueezed_last, "unsqueeze(-1) puts the reduced axis back last"),
    (SDPA, _named(_attention, "attention_v_first", slip="v_first"), "v @ weights multiplies"),
    (SDPA, _named(_attention, "attention_k_q", slip="k_q"), "one row per key"),
    (SDPA, _named(_attention, "attention_elementwise", slip="elementwise"), "entry by entry"),
    (SDPA, _named(_attention, "attention_permute", slip="permute"), "k.permute(0, 2, 1) assumes"),
    (SDPA, _named(_attention, "attention_len_k", slip="len"), "the number of keys"),
    (SDPA, _named(_attention, "attention_times", slip="times"), "multiplied the scores"),
    (SDPA, _named(_attention, "attention_output", slip="output"), "divided the output"),
    ("ex02.self_attention", _named(_self_attention, "attention_qvk", "qvk"), "(q, k, v) in that"),
    ("ex02.self_attention", _named(_self_attention, "attention_kqv", "kqv"), "queries and keys"),
    ("ex02.self_attention", _named(_self_attention, "attention_qkk", "qkk"), "projected with w_k"),
    (
        "ex02.distance_biased_attention",
        _named(_biased_reusing, "biased_softmax_of_weights", "softmax_again"),
        "took a softmax again",
    ),
    (
        "ex02.distance_biased_attention",
        _named(_biased_reusing, "biased_by_a_tensor_slope", "tensor_slope"),
        "and torch.tensor(slope) is float32",
    ),
]


@pytest.mark.parametrize("task_id, fn, hint", HUNT2_SLIPS, ids=[m[1].__name__ for m in HUNT2_SLIPS])
def test_hunt2_slips_fail_in_the_notebook_with_their_hint(task_id, fn, hint):
    test_next_slips_fail_in_the_notebook_with_their_hint(task_id, fn, hint)


# ---------------------------- hunt 3: a learner's own way to a slip the rows do not reproduce


def biased_by_a_bias_filled_in_a_loop(q, k, v, slope):  # hunt 3: 'none of the usual mistakes'
    bias = torch.zeros(q.shape[-2], k.shape[-2])  # float32: no dtype=
    for i in range(q.shape[-2]):
        for j in range(k.shape[-2]):
            bias[i, j] = -slope * abs(i - j)
    weights = softmax_max(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias)
    return weights @ v, weights


def biased_scaled_by_the_number_of_keys(q, k, v, slope):  # hunt 3: 'none of the usual'
    i, j = _positions(q, k)
    return _biased(q, k, v, slope, (i - j).abs(), math.sqrt(k.shape[-2]))


def self_attention_through_f_linear(x, w_q, w_k, w_v):  # hunt 3: a bare RuntimeError
    return _attention(F.linear(x, w_q), F.linear(x, w_k), F.linear(x, w_v))


HUNT3_SLIPS = [
    ("ex02.distance_biased_attention", biased_scaled_by_the_number_of_keys, "number of keys"),
    ("ex02.self_attention", self_attention_through_f_linear, "F.linear(x, w) computes x @ w.T"),
    ("ex02.distance_biased_attention", biased_by_a_bias_filled_in_a_loop, "torch.zeros(n_q, n_k)"),
]


@pytest.mark.parametrize("task_id, fn, hint", HUNT3_SLIPS, ids=[m[1].__name__ for m in HUNT3_SLIPS])
def test_hunt3_slips_fail_in_the_notebook_with_their_hint(task_id, fn, hint):
    test_next_slips_fail_in_the_notebook_with_their_hint(task_id, fn, hint)


# ---------------------------- hunt 4: a fresh learner's slips (a length-1 axis, j - i, n_q)


def softmax_squeezed(x, dim=-1):  # hunt 4: full marks before (no case had an axis of length 1)
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return (e / e.sum(dim=dim, keepdim=True)).squeeze()


def attention_scaled_by_the_number_of_queries(q, k, v):  # hunt 4: 'none of the usual'
    weights = softmax_max(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-2]))
    return weights @ v, weights


def biased_by_key_minus_query(q, k, v, slope):  # hunt 4: 'none of the usual' (i - j had a hint)
    i, j = _positions(q, k)
    return _biased(q, k, v, slope, j - i, math.sqrt(q.shape[-1]))


def biased_by_squared_distance(q, k, v, slope):  # hunt 4: exercise 00's squares, 'none of the'
    i, j = _positions(q, k)
    return _biased(q, k, v, slope, (i - j) ** 2, math.sqrt(q.shape[-1]))


HUNT4_SLIPS = [
    ("ex02.distance_biased_attention", biased_by_squared_distance, "the squared distance"),
    ("ex02.softmax", softmax_squeezed, "squeeze() without an axis"),
    (SDPA, attention_scaled_by_the_number_of_queries, "the number of queries"),
    ("ex02.distance_biased_attention", biased_by_key_minus_query, "use the distance |i - j|"),
]


@pytest.mark.parametrize("task_id, fn, hint", HUNT4_SLIPS, ids=[m[1].__name__ for m in HUNT4_SLIPS])
def test_hunt4_slips_fail_in_the_notebook_with_their_hint(task_id, fn, hint):
    test_next_slips_fail_in_the_notebook_with_their_hint(task_id, fn, hint)


# ---------------------------- hunt 5: the bias in one result only, float32 inside, a .view()


def biased_half_way(q, k, v, slope, *, slip):
    i, j = _positions(q, k)
    output, weights = _biased(q, k, v, slope, (i - j).abs(), math.sqrt(q.shape[-1]))
    plain_output, plain_weights = _attention(q, k, v)  # task 2's attention, called for one half
    return (plain_output, weights) if slip == "plain output" else (output, plain_weights)


def attention_in_float32(q, k, v):  # hunt 5: 'none of the usual' on the float64 case
    weights = softmax_max((q @ k.transpose(-2, -1)).float() / math.sqrt(q.shape[-1]))
    return (weights @ v.float()).to(q.dtype), weights.to(q.dtype)


def attention_through_a_view(q, k, v):  # hunt 5: full marks, crashes on exercise 03's heads
    flat = q.view(-1, *q.shape[-2:])
    weights = softmax_max(flat @ k.reshape(flat.shape[0], *k.shape[-2:]).mT / q.shape[-1] ** 0.5)
    output = weights @ v.reshape(flat.shape[0], *v.shape[-2:])
    return output.reshape(*q.shape[:-1], -1), weights.reshape(*q.shape[:-1], -1)


def self_attention_unprojected(x, w_q, w_k, w_v, *, unprojected):  # hunt 5: bare errors
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return _attention(q, x if unprojected == "k" else k, x if unprojected == "v" else v)


HUNT5_SLIPS = [
    (
        "ex02.distance_biased_attention",
        functools.partial(biased_half_way, slip="plain output"),
        "your weights carry the bias but your output does not",
    ),
    (
        "ex02.distance_biased_attention",
        functools.partial(biased_half_way, slip="plain weights"),
        "your output carries the bias but the weights you return do not",
    ),
    (
        "ex02.distance_biased_attention",
        lambda q, k, v, slope: _biased(
            q, k, v, slope, (_positions(q, k)[0] - _positions(q, k)[1]).abs(), v.shape[-1] ** 0.5
        ),
        "you scaled by sqrt(d_v)",
    ),
    (
        "ex02.distance_biased_attention",
        lambda q, k, v, slope: _biased(
            q,
            k,
            v,
            slope,
            (_positions(q, k)[0] + k.shape[-2] - q.shape[-2] - _positions(q, k)[1]).abs(),
            math.sqrt(q.shape[-1]),
        ),
        "you placed the queries at the last n_q positions",
    ),
    (SDPA, attention_in_float32, "right only to float32's digits"),
    (SDPA, attention_through_a_view, "reshape, not view"),
    (
        "ex02.self_attention",
        functools.partial(self_attention_unprojected, unprojected="k"),
        "your keys are x itself",
    ),
    (
        "ex02.self_attention",
        functools.partial(self_attention_unprojected, unprojected="v"),
        "your values are x itself",
    ),
    (
        "ex02.self_attention",
        lambda x, w_q, w_k, w_v: _attention(x @ w_v, x @ w_k, x @ w_q),
        "the queries and values are swapped",
    ),
]


@pytest.mark.parametrize(
    "task_id, fn, hint", HUNT5_SLIPS, ids=lambda m: str(getattr(m, "__name__", ""))
)
def test_hunt5_slips_fail_in_the_notebook_with_their_hint(task_id, fn, hint):
    test_next_slips_fail_in_the_notebook_with_their_hint(task_id, fn, hint)


# ---------------------------- hunt 6: an assistant's float32 scale; correct answers in other idioms


def torch_sqrt_scale(q, k):  # what assistants write: a float32 root, whatever the inputs' dtype
    return torch.sqrt(torch.tensor(k.size(-1)))


HUNT6_SLIPS = [
    (SDPA, lambda q, k, v: _attention_f32(q, k, v)),
    ("ex02.self_attention", lambda x, w_q, w_k, w_v: _attention_f32(x @ w_q, x @ w_k, x @ w_v)),
    (
        "ex02.distance_biased_attention",
        lambda q, k, v, slope: _biased(
            q,
            k,
            v,
            slope,
            (_positions(q, k)[0] - _positions(q, k)[1]).abs(),
            torch_sqrt_scale(q, k),
        ),
    ),
]


def _attention_f32(q, k, v):
    return _biased(q, k, v, 0.0, 0.0, torch_sqrt_scale(q, k))


@pytest.mark.parametrize("task_id, fn", HUNT6_SLIPS, ids=[s[0] for s in HUNT6_SLIPS])
def test_a_float32_scale_fails_in_the_notebook_and_is_named(task_id, fn):
    test_next_slips_fail_in_the_notebook_with_their_hint(task_id, fn, "your scale is a float32")


def biased_by_cdist(q, k, v, slope):  # correct: the distances as an L1 cdist, the scale on q
    i, j = (torch.arange(n, dtype=q.dtype)[:, None] for n in (q.shape[-2], k.shape[-2]))
    q = q / math.sqrt(q.shape[-1])
    return _biased(q, k, v, slope, torch.cdist(i, j, p=1), 1.0)


def attention_broadcast_sum(q, k, v):  # correct: products broadcast and summed, no matmul
    weights = softmax_max((q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1) / q.shape[-1] ** 0.5)
    return (weights.unsqueeze(-1) * v.unsqueeze(-3)).sum(-2), weights


def self_attention_fused(x, w_q, w_k, w_v):  # correct: one product with the three matrices cat'ed
    widths = [w.shape[1] for w in (w_q, w_k, w_v)]
    q, k, v = (x @ torch.cat([w_q, w_k, w_v], -1)).split(widths, -1)
    return attention_transpose(q, k, v)


@pytest.mark.parametrize(
    "task_id, fn",
    [
        ("ex02.distance_biased_attention", biased_by_cdist),
        (SDPA, attention_broadcast_sum),
        ("ex02.self_attention", self_attention_fused),
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 5])
def test_hunt6_correct_idioms_pass_under_every_seed(task_id, fn, seed, monkeypatch):
    import course_lib.grading

    monkeypatch.setattr(course_lib.grading, "NOTEBOOK_SEED", seed)
    r = result(task_id, fn)
    assert r.score == r.max_score, r.feedback


def softmax_with_an_epsilon(x, dim=-1):  # an assistant's guard against a zero sum
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / (e.sum(dim=dim, keepdim=True) + 1e-6)


def test_an_epsilon_in_the_softmax_sum_is_named():
    # sixth hunt: 'None of the usual single mistakes' on the float64 case
    test_next_slips_fail_in_the_notebook_with_their_hint(
        "ex02.softmax", softmax_with_an_epsilon, "an epsilon added to the sum"
    )


def attention_returning_the_scores(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return softmax_max(scores) @ v, scores  # the slip: the weights are softmax(scores)


def test_returning_the_scores_for_the_weights_is_named():
    # sixth hunt: 'None of the usual single mistakes'
    test_next_slips_fail_in_the_notebook_with_their_hint(
        SDPA, attention_returning_the_scores, "the second result is the weights"
    )


# ---------------------------- hunt 7: ALiBi with a decoder's mask; distances cut from (n_k, n_k)


def biased_hunt7(q, k, v, slope, *, slip):
    i, j = _positions(q, k)
    if slip == "square from the keys":  # right while n_q <= n_k
        i = j[:, None][: q.shape[-2]]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) - slope * (i - j).abs()
    if slip == "causal mask":  # the predict cell's 'decoders' read as: mask the later keys
        scores = scores.masked_fill(j > i, float("-inf"))
    weights = softmax_max(scores)
    return weights @ v, weights


@pytest.mark.parametrize(
    "slip, hint",
    [("causal mask", "you masked the keys after each"), ("square from the keys", "n_q > n_k")],
)
def test_hunt7_distance_slips_are_named(slip, hint):
    # seventh hunt: 'None of the usual single mistakes' and a bare RuntimeError before
    fn = functools.partial(biased_hunt7, slip=slip)
    test_next_slips_fail_in_the_notebook_with_their_hint("ex02.distance_biased_attention", fn, hint)


def test_self_attention_squeezed_fails_on_one_sentence():
    # seventh hunt: full marks before (no case had a batch of one)
    def self_attention(x, w_q, w_k, w_v):
        output, weights = _attention(x @ w_q, x @ w_k, x @ w_v)
        return output.squeeze(), weights.squeeze()

    test_next_slips_fail_in_the_notebook_with_their_hint(
        "ex02.self_attention", self_attention, "the batch axis of one sentence"
    )


def test_attention_with_a_causal_mask_is_named():
    # seventh hunt: 'None of the usual single mistakes' (an assistant's GPT-style attention)
    def attention(q, k, v):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        future = torch.triu(torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool), diagonal=1)
        weights = softmax_max(scores.masked_fill(future, float("-inf")))
        return weights @ v, weights

    test_next_slips_fail_in_the_notebook_with_their_hint(SDPA, attention, "a causal mask")


def test_a_softmax_computed_in_float32_is_named():
    # seventh hunt: 'None of the usual single mistakes' on the float64 case
    def softmax(x, dim=-1):
        e = (x - x.amax(dim=dim, keepdim=True)).float().exp()
        return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)

    hint = "float32's digits"
    test_next_slips_fail_in_the_notebook_with_their_hint("ex02.softmax", softmax, hint)


# ---------------------------- hunt F11: a fresh learner's slips (f02)


@pytest.mark.parametrize(
    "task_id, fn, seed",
    [
        (SDPA, HUNT6_SLIPS[0][1], seed)
        for seed in (4, 16, 17)  # full marks under these hidden seeds before (d_k = 6)
    ]
    + [
        ("ex02.self_attention", HUNT6_SLIPS[1][1], seed)
        for seed in (1, 4, 5)  # full marks under these hidden seeds before (d_k = 3)
    ],
)
def test_a_float32_scale_fails_under_every_seed(task_id, fn, seed, monkeypatch):
    import course_lib.grading

    monkeypatch.setattr(course_lib.grading, "NOTEBOOK_SEED", seed)
    r = result(task_id, fn)
    assert r.score < r.max_score and "your scale is a float32" in r.feedback, r.feedback


def self_attention_naive_softmax(x, w_q, w_k, w_v):  # full marks before: no large scores
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)
    return weights @ v, weights


def softmax_clamped(x, dim=-1):  # a guard against overflow that changes the values
    e = x.clamp(-80, 80).exp()
    return e / e.sum(dim=dim, keepdim=True)


def attention_d_k_from_shape_2(q, k, v):
    return _attn(q, k, v, 1 / math.sqrt(q.shape[2]))


def attention_by_bmm(q, k, v):  # the right transpose, but bmm takes 3-D tensors only
    weights = softmax_max(torch.bmm(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1]))
    return torch.bmm(weights, v), weights


def attention_by_mm(q, k, v):
    weights = softmax_max(torch.mm(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1]))
    return torch.mm(weights, v), weights


def attention_naive_softmax(q, k, v):  # exp written inline instead of task 1's softmax
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = scores.exp() / scores.exp().sum(-1, keepdim=True)
    return weights @ v, weights


def self_attention_keys_transposed(x, w_q, w_k, w_v):  # K^T passed, as the formula reads
    return attention_transpose(x @ w_q, (x @ w_k).transpose(-2, -1), x @ w_v)


def biased_with_dot_t(q, k, v, slope):  # the lesson's 2-D `k.T`
    i, j = _positions(q, k)
    scores = q @ k.T / math.sqrt(q.shape[-1]) - slope * (i - j).abs()
    weights = softmax_max(scores)
    return weights @ v, weights


def biased_with_keys_counted_twice(q, k, v, slope):
    j = torch.arange(k.shape[-2], dtype=q.dtype)
    return _biased(q, k, v, slope, (j[:, None] - j).abs(), math.sqrt(q.shape[-1]))


def biased_with_queries_from_1(q, k, v, slope):
    i = torch.arange(1, q.shape[-2] + 1, dtype=q.dtype)[:, None]
    j = torch.arange(k.shape[-2], dtype=q.dtype)
    return _biased(q, k, v, slope, (i - j).abs(), math.sqrt(q.shape[-1]))


def biased_by_a_decay_of_the_weights(q, k, v, slope):
    i, j = _positions(q, k)
    weights = softmax_max(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    weights = weights * torch.exp(-slope * (i - j).abs())
    return weights @ v, weights


F11_SLIPS = [
    ("ex02.self_attention", self_attention_naive_softmax, "exp of large scores overflows"),
    ("ex02.softmax", softmax_clamped, "you clamped x before exp"),
    (SDPA, attention_d_k_from_shape_2, "you took d_k from shape[2]"),
    (SDPA, attention_by_bmm, "torch.bmm multiplies 3-D tensors only"),
    (SDPA, attention_by_mm, "torch.mm multiplies 2-D matrices only"),
    (SDPA, attention_naive_softmax, "exp of large scores overflows"),
    ("ex02.self_attention", self_attention_keys_transposed, "you passed the keys transposed"),
    ("ex02.distance_biased_attention", biased_with_dot_t, "`.T` transposes only 2-D"),
    ("ex02.distance_biased_attention", biased_with_keys_counted_twice, "with n_q = q.shape[-2]"),
    ("ex02.distance_biased_attention", biased_with_queries_from_1, "positions from 1"),
    ("ex02.distance_biased_attention", biased_by_a_decay_of_the_weights, "exp(-slope * |i - j|)"),
]


@pytest.mark.parametrize("task_id, fn, hint", F11_SLIPS, ids=[m[1].__name__ for m in F11_SLIPS])
def test_f11_slips_fail_in_the_notebook_with_their_hint(task_id, fn, hint):
    # a bare error or 'None of the usual single mistakes' before; the naive softmax in
    # self_attention had full marks
    test_next_slips_fail_in_the_notebook_with_their_hint(task_id, fn, hint)


# ---- d12: answers whose values are right but whose gradient is cut or bent -------------------


def _d12_softmax(slip=""):
    def softmax(x, dim=-1):
        e = (x - x.amax(dim=dim, keepdim=True)).exp()
        if slip == "in-place division":
            e /= e.sum(dim=dim, keepdim=True)
            return e
        total = e.sum(dim=dim, keepdim=True)
        return e / (total.detach() if slip == "sum detached" else total)

    return softmax


def _d12_attention(slip=""):
    def attention(q, k, v):
        weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
        return (weights.detach() if slip == "weights detached" else weights) @ v, weights

    return attention


def _d12_self_attention(slip=""):
    def self_attention(x, w_q, w_k, w_v):
        w_q = w_q.detach() if slip == "w_q detached" else w_q
        return _d12_attention()(x @ w_q, x @ w_k, x @ w_v)

    return self_attention


def _d12_biased(slip=""):
    def distance_biased_attention(q, k, v, slope):
        n_q, n_k = q.shape[-2], k.shape[-2]
        distance = (torch.arange(n_q)[:, None] - torch.arange(n_k)[None, :]).abs()
        q = q.detach() if slip == "q detached" else q
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) - slope * distance.to(q.dtype)
        weights = scores.softmax(dim=-1)
        return weights @ v, weights

    return distance_biased_attention


@pytest.mark.parametrize(
    "task_id, make, slip, words",
    [
        ("ex02.softmax", _d12_softmax, "sum detached", "its gradient with respect to x is not"),
        ("ex02.softmax", _d12_softmax, "in-place division", "back-propagating through it raised"),
        ("ex02.scaled_dot_product_attention", _d12_attention, "weights detached", "reaches q, k"),
        ("ex02.self_attention", _d12_self_attention, "w_q detached", "no gradient reaches w_q"),
        ("ex02.distance_biased_attention", _d12_biased, "q detached", "no gradient reaches q"),
    ],
)
def test_d12_a_cut_gradient_fails_where_the_values_alone_passed(task_id, make, slip, words):
    # each slip had full marks: the checks compared the outputs only, never their gradients
    assert check_result(task_id, make()).score == 1.0
    result = check_result(task_id, make(slip))
    assert result.status == "failed" and words in result.feedback, result.feedback


# ---- f02, second fresh reader: a shift by the first entry; hidden seeds


def softmax_shifted_by_the_first_entry(x, dim=-1):  # 'any constant cancels': not the maximum
    e = (x - x.select(dim, 0).unsqueeze(dim)).exp()
    return e / e.sum(dim=dim, keepdim=True)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_shift_by_the_first_entry_fails_under_every_seed(seed, monkeypatch):
    # full marks in the notebook (seed 0) and under about half the grader's seeds before: the
    # spread row's first entry was random, and within 88 of the row's maximum half the time
    import course_lib.grading

    monkeypatch.setattr(course_lib.grading, "NOTEBOOK_SEED", seed)
    r = result("ex02.softmax", softmax_shifted_by_the_first_entry)
    assert r.score < r.max_score and "the first entry of each slice" in r.feedback, r.feedback


def test_a_numpy_softmax_is_told_it_carries_no_gradients():
    # before: 'back-propagating through it raised RuntimeError: Can't call numpy() ... Hint: an
    # in-place operation (+=, *=, ...)', a hint naming the wrong mistake (the statement says no
    # NumPy, and PyTorch's own message suggests .detach().numpy(), which cuts the gradient too)
    def softmax(x, dim=-1):
        a = x.numpy()
        e = np.exp(a - a.max(axis=dim, keepdims=True))
        return torch.from_numpy(e / e.sum(axis=dim, keepdims=True))

    r = result("ex02.softmax", softmax)
    assert r.score == 0 and "NumPy" in r.feedback and "in-place" not in r.feedback, r.feedback
    assert ".detach().numpy()" not in r.feedback, r.feedback  # PyTorch's advice cuts it too


# ---- L14: float16 inside a softmax, an integer root for the scale, dropout on the weights ----


def _l14_softmax(x, dim=-1, *, slip=""):
    shifted = x - x.amax(dim=dim, keepdim=True)
    if slip == "half throughout":  # every step in float16, cast back at the end
        e = shifted.half().exp()
        return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)
    if slip == "half exp":  # exp in float16, the division in x's dtype
        e = shifted.half().exp().to(x.dtype)
        return e / e.sum(dim=dim, keepdim=True)
    e = shifted.half().exp()  # "half, not cast back": a float16 result
    return e / e.sum(dim=dim, keepdim=True)


def _l14_attention(q, k, v, *, slip=""):
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / (math.isqrt(d_k) if slip == "isqrt" else math.sqrt(d_k))
    weights = scores.softmax(dim=-1)
    if slip == "F.dropout 0.1":
        weights = F.dropout(weights, p=0.1)
    elif slip == "F.dropout default":  # p=0.5
        weights = F.dropout(weights)
    elif slip == "nn.Dropout 0.2":
        weights = nn.Dropout(0.2)(weights)
    elif slip == "dropped weights, output only":  # L15: the weights returned undropped
        return F.dropout(weights, p=0.1) @ v, weights
    elif slip == "nn.Dropout on the output":
        return nn.Dropout(0.1)(weights @ v), weights
    return weights @ v, weights


L14_SLIPS = [
    ("ex02.softmax", functools.partial(_l14_softmax, slip="half exp"), "went through float16"),
    ("ex02.softmax", functools.partial(_l14_softmax, slip="half throughout"), "through float16"),
    ("ex02.softmax", functools.partial(_l14_softmax, slip="half, not cast back"), "no .half()"),
    (SDPA, functools.partial(_l14_attention, slip="isqrt"), "math.isqrt(d_k) is the integer"),
    (SDPA, functools.partial(_l14_attention, slip="F.dropout 0.1"), "dropped at random"),
    (SDPA, functools.partial(_l14_attention, slip="F.dropout default"), "dropped at random"),
    (SDPA, functools.partial(_l14_attention, slip="nn.Dropout 0.2"), "dropped at random"),
    # L15: 'None of the usual single mistakes' before
    *[
        (SDPA, functools.partial(_l14_attention, slip=slip), "your output went through a dropout")
        for slip in ("dropped weights, output only", "nn.Dropout on the output")
    ],
]


def _l14_graded(task_id, fn, seed):
    import course_lib.grading as grading

    grading.NOTEBOOK_SEED = seed  # the batch grader's hidden seed, with the notebook's feedback
    try:
        return result(task_id, fn)
    finally:
        grading.NOTEBOOK_SEED = 0


@pytest.mark.parametrize(
    "task_id, fn, hint", L14_SLIPS, ids=[m[1].keywords["slip"] for m in L14_SLIPS]
)
def test_l14_slips_are_named_and_fail_under_every_seed(task_id, fn, hint):
    # before: 'None of the usual single mistakes' (or 'your values do not sum to 1', or the
    # generic dtype hint, which names .float() and .double() but not .half())
    for seed in (0, 1, 2, 3, 4, 5):
        r = _l14_graded(task_id, fn, seed)
        assert r.status == "failed" and r.score < r.max_score, (seed, r.feedback)
        assert hint in r.feedback, (seed, r.feedback)


def _softmax_by_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim, keepdim=True))


def _softmax_in_float64(x, dim=-1):  # more digits on the way, x's dtype at the end
    y = x.double()
    e = (y - y.amax(dim=dim, keepdim=True)).exp()
    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)


def _attention_right(q, k, v, *, variant):
    d_k = q.shape[-1]
    if variant == "q scaled first":
        scores = (q / math.sqrt(d_k)) @ k.mT
    else:
        scores = q @ k.transpose(-2, -1) / d_k**0.5
    weights = scores.softmax(dim=-1)
    if variant == "dropout p=0":
        weights = F.dropout(weights, p=0.0)
    if variant == "dropout off":
        weights = F.dropout(weights, p=0.1, training=False)
    return weights @ v, weights


L14_RIGHT = [
    ("ex02.softmax", _softmax_by_logsumexp),
    ("ex02.softmax", _softmax_in_float64),
    *[
        (SDPA, functools.partial(_attention_right, variant=v))
        for v in ("** 0.5", "q scaled first", "dropout p=0", "dropout off")
    ],
]


@pytest.mark.parametrize(
    "task_id, fn",
    L14_RIGHT,
    ids=["logsumexp", "float64 inside", "** 0.5", "q scaled first", "dropout p=0", "dropout off"],
)
def test_l14_right_variants_keep_full_marks(task_id, fn):
    for seed in (0, 1, 2, 3, 4, 5):
        r = _l14_graded(task_id, fn, seed)
        assert r.status == "passed", (seed, r.feedback)


# ---- L16: two independent dropouts, and dropouts inside self-attention ----


def _l16_self_attention(x, w_q, w_k, w_v, *, slip=""):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = (q @ k.mT / math.sqrt(q.shape[-1])).softmax(dim=-1)
    if slip == "dropout on the weights":
        weights = F.dropout(weights, p=0.1)
    elif slip == "dropout on the output":
        return F.dropout(weights @ v, p=0.1), weights
    elif slip == "nn.Dropout on the output, p=0.2":
        return nn.Dropout(0.2)(weights @ v), weights
    elif slip == "dropped weights, output only":
        return F.dropout(weights, p=0.1) @ v, weights
    elif slip == "two dropouts":
        return F.dropout(weights, p=0.1) @ v, F.dropout(weights, p=0.1)
    elif slip == "dropout p=0":  # right: nothing is dropped
        weights = F.dropout(weights, p=0.0)
    elif slip == "nn.Dropout in eval mode":  # right: nothing is dropped
        weights = nn.Dropout(0.1).eval()(weights)
    elif slip == "einsum":  # right
        scores = torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5
        weights = scores.softmax(dim=-1)
    return weights @ v, weights


def _l16_two_dropouts(q, k, v, *, slip):
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    if slip == "nn.Dropout twice":
        drop = nn.Dropout(0.1)
        return drop(weights) @ v, drop(weights)
    return F.dropout(weights, p=0.1) @ v, F.dropout(weights, p=0.1)


SELF = "ex02.self_attention"
TWO = "two separate dropouts"
L16_SLIPS = [
    (SDPA, functools.partial(_l16_two_dropouts, slip="F.dropout twice"), TWO),
    (SDPA, functools.partial(_l16_two_dropouts, slip="nn.Dropout twice"), TWO),
    (SELF, functools.partial(_l16_self_attention, slip="two dropouts"), TWO),
    (SELF, functools.partial(_l16_self_attention, slip="dropout on the weights"), "dropped at"),
    *[
        (SELF, functools.partial(_l16_self_attention, slip=slip), "output went through a dropout")
        for slip in (
            "dropout on the output",
            "nn.Dropout on the output, p=0.2",
            "dropped weights, output only",
        )
    ],
]


@pytest.mark.parametrize(
    "task_id, fn, hint", L16_SLIPS, ids=[m[1].keywords["slip"] for m in L16_SLIPS]
)
def test_l16_dropouts_are_named_under_every_seed(task_id, fn, hint):
    # before: 'None of the usual single mistakes' (self-attention's check drew no seeded mask
    # and had no dropout rows; the attention's second, independent draw matched no row)
    for seed in (0, 1, 2, 3, 4, 5):
        r = _l14_graded(task_id, fn, seed)
        assert r.status == "failed" and r.score < r.max_score, (seed, r.feedback)
        assert hint in r.feedback, (seed, r.feedback)


@pytest.mark.parametrize("slip", ["dropout p=0", "nn.Dropout in eval mode", "einsum"])
def test_l16_right_self_attention_variants_keep_full_marks(slip):
    for seed in (0, 1, 2, 3, 4, 5):
        r = _l14_graded(SELF, functools.partial(_l16_self_attention, slip=slip), seed)
        assert r.status == "passed", (seed, r.feedback)


# ---- H17: a distance bias kept between calls; a residual added inside self-attention ----


def _h17_distance_attention(q, k, v, slope, *, slip, cache):
    n_q, n_k = q.shape[-2], k.shape[-2]
    distance = (torch.arange(n_q)[:, None] - torch.arange(n_k)).abs().to(q.dtype)
    if slip == "bias cached by shape":  # ALiBi's bias built once per (n_q, n_k)
        if (n_q, n_k) not in cache:
            cache[(n_q, n_k)] = -slope * distance
        bias = cache[(n_q, n_k)]
    elif slip == "cached with the slope in the key":  # right
        bias = cache.setdefault((n_q, n_k, slope, q.dtype), -slope * distance)
    else:  # "slope squared"
        bias = -(slope**2) * distance
    weights = (q @ k.mT / math.sqrt(q.shape[-1]) + bias).softmax(dim=-1)
    return weights @ v, weights


@pytest.mark.parametrize("slip", ["bias cached by shape", "slope squared"])
def test_h17_a_bias_with_another_slope_is_named(slip):
    # before: 'None of the usual single mistakes' (the cached bias kept the slope 0.75 of the
    # (2, 3, 4, 16) case for the slope-0 case of the same (n_q, n_k))
    for seed in (0, 1, 2, 3):
        fn = functools.partial(_h17_distance_attention, slip=slip, cache={})
        r = _l14_graded("ex02.distance_biased_attention", fn, seed)
        assert r.status == "failed" and r.score < r.max_score, (seed, r.feedback)
        assert "per step of distance, but this call's slope is" in r.feedback, (seed, r.feedback)
    assert (
        "penalty of 0.75 per step of distance, but this call's slope is 0.0"
        in result(
            "ex02.distance_biased_attention",
            functools.partial(_h17_distance_attention, slip="bias cached by shape", cache={}),
        ).feedback
    )


def test_h17_a_bias_cached_with_its_slope_keeps_full_marks():
    for seed in (0, 1, 2, 3):
        fn = functools.partial(
            _h17_distance_attention, slip="cached with the slope in the key", cache={}
        )
        assert _l14_graded("ex02.distance_biased_attention", fn, seed).status == "passed"


def _h17_self_attention_residual(x, w_q, w_k, w_v, *, guarded):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = (q @ k.mT / math.sqrt(q.shape[-1])).softmax(dim=-1)
    output = weights @ v
    if guarded and output.shape != x.shape:
        return output, weights
    return output + x, weights  # a residual connection, as around attention in a layer


@pytest.mark.parametrize("guarded", [False, True], ids=["x + output", "x + output when it fits"])
def test_h17_a_residual_in_self_attention_is_named(guarded):
    # before: a bare RuntimeError (x (5, 8) + output (5, 6)), or 'None of the usual single
    # mistakes' on the square case when the sum was made only where the shapes fit
    for seed in (0, 1, 2, 3):
        fn = functools.partial(_h17_self_attention_residual, guarded=guarded)
        r = _l14_graded(SELF, fn, seed)
        assert r.status == "failed" and r.score < r.max_score, (seed, r.feedback)
        assert "you added x to the output (a residual connection" in r.feedback, (seed, r.feedback)


def _h17_attention_dim_2(q, k, v, *, how):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if how == "own softmax":
        weights = softmax_max(scores, dim=2)  # (batch, n_q, n_k): the keys are axis 2
    elif how == "torch.softmax":
        weights = torch.softmax(scores, dim=2)
    else:  # "nn.Softmax"
        weights = nn.Softmax(dim=2)(scores)
    return weights @ v, weights


DIM_2 = "dim=2 is the keys' axis only for 3-D scores"


@pytest.mark.parametrize("how", ["own softmax", "torch.softmax", "nn.Softmax"])
def test_h17_a_softmax_over_dim_2_is_named(how):
    # before: a bare IndexError on the 2-D case (Dimension out of range ... got 2)
    fn = functools.partial(_h17_attention_dim_2, how=how)
    r = result(SDPA, fn)
    assert r.status == "failed" and DIM_2 in r.feedback, r.feedback

    def self_attention(x, w_q, w_k, w_v):
        return fn(x @ w_q, x @ w_k, x @ w_v)

    r = result(SELF, self_attention)
    assert r.status == "failed" and "the attention step is not: " + DIM_2 in r.feedback, r.feedback


def _h17_shifted_softmax(scores, how):
    if how == "scores.max()":
        scores = scores - scores.max()  # the whole tensor's maximum
    elif how == "the row's mean":
        scores = scores - scores.mean(dim=-1, keepdim=True)
    else:  # "the row's minimum"
        scores = scores - scores.amin(dim=-1, keepdim=True)
    e = scores.exp()
    return e / e.sum(dim=-1, keepdim=True)


def _h17_shifted_attention(q, k, v, slope=None, *, how):
    n_q, n_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if slope is not None:  # the distance-biased task
        scores = scores - slope * (torch.arange(n_q)[:, None] - torch.arange(n_k)).abs().to(q.dtype)
    weights = _h17_shifted_softmax(scores, how)
    return weights @ v, weights


@pytest.mark.parametrize("how", ["scores.max()", "the row's mean", "the row's minimum"])
def test_h17_an_inline_softmax_shifted_by_another_number_is_named(how):
    # before: 'your result[0] contains NaN where the expected result has none', with no hint
    fn = functools.partial(_h17_shifted_attention, how=how)

    def self_attention(x, w_q, w_k, w_v):
        return fn(x @ w_q, x @ w_k, x @ w_v)

    distance = "ex02.distance_biased_attention"
    for task_id, attention in [(SDPA, fn), (SELF, self_attention), (distance, fn)]:
        for seed in (0, 1, 2):
            r = _l14_graded(task_id, attention, seed)
            assert r.status == "failed", (task_id, seed, r.feedback)
            assert "Subtract each row's maximum, scores.amax(dim=-1" in r.feedback, r.feedback


# ---- H18: an axis moved "back" by the same movedim; an einsum that names three axes ----


def _h18_softmax_moved(x, dim=-1, *, back):
    moved = x.movedim(dim, -1)  # the axis to normalise, last
    e = (moved - moved.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).movedim(*back)


def test_h18_an_axis_moved_back_by_the_same_movedim_fails_and_is_named():
    # before: full marks in the notebook and under every seed (each case with a dim was 2-D or
    # had dim next to last, where movedim(dim, -1) is a swap and undoes itself)
    def wrong(x, dim=-1):
        return _h18_softmax_moved(x, dim, back=(dim, -1))  # .movedim(dim, -1) once more

    def right(x, dim=-1):
        return _h18_softmax_moved(x, dim, back=(-1, dim))

    for seed in (0, 1, 2, 3):
        r = _l14_graded("ex02.softmax", wrong, seed)
        assert r.status == "failed" and r.score < r.max_score, (seed, r.feedback)
        assert "and back with the same call" in r.feedback, (seed, r.feedback)
        assert _l14_graded("ex02.softmax", right, seed).status == "passed", seed


def _h18_attention_einsum(q, k, v):
    scores = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(q.shape[-1])
    weights = softmax_max(scores)
    return torch.einsum("bqk,bkv->bqv", weights, v), weights


def test_h18_an_einsum_for_3d_inputs_only_is_named():
    # before: a bare RuntimeError from einsum on the 2-D and 4-D cases, with no hint
    hint = "your einsum names exactly three axes ('bqd,bkd->bqk')"
    r = result(SDPA, _h18_attention_einsum)
    assert r.status == "failed" and hint in r.feedback, r.feedback

    def self_attention(x, w_q, w_k, w_v):
        return _h18_attention_einsum(x @ w_q, x @ w_k, x @ w_v)

    r = result(SELF, self_attention)
    assert r.status == "failed" and "the attention step is not: " + hint in r.feedback, r.feedback


@pytest.mark.parametrize("cut", ["detach", "no_grad"])
def test_attention_weights_returned_without_their_graph_fail(cut):
    # #hunt19: the gradient check differentiates the output only, so weights.detach() (or
    # weights made under torch.no_grad() beside an output made again with gradients) passed
    def attention(q, k, v):
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        if cut == "detach":
            return weights @ v, weights.detach()
        with torch.no_grad():
            shown = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        return weights @ v, shown

    assert result("ex02.scaled_dot_product_attention", attention_transpose).status == "passed"
    got = result("ex02.scaled_dot_product_attention", attention)
    assert got.status == "failed", got.feedback
    assert "the attention weights you return carry no gradient" in got.feedback, got.feedback


# ---------------------------- hunt 19 (h02c): a fresh learner's slips in the attention steps


def _h19c_attention(q, k, v, *, slip):
    if slip == "k.reshape(..., d_k, n_k)":  # regroups the numbers: not a transpose
        scores = q @ k.reshape(*k.shape[:-2], k.shape[-1], k.shape[-2])
    elif slip == "k.view(d_k, -1)":
        scores = q @ k.view(k.shape[-1], -1)
    elif slip == "einsum 'id,jd->ij'":  # the lesson's 2-D shapes, written as an einsum
        scores = torch.einsum("id,jd->ij", q, k)
    elif slip == "q^T k":  # q_i^T k_j read as a product of whole matrices
        scores = q.transpose(-2, -1) @ k
    else:
        scores = q @ k.transpose(-2, -1)
    weights = softmax_max(scores / math.sqrt(q.shape[-1]))
    return weights @ v, weights


def _h19c_self_attention(x, w_q, w_k, w_v, *, slip):
    project = {
        "einsum 'bnd,de->bne'": lambda w: torch.einsum("bnd,de->bne", x, w),
        "einsum 'nd,de->ne'": lambda w: torch.einsum("nd,de->ne", x, w),
        "torch.mm(x, w)": lambda w: torch.mm(x, w),
        "torch.bmm with w expanded": lambda w: torch.bmm(x, w.expand(x.shape[0], *w.shape)),
    }.get(slip, lambda w: x @ w)
    return _h19c_attention(project(w_q), project(w_k), project(w_v), slip=slip)


_H19C_NOT_A_TRANSPOSE = "is not a transpose"
_H19C_EINSUM_2D = "your einsum names exactly two axes"
_H19C_Q_T_K = "the transpose belongs on the keys"
_H19C_PROJECTION = "your projection works only for"
H19C_SLIPS = [
    (SDPA, "k.reshape(..., d_k, n_k)", _H19C_NOT_A_TRANSPOSE),
    (SDPA, "k.view(d_k, -1)", _H19C_NOT_A_TRANSPOSE),
    (SDPA, "einsum 'id,jd->ij'", _H19C_EINSUM_2D),
    (SDPA, "q^T k", _H19C_Q_T_K),
    (SELF, "k.reshape(..., d_k, n_k)", _H19C_NOT_A_TRANSPOSE),
    (SELF, "einsum 'id,jd->ij'", _H19C_EINSUM_2D),
    (SELF, "q^T k", _H19C_Q_T_K),
    (SELF, "einsum 'bnd,de->bne'", _H19C_PROJECTION),
    (SELF, "einsum 'nd,de->ne'", _H19C_PROJECTION),
    (SELF, "torch.mm(x, w)", _H19C_PROJECTION),
    (SELF, "torch.bmm with w expanded", _H19C_PROJECTION),
]


@pytest.mark.parametrize(
    "task_id, slip, hint", H19C_SLIPS, ids=[f"{t.split('.')[1]}-{s}" for t, s, _ in H19C_SLIPS]
)
def test_h19c_attention_slips_are_named_under_every_seed(task_id, slip, hint):
    # before: a reshape or view for the transpose got 'None of the usual single mistakes';
    # the 2-D einsum, q^T k and the projections by einsum, mm or bmm a bare RuntimeError
    make = _h19c_attention if task_id == SDPA else _h19c_self_attention
    learner = functools.partial(make, slip=slip)
    for seed in (0, 1, 2):
        r = _l14_graded(task_id, learner, seed)
        assert r.status == "failed" and r.score < r.max_score, (seed, r.feedback)
        assert hint in r.feedback, (seed, r.feedback)
    assert _l14_graded(task_id, functools.partial(make, slip="right"), 0).status == "passed"


def _h19c_attention_more(q, k, v, *, slip):
    if slip == "k.swapaxes(1, 2)":  # NumPy's name for transpose(1, 2)
        k_t = k.swapaxes(1, 2)
    else:
        k_t = k.transpose(-2, -1)
    scores = q @ k_t / math.sqrt(q.shape[-1])
    if slip == "softmax with dtype=torch.float32":  # an upcast copied without the cast back
        weights = F.softmax(scores, dim=-1, dtype=torch.float32)
    elif slip == "scores.float()":
        weights = softmax_max(scores.float())
    else:
        weights = softmax_max(scores)
    return weights @ v, weights


H19C_MORE = [
    (SDPA, "k.swapaxes(1, 2)", "k.swapaxes(1, 2) (NumPy's name for k.transpose(1, 2))"),
    (SDPA, "softmax with dtype=torch.float32", "your weights are float32"),
    (SDPA, "scores.float()", "your weights are float32"),
    (SELF, "k.swapaxes(1, 2)", "k.swapaxes(1, 2) (NumPy's name for k.transpose(1, 2))"),
    (SELF, "softmax with dtype=torch.float32", "your weights are float32"),
]


@pytest.mark.parametrize(
    "task_id, slip, hint", H19C_MORE, ids=[f"{t.split('.')[1]}-{s}" for t, s, _ in H19C_MORE]
)
def test_h19c_more_attention_crashes_are_named_under_every_seed(task_id, slip, hint):
    # before: a bare IndexError (k.swapaxes(1, 2) on the 2-D case, though k.transpose(1, 2) had
    # a hint) and a bare 'expected scalar type Float but found Double' (float32 weights @ v)
    def learner(*args):
        if task_id == SDPA:
            return _h19c_attention_more(*args, slip=slip)
        x, w_q, w_k, w_v = args
        return _h19c_attention_more(x @ w_q, x @ w_k, x @ w_v, slip=slip)

    for seed in (0, 1, 2):
        r = _l14_graded(task_id, learner, seed)
        assert r.status == "failed" and r.score < r.max_score, (seed, r.feedback)
        assert "your code raised" in r.feedback and hint in r.feedback, (seed, r.feedback)


def _h19c_biased(q, k, v, slope, *, slip):
    i, j = _positions(q, k)
    d_k = q.shape[-1]
    if slip == "k @ q^T":  # the square cases hide the order: only the values differ there
        raw = k @ q.transpose(-2, -1)
    elif slip == "k.transpose(1, 2)":
        raw = q @ k.transpose(1, 2)
    else:
        raw = q @ k.transpose(-2, -1)
    scale = {
        "/ d_k": d_k,
        "/ d_k ** 1/2": d_k**1 / 2,
        "/ (d_k ** 1/2) written unbracketed": 2 * d_k,  # scores / d_k ** 1/2
        "* sqrt(d_k)": 1 / math.sqrt(d_k),
    }.get(slip, math.sqrt(d_k))
    scores = raw / scale - slope * (i - j).abs()
    weights = softmax_max(scores)
    return weights @ v, scores if slip == "scores returned" else weights


H19C_BIASED = [
    ("k @ q^T", "one row per key: k @ q^T"),
    ("k.transpose(1, 2)", "k.transpose(1, 2) (like torch.bmm) assumes exactly one batch axis"),
    ("/ d_k", "you divided by d_k; divide by its square root"),
    ("/ d_k ** 1/2", "** binds tighter than /"),
    ("/ (d_k ** 1/2) written unbracketed", "** binds tighter than /"),
    ("* sqrt(d_k)", "you multiplied the scores by sqrt(d_k); divide them by it"),
    ("scores returned", "the second result is the weights"),
]


@pytest.mark.parametrize("slip, hint", H19C_BIASED, ids=[s for s, _ in H19C_BIASED])
def test_h19c_attention_slips_in_the_biased_attention_are_named(slip, hint):
    # before: 'None of the usual single mistakes gives this result' for each, but
    # k.transpose(1, 2), told "`.T` transposes only 2-D tensors" (its crash on the 4-D case is
    # the one k.T has there)
    learner = functools.partial(_h19c_biased, slip=slip)
    for seed in (0, 1, 2):
        r = _l14_graded("ex02.distance_biased_attention", learner, seed)
        assert r.status == "failed" and r.score < r.max_score, (seed, r.feedback)
        assert hint in r.feedback, (seed, r.feedback)
    right = functools.partial(_h19c_biased, slip="right")
    assert _l14_graded("ex02.distance_biased_attention", right, 0).status == "passed"


@pytest.mark.parametrize("leftover", [4, 8, 16, 64])
def test_h19c_a_d_k_read_from_the_notebooks_globals_is_named(leftover):
    # before: d_k = 4 left by an earlier cell got 'math.isqrt(d_k) is the integer square root'
    # (3/8), d_k = 16 'you divided by d_k' (2/8), d_k = 64 '`d_k ** 1/2` is `(d_k ** 1) / 2`'
    # (1/8), d_k = 8 'None of the usual single mistakes'; the biased attention likewise
    namespace = {"math": math, "torch": torch, "d_k": leftover}
    exec(  # noqa: S102  (a notebook's functions: their globals are the notebook's)
        "def scaled_dot_product_attention(q, k, v):\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)\n"
        "    weights = torch.softmax(scores, dim=-1)\n"
        "    return weights @ v, weights\n"
        "def distance_biased_attention(q, k, v, slope):\n"
        "    i = torch.arange(q.shape[-2], dtype=q.dtype)[:, None]\n"
        "    j = torch.arange(k.shape[-2], dtype=q.dtype)\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k) - slope * (i - j).abs()\n"
        "    weights = torch.softmax(scores, dim=-1)\n"
        "    return weights @ v, weights\n",
        namespace,
    )
    hint = f"your code reads d_k = {leftover} from the notebook's variables"
    biased = "ex02.distance_biased_attention"
    for task_id, name in [
        (SDPA, "scaled_dot_product_attention"),
        (biased, "distance_biased_attention"),
    ]:
        for seed in (0, 1):
            r = _l14_graded(task_id, namespace[name], seed)
            assert r.status == "failed" and r.score < r.max_score, (seed, r.feedback)
            assert hint in r.feedback and "q.shape[-1]" in r.feedback, (seed, r.feedback)


def test_h19c_a_length_read_from_the_notebooks_globals_is_named():
    # before: n = 5 left by an earlier cell, used for both lengths of the distances, got a bare
    # 'RuntimeError: The size of tensor a (6) must match the size of tensor b (5)' (2/9)
    namespace = {"math": math, "torch": torch, "n": 5}
    exec(  # noqa: S102
        "def distance_biased_attention(q, k, v, slope):\n"
        "    i = torch.arange(n, dtype=q.dtype)\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    weights = torch.softmax(scores - slope * (i[:, None] - i).abs(), dim=-1)\n"
        "    return weights @ v, weights\n",
        namespace,
    )
    r = result("ex02.distance_biased_attention", namespace["distance_biased_attention"])
    assert r.status == "failed" and "your code reads n = 5 from" in r.feedback, r.feedback
    assert "this call's q has shape (2, 3, 4)" in r.feedback, r.feedback
