"""ex05 (masking): the references pass, every named mistake fails with its hint, alternative
correct implementations pass, forbidden calls and stubs are recognised."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import scaled_dot_product_attention
from course_lib.grading import check_result
from course_lib.grading.core import get_task
from course_lib.masking import causal_mask, padding_mask

TASKS = ["ex05.causal_mask", "ex05.padding_mask", "ex05.masked_attention"]
REFERENCES = {
    "ex05.causal_mask": causal_mask,
    "ex05.padding_mask": padding_mask,
    "ex05.masked_attention": scaled_dot_product_attention,
}


def _strip_reference(fn):
    """A copy of a reference with its own code object, so the grader does not see the reference."""
    import inspect
    import types

    fn = inspect.unwrap(fn)  # the function itself, not the decorator's wrapper
    code = fn.__code__.replace(co_name=fn.__name__ + "_copy")
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


@pytest.mark.parametrize("task_id", TASKS)
def test_reference_logic_passes(task_id):
    result = check_result(task_id, _strip_reference(REFERENCES[task_id]))
    assert result.status == "passed", result.feedback


@pytest.mark.parametrize("task_id", TASKS)
def test_calling_the_reference_is_forbidden(task_id):
    result = check_result(task_id, REFERENCES[task_id])
    assert result.status == "forbidden"


# Mistakes written independently of the task's own list (as a learner would write them).
def causal_upper(n):
    return torch.triu(torch.ones(n, n)).bool()


def causal_strict(n):
    return torch.arange(n).unsqueeze(1) > torch.arange(n).unsqueeze(0)


def causal_float(n):
    return (torch.arange(n).unsqueeze(1) >= torch.arange(n).unsqueeze(0)).float()


def padding_inverted(ids, pad_id):
    return ids.eq(pad_id)[:, None, :]


def padding_flat(ids, pad_id):
    return ids.ne(pad_id)


def attention_zero_after(q, k, v, mask):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    weights = scores.softmax(-1) * mask
    return weights @ v, weights


def attention_fill_zero(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    weights = torch.where(mask, scores, torch.zeros_like(scores)).softmax(-1)
    return weights @ v, weights


def attention_nan_rows(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    weights = torch.where(mask, scores, torch.full_like(scores, -math.inf)).softmax(-1)
    return weights @ v, weights


def attention_softmax_over_queries(q, k, v, mask):
    # a reviewer's slip: the softmax over dim -2, NaN rows then zeroed
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, -math.inf)
    weights = torch.nan_to_num(torch.softmax(scores, dim=-2))
    return weights @ v, weights


@pytest.mark.parametrize(
    "task_id,wrong,words",
    [
        ("ex05.causal_mask", causal_upper, "upper triangle"),
        ("ex05.causal_mask", causal_strict, "diagonal is missing"),
        ("ex05.causal_mask", causal_float, "must be a bool tensor"),
        ("ex05.padding_mask", padding_inverted, "inverted"),
        ("ex05.padding_mask", padding_flat, "middle dimension is missing"),
        ("ex05.masked_attention", attention_zero_after, "without renormalising"),
        ("ex05.masked_attention", attention_fill_zero, "filled the masked scores with 0"),
        ("ex05.masked_attention", attention_nan_rows, "0/0 = NaN"),
        ("ex05.masked_attention", attention_softmax_over_queries, "over dim=-2 each key's column"),
    ],
)
def test_independent_mistakes_get_the_right_hint(task_id, wrong, words):
    result = check_result(task_id, wrong)
    assert result.status == "failed", result.feedback
    assert words in result.feedback


# Alternative correct implementations.
def causal_by_comparison(n):
    positions = torch.arange(n)
    return positions.unsqueeze(1) >= positions.unsqueeze(0)  # key j <= query i


def causal_by_loop(n):
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        mask[i, : i + 1] = True
    return mask


def padding_by_indexing(ids, pad_id):
    return ids.ne(pad_id)[:, None, :]


def padding_by_view(ids, pad_id):
    return (ids != pad_id).view(ids.shape[0], 1, ids.shape[1])


def attention_einsum_where(q, k, v, mask):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    scores = torch.where(mask, scores, torch.tensor(-math.inf, dtype=scores.dtype))
    row_max = scores.amax(-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exp = (scores - row_max).exp()  # exp(-inf) = 0 exactly
    total = exp.sum(-1, keepdim=True)
    weights = exp / torch.where(total > 0, total, torch.ones_like(total))
    return torch.einsum("...qk,...kd->...qd", weights, v), weights


def attention_large_negative_then_zero(q, k, v, mask):
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    weights = weights * mask.any(-1, keepdim=True)  # fully masked rows -> 0
    return weights @ v, weights


def attention_float64_path(q, k, v, mask):
    out, weights = attention_einsum_where(q.double(), k.double(), v.double(), mask)
    return out.to(q.dtype), weights.to(q.dtype)


@pytest.mark.parametrize(
    "task_id,impl",
    [
        ("ex05.causal_mask", causal_by_comparison),
        ("ex05.causal_mask", causal_by_loop),
        ("ex05.padding_mask", padding_by_indexing),
        ("ex05.padding_mask", padding_by_view),
        ("ex05.masked_attention", attention_einsum_where),
        ("ex05.masked_attention", attention_large_negative_then_zero),
        ("ex05.masked_attention", attention_float64_path),
    ],
)
def test_alternative_correct_implementations_pass(task_id, impl):
    result = check_result(task_id, impl)
    assert result.status == "passed", result.feedback


def attention_with_torch(q, k, v, mask):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return out, scores.masked_fill(~mask, -math.inf).softmax(-1).nan_to_num(0.0)


def attention_with_module(q, k, v, mask):
    torch.nn.MultiheadAttention(q.shape[-1], 1)
    return attention_einsum_where(q, k, v, mask)


@pytest.mark.parametrize(
    "impl,name",
    [
        (attention_with_torch, "scaled_dot_product_attention"),
        (attention_with_module, "MultiheadAttention"),
    ],
)
def test_forbidden_calls(impl, name):
    result = check_result("ex05.masked_attention", impl)
    assert result.status == "forbidden"
    assert name in result.feedback


@pytest.mark.parametrize("task_id", TASKS)
def test_stub_is_not_implemented(task_id):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    assert check_result(task_id, stub).status == "not implemented"


def test_cases_cover_what_exercises_md_asks():
    gen = torch.Generator().manual_seed(0)
    cases = get_task("ex05.masked_attention").cases(gen)
    dtypes = {c.args[0].dtype for c in cases}
    assert dtypes == {torch.float32, torch.float64}
    assert any(c.args[0].shape[-2] != c.args[1].shape[-2] for c in cases)  # n_q != n_k
    assert any(c.args[3].dim() == 2 for c in cases)  # (n_q, n_k) mask
    assert any(c.args[3].dim() == 3 and c.args[3].shape[1] == 1 for c in cases)  # (batch, 1, n_k)
    fully_masked = [c for c in cases if not c.args[3].any(-1).all()]
    assert len(fully_masked) >= 2
    for case in fully_masked:
        out, weights = scaled_dot_product_attention(*case.args)
        assert not out.isnan().any() and not weights.isnan().any()


# ---- found by a fresh reader: wrong answers that passed -------------------------------------


def test_nan_gradients_through_a_fully_masked_row_fail():
    # -inf added to every score of the row, then nan_to_num: the output is right, but the
    # backward pass carries the NaN of the all -inf softmax into q and k
    def additive_mask(q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        add = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores + add, dim=-1))
        return weights @ v, weights

    result = check_result("ex05.masked_attention", additive_mask)
    assert result.status == "failed", result.feedback
    assert "the gradients through a fully masked row are NaN" in result.feedback


def test_a_mask_built_from_lengths_fails_on_left_padding():
    def from_lengths(ids, pad_id):
        lengths = (ids != pad_id).sum(1, keepdim=True)
        return (torch.arange(ids.shape[1]) < lengths).unsqueeze(1)

    result = check_result("ex05.padding_mask", from_lengths)
    assert result.status == "failed" and "assumes the padding comes last" in result.feedback


# ---- #33: slips a learner makes, written as a learner would; each gets its own hint ---------


def _causal_tril_1(n):
    return torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def _causal_additive(n):
    return torch.triu(torch.full((n, n), float("-inf")), diagonal=1)


def _attention_output_before_zeroing(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)
    output = weights @ v
    weights = weights.masked_fill(~mask, 0.0)  # too late for the output
    return output, weights


def _attention_any_without_keepdim(q, k, v, mask):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
    any_key = mask.any(dim=-1)
    weights = torch.softmax(scores.masked_fill(~any_key, 0.0), dim=-1).masked_fill(~mask, 0.0)
    return weights @ v, weights


def _prefix_lm(pad_id_used=None, causal=lambda query, key: key <= query, last=0):
    def prefix_lm_mask(ids, prefix_lengths, pad_id):
        seq = ids.shape[1]
        if (prefix_lengths < 0).any() or (prefix_lengths > seq - last).any():
            raise ValueError("prefix_lengths must lie in [0, seq]")
        pad = pad_id if pad_id_used is None else pad_id_used
        query, key = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
        allowed = (key < prefix_lengths[:, None, None]) | causal(query, key)
        real = ids != pad
        return allowed & real[:, None, :]

    return prefix_lm_mask


def _prefix_lm_one_axis_short(ids, prefix_lengths, pad_id, causal_first=False):
    seq = ids.shape[1]
    if (prefix_lengths < 0).any() or (prefix_lengths > seq).any():
        raise ValueError("prefix_lengths must lie in [0, seq]")
    keys = torch.arange(seq)
    in_prefix = keys < prefix_lengths[:, None]  # (batch, seq): one None short
    causal = keys[None, :] <= keys[:, None]  # (seq, seq)
    allowed = (causal | in_prefix) if causal_first else (in_prefix | causal)
    return allowed & (ids != pad_id)[:, None, :]


def _prefix_lm_padding_on_both_axes(ids, prefix_lengths, pad_id):
    real = ids != pad_id
    return _prefix_lm()(ids, prefix_lengths, pad_id) & real[:, :, None]


_BLOCK = torch.ones(16, 16, dtype=torch.bool).tril()  # built once, as a GPT's buffer


def _causal_from_a_block(n):
    return _BLOCK[:n, :n]


def _prefix_lm_padding_from_lengths(ids, prefix_lengths, pad_id):
    seq = ids.shape[1]
    if (prefix_lengths < 0).any() or (prefix_lengths > seq).any():
        raise ValueError("prefix_lengths must lie in [0, seq]")
    query, key = torch.arange(seq)[:, None], torch.arange(seq)
    lengths = (ids != pad_id).sum(-1)  # the real tokens, assumed first
    real = key < lengths[:, None]
    return ((key < prefix_lengths[:, None, None]) | (key <= query)) & real[:, None, :]


def _attention_softmax_by_hand_without_max(q, k, v, mask, nan_to_num=False):
    # exp / (sum + eps) gives an empty row zeros, but exp(200) is inf in float32: it passed
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
    e = scores.exp()
    if nan_to_num:  # exp / sum, then lesson 05's torch.nan_to_num for the empty rows
        weights = torch.nan_to_num(e / e.sum(dim=-1, keepdim=True))
    else:
        weights = e / (e.sum(dim=-1, keepdim=True) + 1e-9)
    return weights @ v, weights


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex05.masked_attention", _attention_softmax_by_hand_without_max, "overflows float32"),
        ("ex05.causal_mask", _causal_tril_1, "tril(1) keeps one diagonal above"),
        ("ex05.causal_mask", _causal_additive, "additive float mask"),
        ("ex05.causal_mask", _causal_from_a_block, "a block_size table sliced"),
        ("ex05.prefix_lm_mask", _prefix_lm_padding_from_lengths, "assumes the padding comes last"),
        ("ex05.masked_attention", _attention_output_before_zeroing, "two right steps"),
        ("ex05.masked_attention", _attention_any_without_keepdim, "keepdim=True"),
        ("ex05.prefix_lm_mask", _prefix_lm(pad_id_used=0), "compared with 0"),
        ("ex05.prefix_lm_mask", _prefix_lm_one_axis_short, "prefix_lengths[:, None, None]"),
        ("ex05.prefix_lm_mask", _prefix_lm_padding_on_both_axes, "neither instead nor as well"),
    ],
)
def test_a_learners_slip_fails_the_notebook_check_with_its_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback, result.feedback


# ---- hunt 2: slips written as a learner would; each failed generically or passed before -----


def _attention(scale=None, k_t=lambda k: k.transpose(-2, -1), index=False, cut=None):
    """A learner's masked attention; each argument other than the default is one slip."""

    def masked_attention(q, k, v, mask):
        scores = q @ k_t(k) / (math.sqrt(q.shape[-1]) if scale is None else scale(q))
        if index:
            scores[~mask] = float("-inf")
        else:
            scores = scores.masked_fill(~mask, float("-inf"))
        any_key = mask.any(dim=-1, keepdim=True)
        weights = torch.softmax(scores.masked_fill(~any_key, 0.0), -1).masked_fill(~mask, 0.0)
        output = weights @ v
        return (output if cut is None else cut(output)), weights

    return masked_attention


def _attention_output_from_unmasked_weights(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    output = torch.softmax(scores, dim=-1) @ v  # a first try, kept by mistake
    weights = _attention()(q, k, v, mask)[1]
    return output, weights


def _attention_renormalised(q, k, v, mask):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) * mask
    weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-12)
    return weights @ v, weights


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex05.masked_attention", _attention(scale=lambda q: q.size(-1) ** 1 / 2), "binds tighter"),
        ("ex05.masked_attention", _attention(k_t=lambda k: k.transpose(1, 2)), "heads axis"),
        ("ex05.masked_attention", _attention(index=True), "does not broadcast"),
        ("ex05.masked_attention", _attention(scale=lambda q: q.size(2) ** 0.5), "shape[2]"),
        ("ex05.masked_attention", _attention(scale=lambda q: q.size(1) ** 0.5), "shape[1]"),
        ("ex05.masked_attention", _attention(scale=lambda q: q.size(-1) ** -0.5), "multiplied"),
        ("ex05.masked_attention", _attention(cut=torch.Tensor.detach), "carries no gradient"),
        ("ex05.masked_attention", _attention_renormalised, "underflow to 0"),
        ("ex05.masked_attention", _attention_output_from_unmasked_weights, "weights are right"),
        ("ex05.causal_mask", lambda n: torch.ones(n, n, dtype=torch.uint8).tril(), "not uint8"),
        ("ex05.padding_mask", lambda ids, pad_id: (ids != pad_id).int()[:, None], "not int32"),
        ("ex05.prefix_lm_mask", _prefix_lm(causal=lambda q, k: k >= q), "upper triangle"),
    ],
)
def test_hunt2_slips_fail_the_notebook_check_with_their_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback, result.feedback


def test_hunt2_learner_without_a_slip_passes():
    assert check_result("ex05.masked_attention", _attention()).status == "passed"
    assert check_result("ex05.prefix_lm_mask", _prefix_lm()).status == "passed"


# ---- hunt 3: a fresh reader's slips that got a hint for another slip or none ----------------


def _attention_hunt3(q, k, v, mask, slip):
    k_t = k.T if slip == "k.T" else k.transpose(-2, -1)
    weights = torch.softmax((q @ k_t / math.sqrt(q.shape[-1])).masked_fill(~mask, -math.inf), -1)
    if slip == "weights[nan] = 0":  # in place on the softmax's output: backward cannot run
        weights[weights.isnan()] = 0.0
    else:
        weights = torch.nan_to_num(weights)
    return weights @ v, weights


@pytest.mark.parametrize(
    "slip, words",
    [
        ("k.T", "k.T reverses every axis"),  # a bare broadcast error
        ("weights[nan] = 0", "changes in place a tensor"),  # autograd's own error, every case
    ],
)
def test_hunt3_attention_slips_get_their_own_hint(slip, words):
    result = check_result(
        "ex05.masked_attention", lambda q, k, v, mask: _attention_hunt3(q, k, v, mask, slip)
    )
    assert result.status == "failed", result.feedback
    assert words in result.feedback, result.feedback


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        # 'the rows that have at least one allowed key must sum to 1': not what went wrong
        (
            "ex05.masked_attention",
            lambda q, k, v, mask: _attention_softmax_by_hand_without_max(q, k, v, mask, True),
            "nan_to_num turned those NaN into zero weights",
        ),
        # `P > seq - 1` rejected the allowed P = seq: 'your code raised ValueError', no hint
        ("ex05.prefix_lm_mask", _prefix_lm(last=1), "raise only when P < 0 or P > seq"),
        # causal | in_prefix names the sizes the other way round: a bare PyTorch error
        (
            "ex05.prefix_lm_mask",
            lambda ids, lengths, pad_id: _prefix_lm_one_axis_short(ids, lengths, pad_id, True),
            "prefix_lengths[:, None, None]",
        ),
    ],
)
def test_hunt3_slips_fail_the_notebook_check_with_their_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback, result.feedback


# ex05.dependency_matrix: learners' ways to write it, and their slips


def dependency_by_jacobian(f, x):
    """A correct learner who asks autograd instead of changing inputs."""
    if x.dim() != 3:
        raise ValueError(f"x must be (batch, seq, d), got {x.dim()} dimensions")
    jacobian = torch.autograd.functional.jacobian(f, x)  # (batch, seq, d_out, batch, seq, d)
    return jacobian.abs().amax(dim=(0, 2, 3, 5)) > 0


def dependency_by_changes(f, x, slip=""):
    """The lesson's test in a loop, position by position, with `slip` written in."""
    if x.dim() != 3:
        raise ValueError(f"x must be (batch, seq, d), got {x.dim()} dimensions")
    seq = x.shape[1]
    if slip == "one row at a time":  # f called on a batch of one
        f = (lambda g: lambda t: torch.cat([g(row[None]) for row in t]))(f)
    before = f(x)
    result = torch.zeros(seq, seq, dtype=torch.bool)
    for j in range(seq):
        y = x if slip == "in place" else x.clone()  # "in place": the changes stay in x
        if slip == "times two":
            y[:, j] = y[:, j] * 2
        elif slip == "zeroed":
            y[:, j] = 0.0
        elif slip == "first feature":
            y[:, j, 0] += 1.0
        elif slip == "plus one":  # the same amount in every feature
            y[:, j] += 1.0
        elif slip == "plus a tenth":
            y[:, j] += 0.1
        elif slip == "first row":
            y[0, j] += torch.randn(x.shape[2], dtype=x.dtype)
        else:
            y[:, j] += torch.randn(x.shape[0], x.shape[2], dtype=x.dtype)
        after = f(y)
        for i in range(seq):
            rows = slice(0, 1) if slip == "first row" else slice(None)
            moved = not torch.allclose(after[rows, i], before[rows, i])
            if slip == "summed features":  # one number per output position
                moved = not torch.allclose(after[:, i].sum(-1), before[:, i].sum(-1))
            if slip == "signed":  # (after - before) > tol: only the outputs that went up
                moved = bool(((after[:, i] - before[:, i]) > 1e-6).any())
            if slip == "every feature":  # moved only when all of its features moved
                moved = bool((after[rows, i] != before[rows, i]).all())
            result[(j, i) if slip == "transposed" else (i, j)] = moved or (
                slip == "diagonal" and i == j
            )
    return result.int() if slip == "int" else result


@pytest.mark.parametrize("learner", [dependency_by_jacobian, dependency_by_changes])
def test_dependency_matrix_by_autograd_or_by_changes_passes(learner):
    result = check_result("ex05.dependency_matrix", learner)
    assert result.status == "passed", result.feedback


def test_dependency_matrix_hidden_probes_do_not_saturate(monkeypatch):
    """Hunt 4: with seed 12 a probe's softmax was near one-hot in float32, so a tiny dependency
    (gradient 1e-9) counted or not by chance: autograd and the lesson's atol=1e-6 both failed."""
    import course_lib.grading

    monkeypatch.setattr(course_lib.grading, "NOTEBOOK_SEED", 12)
    for learner in (dependency_by_jacobian, dependency_by_changes):
        result = check_result("ex05.dependency_matrix", learner)
        assert result.status == "passed", result.feedback


def test_dependency_matrix_signed_gradient_sum_fails_the_notebook_check():
    """Hunt 4: summing signed gradients cancels on an f blind to adding one number to every
    feature; it passed seed 0 by rounding noise and failed most hidden seeds.

    Which case fails first depends on the CPU: where the centred case's gradient sums round to
    exactly 0 (seen on an AMD EPYC, AVX2) that case names the signed sum; where they leave
    rounding noise (seen on an Intel Xeon, AVX-512) it passes and the case whose two output
    features cancel fails next, with its own hint on the sum over features. Either way the
    answer fails and is told that summing over features is the mistake."""

    def learner(f, x):
        if x.dim() != 3:
            raise ValueError(f"x must be (batch, seq, d), got {x.dim()} dimensions")
        return torch.autograd.functional.jacobian(f, x).sum(dim=(0, 2, 3, 5)) != 0

    result = check_result("ex05.dependency_matrix", learner)
    assert result.status == "failed", result.feedback
    assert "not a signed sum" in result.feedback or (
        "output feature 1 is minus feature 0" in result.feedback
        and "compare every feature of an output, not their sum" in result.feedback
    ), result.feedback


def test_hunt6_gradient_of_each_outputs_summed_features_fails():
    """Hunt 6: autograd on y[:, i].sum(), one gradient per output position, got full marks;
    its output features can cancel (here feature 1 is minus feature 0)."""

    def learner(f, x):
        if x.dim() != 3:
            raise ValueError(f"x must be (batch, seq, d), got {x.dim()} dimensions")
        x = x.detach().clone().requires_grad_(True)
        y = f(x)
        rows = [
            torch.autograd.grad(y[:, i].sum(), x, retain_graph=True)[0] for i in range(x.shape[1])
        ]
        return torch.stack([(g != 0).any(-1).any(0) for g in rows])

    result = check_result("ex05.dependency_matrix", learner)
    assert result.status == "failed" and "not their sum" in result.feedback, result.feedback


@pytest.mark.parametrize(
    "slip, words",
    [
        ("times two", "multiplying position j"),
        ("zeroed", "setting it to 0"),
        ("first feature", "change every feature"),
        ("plus one", "different amount to each feature"),
        ("plus a tenth", "torch.randn(d)"),
        ("first row", "every batch row"),
        ("transposed", "yours is the transpose"),
        ("every feature", "not .all"),
        ("diagonal", "test the diagonal"),
        ("in place", "changed its input `x` in place"),
        ("one row at a time", "holds a mask for each of 2 batch rows"),
        ("int", "return a bool tensor, True = depends"),
        ("summed features", "not their sum"),  # hunt 6: passed every check before
    ],
)
def test_dependency_matrix_slips_get_their_own_hint(slip, words):
    result = check_result("ex05.dependency_matrix", lambda f, x: dependency_by_changes(f, x, slip))
    assert result.status == "failed"
    assert words in result.feedback, result.feedback


def test_dependency_matrix_reads_the_lessons_masks():
    """The finished version: a causal mask gives the lower triangle, the lesson's inverted mask
    the pattern lesson 05 describes (row 4 reads key 5 alone, row 5 nothing), x unchanged."""
    from course_lib.masking import dependency_matrix
    from course_lib.multihead import MultiHeadAttention

    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    kept = x.clone()
    causal = dependency_matrix(lambda t: attention(t, t, t, mask=causal_mask(6))[0], x)
    assert torch.equal(causal, causal_mask(6))
    inverted = dependency_matrix(lambda t: attention(t, t, t, mask=~causal_mask(6))[0], x)
    want = ~causal_mask(6) | torch.eye(6, dtype=torch.bool)
    want[4, 4] = False  # one key gets weight 1 whatever the query
    want[5] = False  # no key at all: the output is the projection's bias alone
    assert torch.equal(inverted, want)
    assert torch.equal(x, kept)
    with pytest.raises(ValueError, match="3 dimensions"):
        dependency_matrix(lambda t: t, torch.zeros(6, 8))


def test_hunt4_output_cleaned_but_weights_nan_is_not_told_its_outputs_are_right():
    # hunt 4: nan_to_num on the output only; the weights keep the NaN of the fully masked row.
    # Before: 'your outputs are right, but the gradients ... are NaN'; the weights were not right
    def output_cleaned(q, k, v, mask):
        scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return torch.nan_to_num(weights @ v), weights

    result = check_result("ex05.masked_attention", output_cleaned)
    assert result.status == "failed", result.feedback
    assert "your outputs are right" not in result.feedback, result.feedback
    assert "your weights contain NaN" in result.feedback, result.feedback


@pytest.mark.parametrize("cut", ["detach", "no_grad", "tensor"])
def test_hunt4_weights_cut_from_q_and_k_fail(cut):
    # hunt 4: full marks before (the output still had a gradient, through v), though no
    # gradient reached q or k: the statement asks for the gradients of q, k and v
    def cleaned(q, k, v, mask):
        with torch.no_grad() if cut == "no_grad" else torch.enable_grad():
            scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
            weights = torch.nan_to_num(torch.softmax(scores.masked_fill(~mask, -math.inf), -1))
        weights = weights.detach() if cut == "detach" else weights
        if cut == "tensor":
            weights = torch.tensor(weights.tolist(), dtype=q.dtype)
        return weights @ v, weights

    result = check_result("ex05.masked_attention", cleaned)
    assert result.status == "failed" and result.score == 0, result.feedback
    assert "no gradient back to q and k" in result.feedback, result.feedback


def test_hunt4_a_prefix_length_of_0_rejected_is_not_called_p_equal_to_seq():
    # hunt 4: `P <= 0` rejected the allowed P = 0 and was told 'a prefix length equal to seq'
    def no_empty_prefix(ids, prefix_lengths, pad_id):
        if (prefix_lengths <= 0).any() or (prefix_lengths > ids.shape[1]).any():
            raise ValueError(f"prefix lengths must be in [1, seq], got {prefix_lengths.tolist()}")
        return _prefix_lm()(ids, prefix_lengths, pad_id)

    result = check_result("ex05.prefix_lm_mask", no_empty_prefix)
    assert result.status == "failed", result.feedback
    assert "P = 0 (a causal row)" in result.feedback, result.feedback


def test_hunt4_a_mask_given_an_axis_for_heads_gets_a_hint():
    # hunt 4: mask.unsqueeze(1) (lesson 03's (batch, 1, 1, n_k)) got a bare broadcasting error
    def heads_axis(q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        weights = torch.softmax(scores.masked_fill(~mask.unsqueeze(1), -math.inf), dim=-1)
        return torch.nan_to_num(weights) @ v, torch.nan_to_num(weights)

    result = check_result("ex05.masked_attention", heads_axis)
    assert result.status == "failed", result.feedback
    assert "use it as it is" in result.feedback, result.feedback


def _attention_by_hand_plus_eps(q, k, v, mask):  # the 1e-9 keeps a fully masked row at 0
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = torch.exp(scores - scores.max(-1, keepdim=True).values) * mask
    weights = e / (e.sum(-1, keepdim=True) + 1e-9)
    return weights @ v, weights


def test_hunt5_an_eps_in_the_row_sums_is_named():  # got "None of the usual single mistakes"
    result = check_result("ex05.masked_attention", _attention_by_hand_plus_eps)
    assert result.status == "failed" and "1e-9 added to the row sums" in result.feedback


def _causal_by_rows_from_1(n):  # the loop starts at 1, as if row 0 had nothing to attend to
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(1, n):
        mask[i, : i + 1] = True
    return mask


def test_hunt5_a_causal_loop_from_row_1_is_named():  # got "None of the usual single mistakes"
    result = check_result("ex05.causal_mask", _causal_by_rows_from_1)
    assert result.status == "failed" and "must start at i = 0" in result.feedback, result.feedback


def test_hunt6_a_fully_masked_row_let_attend_every_key_is_told_so():
    # hunt 6: "some masked positions get non-zero weight: block them before the softmax" before,
    # though every partly masked row was blocked; only the fully masked row read every key
    def learner(q, k, v, mask):
        mask = mask | ~mask.any(-1, keepdim=True)  # "so that no row is all -inf"
        scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, -math.inf)
        weights = scores.softmax(-1)
        return weights @ v, weights

    result = check_result("ex05.masked_attention", learner)
    assert result.status == "failed" and "only your fully masked rows" in result.feedback


def test_hunt6_a_signed_comparison_is_told_a_change_counts_either_way():
    # hunt 6: (after - before) > tol got "None of the usual single mistakes"; it misses an output
    # only when the learner's own random change moved it down in every feature, so by chance
    outcomes = []
    for seed in range(5):
        torch.manual_seed(seed)
        result = check_result(
            "ex05.dependency_matrix", lambda f, x: dependency_by_changes(f, x, "signed")
        )
        outcomes.append(result.status)
        assert result.status == "passed" or "moves in either direction" in result.feedback
    assert "failed" in outcomes


# Hunt F11 (a fresh learner's slips, each got generic or misleading feedback before).
def _attention_by_d_k(q, k, v, mask):  # the root forgotten: scores / d_k
    scores = (q @ k.transpose(-2, -1) / q.shape[-1]).masked_fill(~mask, -math.inf)
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ v, weights


def _attention_swapped(q, k, v, mask):  # (weights, output): the return order of another API
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, -math.inf)
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights, weights @ v


def _attention_exp_times_mask(q, k, v, mask):  # exp by hand, no max: exp(200) * 0 = NaN
    e = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) * mask
    weights = e / e.sum(-1, keepdim=True).clamp_min(1e-12)
    return weights @ v, weights


@pytest.mark.parametrize(
    "learner,words",
    [  # before: "None of the usual single mistakes"; a shape only; "a fully masked row needs..."
        (_attention_by_d_k, "you divided the scores by d_k"),
        (_attention_swapped, "the return order is swapped"),
        (_attention_exp_times_mask, "overflows to inf"),
    ],
)
def test_f05_attention_slips_get_their_own_hint(learner, words):
    result = check_result("ex05.masked_attention", learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


def test_f05_an_additive_mask_is_told_why_its_gradients_are_nan():
    # to_additive's 0/-inf mask added to the scores: the outputs are right, but the addition
    # passes the NaN of a fully masked row back into q and k; the hint spoke of masked_fill only
    def learner(q, k, v, mask):
        additive = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, -math.inf)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + additive
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
        return weights @ v, weights

    result = check_result("ex05.masked_attention", learner)
    assert result.status == "failed" and "adding a 0/-inf mask" in result.feedback


def _prefix_padding_or_ed_before(ids, prefix_lengths, pad_id):  # (causal & pad) | prefix
    seq = ids.shape[1]
    if (prefix_lengths < 0).any() or (prefix_lengths > seq).any():
        raise ValueError(f"prefix lengths must be in [0, {seq}]")
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    prefix = torch.arange(seq)[None, None, :] < prefix_lengths[:, None, None]
    return (causal & (ids != pad_id)[:, None, :]) | prefix


def _prefix_block_set_after_padding(ids, prefix_lengths, pad_id):  # a loop, the same order
    seq = ids.shape[1]
    if (prefix_lengths < 0).any() or (prefix_lengths > seq).any():
        raise ValueError(f"prefix lengths must be in [0, {seq}]")
    mask = torch.ones(seq, seq, dtype=torch.bool).tril() & (ids != pad_id)[:, None, :]
    for row, length in enumerate(prefix_lengths.tolist()):
        mask[row, :length, :length] = True
    return mask


@pytest.mark.parametrize("learner", [_prefix_padding_or_ed_before, _prefix_block_set_after_padding])
def test_f05_a_prefix_let_in_after_the_padding_is_named(learner):
    # before: "None of the usual single mistakes" on the case whose prefix covers padding
    result = check_result("ex05.prefix_lm_mask", learner)
    assert result.status == "failed" and "wrong order" in result.feedback, result.feedback


def _attention_float32_root(q, k, v, mask):  # a tutorial's idiom: the root as a float32 tensor
    scale = torch.sqrt(torch.tensor(q.shape[-1], dtype=torch.float32))
    scores = (q @ k.transpose(-2, -1) / scale).masked_fill(~mask, -math.inf)
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ v, weights


def _attention_cast_to_float32(q, k, v, mask):  # .float() "for stability", on float64 inputs
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).float()
    weights = torch.nan_to_num(torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1))
    return weights @ v.float(), weights


def test_f05_a_float32_root_fails_under_every_seed_with_its_hint():
    # before: full marks under 4 of 30 hidden seeds (9, 13, 20, 27) and, in the notebook, the
    # hint 'your weights are right but your output is not: output = weights @ v'
    from course_lib.grading.core import course_state, judge, learner_namespace, run_cases

    task = get_task("ex05.masked_attention")
    for seed in range(30):
        with course_state():
            cases = task.cases(torch.Generator().manual_seed(seed))
            namespace = learner_namespace(_attention_float32_root)
            run = run_cases(task, _attention_float32_root, cases, namespace)
            result = judge(task, cases, run)
        assert result.status == "failed", seed
    result = check_result("ex05.masked_attention", _attention_float32_root)
    assert "your sqrt(d_k) is a float32 number" in result.feedback, result.feedback


def test_f05_a_float32_cast_is_named():
    # before: 'a tensor you create gets PyTorch's default dtype', a cause the learner did not write
    result = check_result("ex05.masked_attention", _attention_cast_to_float32)
    assert result.status == "failed" and "no .float()" in result.feedback, result.feedback


def test_f05_a_squeezed_padding_mask_is_named():
    # before: 'some masked positions get non-zero weight: block them before the softmax', though
    # the learner does block before the softmax: the squeezed (batch, n_k) mask meets the wrong axes
    def learner(q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~mask.squeeze(), -math.inf)
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
        return weights @ v, weights

    result = check_result("ex05.masked_attention", learner)
    assert result.status == "failed" and "you squeezed the mask" in result.feedback


# ---- d12: an answer whose values are right but whose gradient is cut --------------------------


def test_d12_values_cut_from_the_graph_fail():
    # full marks before: only q and k were followed back, never v (whose projection learns too)
    def v_detached(q, k, v, mask):
        return attention_einsum_where(q, k, v.detach(), mask)

    assert check_result("ex05.masked_attention", attention_einsum_where).score == 1.0
    result = check_result("ex05.masked_attention", v_detached)
    assert result.status == "failed" and "no gradient reaches v" in result.feedback


# ---- f05 (second fresh reader): a signed comparison, a float32 softmax -----------------------


def _dependency_by_changes(moved):
    """dependency_matrix by changed inputs, `moved(after, before)` deciding what counts."""

    def dependency_matrix(f, x):
        if x.dim() != 3:
            raise ValueError(f"x must be (batch, seq, d), got {x.dim()} dimensions")
        before, seq = f(x), x.shape[1]
        result = torch.zeros(seq, seq, dtype=torch.bool)
        for j in range(seq):
            y = x.clone()
            y[:, j] += torch.randn_like(y[:, j])
            result[:, j] = moved(f(y), before).any(-1).any(0)
        return result

    return dependency_matrix


@pytest.mark.parametrize(
    "moved, words",
    [
        # f05: after > before, only the outputs that moved up count. Before: full marks in the
        # notebook (seed 0) and under 38 of 60 hidden seeds: every case had several output
        # features or batch rows, and one of them nearly always moved up
        (lambda after, before: after > before, "moves in either direction"),
        # l14: a loose comparison, isclose(atol=1e-2) takes 1e-3 for nothing. Before: full marks
        # in the notebook and under several hidden seeds (1, 2 and 7 of 0-10): no case had a
        # dependency that moves the outputs by less than 1e-2 every time
        (
            lambda after, before: ~torch.isclose(after, before, atol=1e-2),
            "you missed faint dependencies",
        ),
    ],
    ids=["after > before", "isclose(atol=1e-2)"],
)
def test_a_dependency_slip_fails_under_every_seed_with_its_hint(moved, words):
    from course_lib.grading.core import course_state, judge, learner_namespace, run_cases

    learner = _dependency_by_changes(moved)
    task = get_task("ex05.dependency_matrix")
    for seed in range(8):
        with course_state():
            cases = task.cases(torch.Generator().manual_seed(seed))
            run = run_cases(task, learner, cases, learner_namespace(learner))
            result = judge(task, cases, run)
        assert result.status == "failed", seed
    result = check_result("ex05.dependency_matrix", learner)
    assert words in result.feedback, result.feedback
    assert check_result("ex05.dependency_matrix", _dependency_by_changes(torch.ne)).score == 1.0


def _attention_float32_softmax(q, k, v, mask):  # an upcast habit: softmax in float32, cast back
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, -math.inf)
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).nan_to_num(0.0).to(q.dtype)
    return weights @ v, weights


def test_f05_a_float32_softmax_cast_back_is_named():
    # before: 'None of the usual single mistakes' (the result is float64, off by 3e-7)
    result = check_result("ex05.masked_attention", _attention_float32_softmax)
    assert result.status == "failed" and "softmax ran in float32" in result.feedback, (
        result.feedback
    )


def _padding_up_to_the_first_pad(ids, pad_id):  # real tokens until the first pad, as if last
    is_pad = ids == pad_id
    first = torch.where(is_pad.any(1), is_pad.int().argmax(1), torch.tensor(ids.shape[1]))
    return (torch.arange(ids.shape[1])[None] < first[:, None])[:, None]


def test_f05_a_padding_mask_cut_at_the_first_pad_is_named():
    # before: 'None of the usual single mistakes' on the left-padded case
    result = check_result("ex05.padding_mask", _padding_up_to_the_first_pad)
    assert result.status == "failed" and "first padding token" in result.feedback, result.feedback


# ---- l14: a loose comparison, a mask multiplied in, a fixed-size causal table ------------------


def test_l14_attention_that_multiplies_the_scores_by_the_mask_is_named():
    # before: 'you filled the masked scores with 0', though the learner wrote scores * mask
    def learner(q, k, v, mask):
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) * mask, dim=-1)
        return weights @ v, weights

    result = check_result("ex05.masked_attention", learner)
    assert result.status == "failed" and "scores * mask does that" in result.feedback


def test_l14_weights_multiplied_by_the_mask_after_the_softmax_are_told_what_to_do():
    # before: 'the rows that have at least one allowed key must sum to 1', and nothing more
    def learner(q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        weights = torch.softmax(scores * mask, dim=-1) * mask
        return weights @ v, weights

    result = check_result("ex05.masked_attention", learner)
    assert result.status == "failed" and "multiplying them by the mask" in result.feedback


@pytest.mark.parametrize("size, sliced", [(32, True), (32, False), (8, True)])
def test_l14_a_causal_mask_from_a_fixed_table_of_any_size_is_named(size, sliced):
    # before: only a 16 x 16 table was named; 'your result has shape (32, 32), expected (40, 40)'
    table = torch.ones(size, size, dtype=torch.bool).tril()
    result = check_result("ex05.causal_mask", lambda n: table[:n, :n] if sliced else table)
    assert result.status == "failed" and "a table of a fixed size" in result.feedback, (
        result.feedback
    )


# ---- f5 (hunt F11, set 05): steps grouped otherwise, axes swapped, state kept between calls ----


def _attention_any_blocked(q, k, v, mask):  # (~mask).any(-1) for ~mask.any(-1): ~ grouped first
    empty = (~mask).any(-1, keepdim=True)  # "the rows with no key": every row with one blocked
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, -math.inf)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1) * mask
    return weights @ v, weights


def _attention_mask_transposed(q, k, v, mask):  # mask.mT: the queries and keys swapped
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask.mT, -math.inf)
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ v, weights


def _attention_bool_mask_added(q, k, v, mask):  # the table's "float mask: added", with a bool
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + mask, dim=-1)
    return weights @ v, weights


@pytest.mark.parametrize(
    "learner, words",
    [  # before: 'the rows ... must sum to 1 ... fill the masked scores with -inf before the
        # softmax' (which the learner did); 'some masked positions get non-zero weight: block
        # them before the softmax' (twice: the learner blocked, the wrong axis; or added)
        (_attention_any_blocked, "(~mask).any(-1) is True for every row with ONE blocked key"),
        (_attention_mask_transposed, "you transposed the mask"),
        (_attention_bool_mask_added, "adding the bool mask to the scores"),
    ],
    ids=["(~mask).any", "mask.mT", "scores + mask"],
)
def test_f5_attention_slips_are_named(learner, words):
    result = check_result("ex05.masked_attention", learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


def _prefix_cached_by_shape():
    """prefix_lm_mask whose prefix-and-causal part is kept between calls, keyed on the shape."""
    kept = {}

    def prefix_lm_mask(ids, prefix_lengths, pad_id):
        seq = ids.shape[1]
        if (prefix_lengths < 0).any() or (prefix_lengths > seq).any():
            raise ValueError(f"prefix lengths must be in [0, {seq}]")
        if tuple(ids.shape) not in kept:
            prefix = torch.arange(seq)[None, None, :] < prefix_lengths[:, None, None]
            kept[tuple(ids.shape)] = prefix | torch.ones(seq, seq, dtype=torch.bool).tril()
        return kept[tuple(ids.shape)] & (ids != pad_id)[:, None, :]

    return prefix_lm_mask


def test_f5_a_prefix_mask_kept_between_calls_fails_under_every_seed_with_its_hint():
    # before: full marks in the notebook and under every hidden seed, as the two (2, 6) cases
    # had the same prefix lengths [3, 2]; now the left-padded one has [5, 1]
    from course_lib.grading.core import course_state, judge, learner_namespace, run_cases

    learner = _prefix_cached_by_shape()
    result = check_result("ex05.prefix_lm_mask", learner)
    assert result.status == "failed" and "an earlier call" in result.feedback, result.feedback
    task = get_task("ex05.prefix_lm_mask")
    for seed in range(4):
        with course_state():
            cases = task.cases(torch.Generator().manual_seed(seed))
            fresh = _prefix_cached_by_shape()  # not filled by the notebook's check
            result = judge(task, cases, run_cases(task, fresh, cases, learner_namespace(fresh)))
        assert result.status == "failed", seed


def test_f5_a_prefix_mask_in_one_line_without_brackets_is_told_the_precedence():
    # prefix | causal & real is prefix | (causal & real): the hint spoke of two steps only
    def learner(ids, prefix_lengths, pad_id):
        seq = ids.shape[1]
        if (prefix_lengths < 0).any() or (prefix_lengths > seq).any():
            raise ValueError(f"prefix lengths must be in [0, {seq}]")
        prefix = torch.arange(seq)[None, None, :] < prefix_lengths[:, None, None]
        return prefix | torch.ones(seq, seq, dtype=torch.bool).tril() & (ids != pad_id)[:, None]

    result = check_result("ex05.prefix_lm_mask", learner)
    assert result.status == "failed" and "& binds tighter than |" in result.feedback


def test_f5_a_causal_loop_one_row_short_is_named():  # got "None of the usual single mistakes"
    def learner(n):
        mask = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n - 1):
            mask[i, : i + 1] = True
        return mask

    result = check_result("ex05.causal_mask", learner)
    assert result.status == "failed" and "range(n - 1)" in result.feedback, result.feedback


def test_f5_a_padding_mask_with_the_1_in_front_is_named():  # got a shape message only
    result = check_result("ex05.padding_mask", lambda ids, pad_id: (ids != pad_id).unsqueeze(0))
    assert result.status == "failed" and "the 1 is in front" in result.feedback, result.feedback


def test_f5_a_dependency_matrix_that_tests_only_the_lower_triangle_is_named():
    # before: 'you missed dependencies ... an output that moves in either direction counts'
    def learner(f, x):
        if x.dim() != 3:
            raise ValueError(f"x must be (batch, seq, d), got {x.dim()} dimensions")
        before, seq = f(x), x.shape[1]
        result = torch.zeros(seq, seq, dtype=torch.bool)
        for j in range(seq):
            y = x.clone()
            y[:, j] += torch.randn_like(y[:, j])
            moved = (f(y) != before).any(-1).any(0)
            result[j:, j] = moved[j:]  # the outputs from j on: the earlier ones cannot move
        return result

    result = check_result("ex05.dependency_matrix", learner)
    assert result.status == "failed" and "you tested only the outputs at or after" in (
        result.feedback
    ), result.feedback


def test_f5_a_prefix_mask_from_tril_with_the_prefix_as_diagonal_is_named():
    # before: 'None of the usual single mistakes'; tril(P) is the band j <= i + P, not a prefix
    def learner(ids, prefix_lengths, pad_id):
        seq = ids.shape[1]
        if (prefix_lengths < 0).any() or (prefix_lengths > seq).any():
            raise ValueError(f"prefix lengths must be in [0, {seq}]")
        ones = torch.ones(seq, seq, dtype=torch.bool)
        mask = torch.stack([ones.tril(int(length)) for length in prefix_lengths])
        return mask & (ids != pad_id)[:, None, :]

    result = check_result("ex05.prefix_lm_mask", learner)
    assert result.status == "failed" and "tril(diagonal=P)" in result.feedback, result.feedback


# ---- h5 (hunt 17, set 05): a boundary off by one, padding joined with |, a row sum of 0 -------


def _padding_from_lengths(ids, pad_id, compare, start=0):
    """A padding mask from each row's number of real tokens, with `compare` (torch.lt / le)
    between the positions (counted from `start`) and the lengths."""
    lengths = (ids != pad_id).sum(dim=1, keepdim=True)
    positions = torch.arange(start, start + ids.shape[1])
    return compare(positions, lengths).unsqueeze(1)


@pytest.mark.parametrize(
    "compare, start, words",
    [
        (torch.le, 0, "arange(seq) <= lengths is True at one position too many"),
        (torch.lt, 1, "arange(1, seq + 1) < lengths is True at one position too few"),
    ],
    ids=["<=", "from 1"],
)
def test_h5_a_padding_mask_from_lengths_off_by_one_is_named(compare, start, words):
    # before: 'None of the usual single mistakes' on the first case (right padding)
    result = check_result(
        "ex05.padding_mask", lambda ids, pad_id: _padding_from_lengths(ids, pad_id, compare, start)
    )
    assert result.status == "failed" and words in result.feedback, result.feedback


def _prefix_lm_padding(combine, real_keys=lambda ids, pad_id: ids != pad_id):
    """prefix_lm_mask that joins the padding in with `combine` (torch.logical_and is right)."""

    def prefix_lm_mask(ids, prefix_lengths, pad_id):
        seq = ids.shape[1]
        if (prefix_lengths < 0).any() or (prefix_lengths > seq).any():
            raise ValueError(f"prefix lengths must be in [0, {seq}]")
        query, key = torch.arange(seq)[:, None], torch.arange(seq)
        allowed = (key < prefix_lengths[:, None, None]) | (key <= query)
        return combine(allowed, real_keys(ids, pad_id)[:, None, :])

    return prefix_lm_mask


@pytest.mark.parametrize(
    "learner, words",
    [
        (_prefix_lm_padding(torch.logical_or), "you combined the padding mask with | (OR)"),
        (
            _prefix_lm_padding(
                torch.logical_and,
                lambda ids, pad_id: (
                    torch.arange(ids.shape[1]) <= (ids != pad_id).sum(1, keepdim=True)
                ),
            ),
            "arange(seq) <= lengths is True at one position too many",
        ),
    ],
    ids=["| real", "<= lengths"],
)
def test_h5_prefix_mask_padding_slips_are_named(learner, words):
    # before: 'None of the usual single mistakes' on the first and the second case
    assert check_result("ex05.prefix_lm_mask", _prefix_lm_padding(torch.logical_and)).score == 1
    result = check_result("ex05.prefix_lm_mask", learner)
    assert result.status == "failed" and words in result.feedback, result.feedback


def test_h5_weights_rescaled_after_the_softmax_with_nan_to_num_are_told_their_own_cause():
    # before: the NaN gradients were put down to 'adding a 0/-inf mask to the scores, or
    # log(mask)', neither of which this learner wrote: the 0/0 is in the rescaling
    def learner(q, k, v, mask):
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) * mask
        weights = torch.nan_to_num(weights / weights.sum(dim=-1, keepdim=True))
        return weights @ v, weights

    result = check_result("ex05.masked_attention", learner)
    assert result.status == "failed", result.feedback
    assert "the gradients through a fully masked row are NaN" in result.feedback, result.feedback
    assert "whose rows are then rescaled" in result.feedback, result.feedback


def _padding_cached_by_shape():
    """padding_mask that keeps each mask between calls, keyed on the shape of the ids."""
    kept = {}

    def padding_mask(ids, pad_id):
        if tuple(ids.shape) not in kept:
            kept[tuple(ids.shape)] = (ids != pad_id).unsqueeze(1)
        return kept[tuple(ids.shape)]

    return padding_mask


def test_h5_a_padding_mask_kept_between_calls_fails_under_every_seed_with_its_hint():
    # before: full marks in the notebook and under every hidden seed, as no two cases had ids of
    # one shape; now the left-padded case has the first case's shape (3, 6)
    from course_lib.grading.core import course_state, judge, learner_namespace, run_cases

    result = check_result("ex05.padding_mask", _padding_cached_by_shape())
    assert result.status == "failed" and "an earlier call" in result.feedback, result.feedback
    task = get_task("ex05.padding_mask")
    for seed in range(4):
        with course_state():
            cases = task.cases(torch.Generator().manual_seed(seed))
            fresh = _padding_cached_by_shape()
            result = judge(task, cases, run_cases(task, fresh, cases, learner_namespace(fresh)))
        assert result.status == "failed", seed


def test_h5_a_causal_mask_as_the_complement_of_triu_is_told_about_its_diagonal():
    # before: 'the diagonal is missing ... (tril, not tril(-1))', a call the learner never made
    result = check_result("ex05.causal_mask", lambda n: ~torch.ones(n, n, dtype=torch.bool).triu())
    assert result.status == "failed" and "~triu() drops it" in result.feedback, result.feedback
    assert check_result("ex05.causal_mask", lambda n: ~torch.ones(n, n).bool().triu(1)).score == 1


# ---- h05 (hunt 18, set 05): x's requires_grad flipped, an expanded padding mask, a shared mask --


def _dependency_by_backward(slip):
    """A learner's dependency_matrix by one gradient per output feature, with one slip:
    "requires_grad on x" (set on the caller's x and left), "grad left on x" (the flag undone,
    backward() through x leaves x.grad), "accumulated" (on a copy, .grad never reset)."""

    def learner(f, x):
        if x.dim() != 3:
            raise ValueError(f"x must be (batch, seq, d), got {x.dim()} dimensions")
        leaf = x.detach().clone() if slip == "accumulated" else x
        leaf.requires_grad_(True)
        y, seq = f(leaf), x.shape[1]
        result = torch.zeros(seq, seq, dtype=torch.bool)
        for i in range(seq):
            for feature in range(y.shape[-1]):
                if slip == "requires_grad on x":
                    (grad,) = torch.autograd.grad(y[:, i, feature].sum(), x, retain_graph=True)
                else:
                    leaf.grad = None if slip == "grad left on x" else leaf.grad
                    y[:, i, feature].sum().backward(retain_graph=True)
                    grad = leaf.grad
                result[i] |= (grad != 0).any(-1).any(0)
        if slip == "grad left on x":
            x.requires_grad_(False)
        return result

    return learner


def test_h05_a_dependency_matrix_that_sets_requires_grad_on_x_fails():
    # before: full marks in the notebook and under every hidden seed; x.requires_grad_() left the
    # caller's x building graphs, though the statement says to leave x as it was
    learner = _dependency_by_backward("requires_grad on x")
    result = check_result("ex05.dependency_matrix", learner)
    assert result.status == "failed" and "requires_grad on the x" in result.feedback, (
        result.feedback
    )
    assert check_result("ex05.dependency_matrix", dependency_by_jacobian).score == 1.0


@pytest.mark.parametrize("widen", ["expand", "repeat"])
def test_h05_a_padding_mask_expanded_over_the_queries_is_named(widen):
    # before: only 'your result has shape (3, 6, 6), expected (3, 1, 6)'
    def learner(ids, pad_id):
        mask = (ids != pad_id).unsqueeze(1)
        seq = ids.shape[1]
        return mask.expand(-1, seq, -1) if widen == "expand" else mask.repeat(1, seq, 1)

    result = check_result("ex05.padding_mask", learner)
    assert result.status == "failed" and "you expanded the mask" in result.feedback


def test_h05_a_prefix_loop_that_edits_a_cached_causal_mask_is_told_so():
    # before: 'compare the keys with prefix_lengths[:, None, None], not with one row's length',
    # though the learner read each row's own length: its rows shared one cached causal mask
    import functools

    causal = functools.lru_cache(lambda n: torch.ones(n, n, dtype=torch.bool).tril())

    def learner(ids, prefix_lengths, pad_id):
        seq = ids.shape[1]
        if (prefix_lengths < 0).any() or (prefix_lengths > seq).any():
            raise ValueError(f"prefix lengths must be in [0, {seq}]")
        rows = []
        for b in range(len(ids)):
            m = causal(seq)
            m[:, : int(prefix_lengths[b])] = True
            rows.append(m & (ids[b] != pad_id))
        return torch.stack(rows)

    result = check_result("ex05.prefix_lm_mask", learner)
    assert result.status == "failed" and "one mask shared by them" in result.feedback


# ---- h05 (hunt 19, set 05) ----


def test_h05_a_gradient_accumulated_over_the_outputs_is_named():
    # before: 'None of the usual single mistakes' on the position-wise case: backward() per output
    # with .grad never reset, so row i also holds the dependencies of rows 0..i-1
    learner = _dependency_by_backward("accumulated")

    result = check_result("ex05.dependency_matrix", learner)
    assert result.status == "failed" and ".grad adds up over backward()" in result.feedback, (
        result.feedback
    )


def test_h05_a_dependency_matrix_that_leaves_a_grad_on_x_fails():
    # before: full marks; requires_grad_() undone at the end, but backward() through x left a
    # .grad on the caller's x, which a later training step on it adds to its own
    learner = _dependency_by_backward("grad left on x")

    result = check_result("ex05.dependency_matrix", learner)
    assert result.status == "failed" and "left a .grad on the x" in result.feedback, result.feedback


def test_h05_a_prefix_length_checked_against_the_batch_size_is_named():
    # before: 'your code raised ValueError: ...' with the learner's own message only: the range
    # check read seq from len(ids), the batch size
    def learner(ids, prefix_lengths, pad_id):
        seq = len(ids)
        if (prefix_lengths < 0).any() or (prefix_lengths > seq).any():
            raise ValueError(f"prefix lengths must be in [0, {seq}], got {prefix_lengths}")
        keys = torch.arange(ids.shape[1])
        causal = keys[:, None] >= keys
        return ((keys < prefix_lengths[:, None, None]) | causal) & (ids != pad_id)[:, None]

    result = check_result("ex05.prefix_lm_mask", learner)
    assert result.status == "failed" and "are the batch size" in result.feedback, result.feedback


def test_h05_a_padding_mask_cut_after_the_last_real_token_is_named():
    # before: 'None of the usual single mistakes' on the left-padded case: True up to each row's
    # last real token, the padding assumed last
    def learner(ids, pad_id):
        real = ids != pad_id
        return real.flip(-1).cumsum(-1).flip(-1).bool().unsqueeze(1)

    result = check_result("ex05.padding_mask", learner)
    assert result.status == "failed" and "as if the padding always came last" in result.feedback
