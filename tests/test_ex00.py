"""ex00 (the warm-up): slips an outside learner makes, each written as a learner would; the
notebook's own check (its fixed seed) must not give full marks, and the feedback names the slip
(#33). The references, stubs and listed mistakes of ex00 are tested in test_grading.py."""

from __future__ import annotations

import pytest
import torch

from course_lib.grading import check_result
from course_lib.grading.core import get_task, judge, run_cases


def distances_by_expansion_without_the_2(x, y):
    x2 = (x**2).sum(-1, keepdim=True)  # (..., n, 1)
    y2 = (y**2).sum(-1).unsqueeze(-2)  # (..., 1, m)
    return x2 - x @ y.transpose(-2, -1) + y2


def distances_by_expansion_plus_2xy(x, y):  # hunt 5: 'none of the usual single mistakes'
    return (x * x).sum(-1)[..., :, None] + (y * y).sum(-1)[..., None, :] + 2 * x @ y.mT


def last_token_of_left_padded_sequences(x, lengths):  # hunt 5: 'none of the usual'
    return x[torch.arange(x.shape[0]), -lengths]


def square_of_the_summed_differences(x, y):
    return (x.unsqueeze(-2) - y.unsqueeze(-3)).sum(-1) ** 2


def last_token_of_every_sequence_at_every_length(x, lengths):
    return x[:, lengths - 1]


def last_token_batch_index_over_positions(x, lengths):
    return x[torch.arange(x.shape[1]), lengths - 1]


def matmul_with_the_axes_of_2d(a, b):
    return (a[:, :, None] * b[None]).sum(1)


def distances_with_the_axes_of_2d(x, y):
    return ((x[:, None] - y[None]) ** 2).sum(-1)


def matmul_summed_over_a_dim_minus_1(a, b):  # hunt 2: full marks while no b had more axes
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(a.dim() - 1)


def matmul_squeezed_after_keepdim(a, b):
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2, keepdim=True).squeeze()


def distances_with_the_norms_of_y_as_they_are(x, y):  # a bare broadcasting error before
    return (x**2).sum(-1, keepdim=True) - 2 * x @ y.transpose(-2, -1) + (y**2).sum(-1)


def distances_with_y_dot_T(x, y):  # a bare broadcasting error before
    return (x**2).sum(-1, keepdim=True) - 2 * x @ y.T + (y**2).sum(-1)


def last_token_gathered_then_squeezed(x, lengths):
    index = (lengths - 1).view(-1, 1, 1).expand(-1, 1, x.shape[-1])
    return x.gather(1, index).squeeze()


def last_token_at_length_clamped_to_the_end(x, lengths):  # its IndexError "fixed"
    return x[torch.arange(x.shape[0]), lengths.clamp(max=x.shape[1] - 1)]


def last_token_positions_in_the_batch_axis(x, lengths):  # hunt 2: a bare IndexError
    return x[lengths - 1, torch.arange(x.shape[0])]


def matmul_by_rows_of_b_dot_T(a, b):  # hunt 2: a bare broadcasting error
    return (a.unsqueeze(-2) * b.T.unsqueeze(-3)).sum(-1)


def matmul_with_b_unsqueezed_in_front(a, b):  # hunt 3: a bare broadcasting error
    return (a.unsqueeze(-1) * b.unsqueeze(0)).sum(-2)


def distances_of_unsquared_differences(x, y):  # hunt 3: 'none of the usual mistakes'
    return (x.unsqueeze(-2) - y.unsqueeze(-3)).sum(-1)


def last_token_with_the_lessons_batch_of_2(x, lengths):  # hunt 3: a bare IndexError
    return x[torch.arange(2), lengths - 1]


def matmul_averaged_over_k(a, b):  # hunt 4: 'none of the usual mistakes'
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).mean(-2)


def matmul_with_the_axes_of_3d(a, b):  # hunt 4: a bare IndexError on 2-D inputs
    return (a.unsqueeze(3) * b.unsqueeze(1)).sum(2)  # the lesson's (2, 3, 4, 1) * (2, 1, 4, 5)


def distances_with_the_axes_of_3d(x, y):  # hunt 4: a bare broadcasting error on 2-D inputs
    return ((x[:, :, None] - y[:, None]) ** 2).sum(-1)


def distances_of_x_minus_y(x, y):  # hunt 6: the hint of x[:, :, None] - y[:, None] before
    return ((x - y) ** 2).sum(-1)


def matmul_entry_by_entry(a, b):  # hunt 6: a bare broadcasting error before
    return (a * b).sum(-1)


def matmul_with_b_unsqueezed_before_m(a, b):  # hunt 6: a bare broadcasting error before
    return (a.unsqueeze(-1) * b.unsqueeze(-2)).sum(-2)


def last_token_gathered_without_expanding(x, lengths):  # hunt 6: a bare shape message before
    return x.gather(1, (lengths - 1).view(-1, 1, 1)).squeeze(1)


def matmul_with_the_new_axes_swapped(a, b):  # second F11 reader: a bare broadcasting error
    return (a.unsqueeze(-3) * b.unsqueeze(-1)).sum(-2)


def matmul_row_by_column(a, b, dot):  # every row of a times every column of b, in loops
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a2 = a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
    b2 = b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
    out = [
        torch.stack([torch.stack([dot(r, c) for c in y.mT]) for r in x])
        for x, y in zip(a2, b2, strict=True)
    ]
    return torch.stack(out).reshape(*batch, a.shape[-2], b.shape[-1])


SLIPS = [
    ("ex00.batched_matmul", matmul_with_the_axes_of_3d, "exactly one batch axis"),
    ("ex00.pairwise_sq_distances", distances_with_the_axes_of_3d, "exactly one batch axis"),
    ("ex00.batched_matmul", matmul_averaged_over_k, "you averaged over the shared axis k"),
    ("ex00.last_token", last_token_with_the_lessons_batch_of_2, "the lesson's batch of 2"),
    ("ex00.batched_matmul", matmul_with_b_unsqueezed_in_front, "b's new axis went in front"),
    ("ex00.pairwise_sq_distances", distances_of_unsquared_differences, "positive and negative"),
    ("ex00.batched_matmul", matmul_by_rows_of_b_dot_T, "b.T reverses every axis"),
    ("ex00.last_token", last_token_positions_in_the_batch_axis, "the batch index comes first"),
    ("ex00.batched_matmul", matmul_summed_over_a_dim_minus_1, "more batch axes than a"),
    ("ex00.batched_matmul", matmul_squeezed_after_keepdim, "squeeze(-2)"),
    ("ex00.pairwise_sq_distances", distances_with_the_norms_of_y_as_they_are, "y's new axis"),
    ("ex00.pairwise_sq_distances", distances_with_y_dot_T, "y.T reverses every axis"),
    ("ex00.last_token", last_token_gathered_then_squeezed, "squeeze(1)"),
    ("ex00.last_token", last_token_at_length_clamped_to_the_end, "ends at index L - 1"),
    ("ex00.batched_matmul", matmul_with_the_axes_of_2d, "count the axes from the front"),
    ("ex00.pairwise_sq_distances", distances_with_the_axes_of_2d, "count the axes from the front"),
    ("ex00.pairwise_sq_distances", distances_by_expansion_without_the_2, "the factor 2"),
    ("ex00.pairwise_sq_distances", square_of_the_summed_differences, "squared the sum"),
    ("ex00.last_token", last_token_of_every_sequence_at_every_length, "(batch, batch, d) grid"),
    ("ex00.last_token", last_token_batch_index_over_positions, "counts the positions"),
    ("ex00.pairwise_sq_distances", distances_by_expansion_plus_2xy, "subtracted, not added"),
    ("ex00.last_token", last_token_of_left_padded_sequences, "padded at the start"),
    ("ex00.pairwise_sq_distances", distances_of_x_minus_y, "point i of y only"),
    ("ex00.batched_matmul", matmul_entry_by_entry, "entry by entry"),
    ("ex00.batched_matmul", matmul_with_b_unsqueezed_before_m, "between k and m"),
    ("ex00.last_token", last_token_gathered_without_expanding, "expand it over d"),
    ("ex00.batched_matmul", matmul_with_the_new_axes_swapped, "give the new axes to the wrong"),
]


@pytest.mark.parametrize(("task_id", "impl", "hint"), SLIPS, ids=[s[1].__name__ for s in SLIPS])
def test_slips_fail_in_the_notebook_with_their_hint_and_under_every_seed(task_id, impl, hint):
    result = check_result(task_id, impl)
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert hint in result.feedback, result.feedback
    task = get_task(task_id)
    for seed in (1, 2, 3, 1234):
        cases = task.cases(torch.Generator().manual_seed(seed))
        assert judge(task, cases, run_cases(task, impl, cases)).status == "failed", seed


@pytest.mark.parametrize(
    "product",
    [
        lambda a, b: torch.linalg.vecdot(a.unsqueeze(-1), b.unsqueeze(-3), dim=-2),
        lambda a, b: torch.inner(a, b.transpose(-2, -1)),
        lambda a, b: torch.linalg.multi_dot([a, b]),  # hunt 6: these passed too
        lambda a, b: torch.stack([a.mv(column) for column in b.mT], -1),
        lambda a, b: matmul_row_by_column(a, b, torch.dot),
        lambda a, b: matmul_row_by_column(a, b, torch.Tensor.dot),
    ],
    ids=["vecdot", "inner", "multi_dot", "mv", "dot", "Tensor.dot"],
)
def test_batched_matmul_by_a_multiply_and_sum_in_one_call_is_not_built(product):
    # hunt 5: torch.linalg.vecdot passed, though it is the multiply and the sum in one call
    result = check_result("ex00.batched_matmul", product)
    assert result.status == "forbidden" and result.score == 0, result.feedback


def test_the_dot_product_hint_points_to_subtracting_first():
    # seventh hunt: the hint taught |x|² - 2x·y + |y|², the formula the predict cell after the
    # task shows losing every digit far from 0
    result = check_result("ex00.pairwise_sq_distances", lambda x, y: x @ y.transpose(-2, -1))
    assert result.status == "failed", result.feedback
    assert "sums the squared differences" in result.feedback, result.feedback


def _matmul_in_float32(a, b):
    a, b = a.float(), b.float()  # the slip: float64's digits given up
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(dim=-2)


def _distances_in_float32(x, y):
    return ((x.unsqueeze(-2) - y.unsqueeze(-3)) ** 2).sum(-1).float()  # the slip: .float()


@pytest.mark.parametrize(
    "task_id, fn, named",
    [
        ("ex00.batched_matmul", _matmul_in_float32, "with no .float() on a, b or the result"),
        ("ex00.pairwise_sq_distances", _distances_in_float32, "with no .float() on x, y"),
    ],
)
def test_a_float32_cast_is_named_not_a_created_tensor(task_id, fn, named):
    # hunt F11: a .float() cast was told "a tensor you create gets PyTorch's default dtype", a
    # cause the learner did not write; the hint now names the cast
    result = check_result(task_id, fn)
    assert result.status == "failed", result.feedback
    assert named in result.feedback and "default dtype" not in result.feedback, result.feedback


# ---- L14: slips the last stop noticed but left with 'none of the usual single mistakes' ----


def matmul_loop_over_k_minus_1(a, b):
    total = 0
    for j in range(a.shape[-1] - 1):  # the slip: range(k - 1) leaves out the last product
        total = total + a[..., :, j : j + 1] * b[..., j : j + 1, :]
    return total


def distances_as_the_squared_l1_norm(x, y):
    return (x.unsqueeze(-2) - y.unsqueeze(-3)).norm(p=1, dim=-1) ** 2  # the slip: p=1


L14_SLIPS = [
    ("ex00.batched_matmul", matmul_loop_over_k_minus_1, "range(k - 1) stops at k - 2"),
    ("ex00.pairwise_sq_distances", distances_as_the_squared_l1_norm, "you squared the L1 norm"),
]


@pytest.mark.parametrize(
    ("task_id", "impl", "hint"), L14_SLIPS, ids=[s[1].__name__ for s in L14_SLIPS]
)
def test_l14_slips_are_named_and_fail_under_every_seed(task_id, impl, hint):
    # before: 0 marks with 'None of the usual single mistakes gives this result'
    test_slips_fail_in_the_notebook_with_their_hint_and_under_every_seed(task_id, impl, hint)


@pytest.mark.parametrize(
    ("task_id", "impl"),
    [
        (
            "ex00.batched_matmul",
            lambda a, b: sum(
                a[..., :, j : j + 1] * b[..., j : j + 1, :] for j in range(a.shape[-1])
            ),
        ),
        ("ex00.batched_matmul", lambda a, b: (a[..., :, :, None] * b[..., None, :, :]).sum(-2)),
        (
            "ex00.pairwise_sq_distances",
            lambda x, y: (x[..., :, None, :] - y[..., None, :, :]).norm(dim=-1) ** 2,
        ),
        (
            "ex00.pairwise_sq_distances",
            lambda x, y: (x.unsqueeze(-2) - y.unsqueeze(-3)).square().sum(-1),
        ),
    ],
    ids=["loop over range(k)", "indexing None", "norm squared", "square()"],
)
def test_l14_right_variants_keep_full_marks(task_id, impl):
    for seed in (0, 1, 2, 3, 4, 5):
        task = get_task(task_id)
        cases = task.cases(torch.Generator().manual_seed(seed))
        result = judge(task, cases, run_cases(task, impl, cases))
        assert result.status == "passed", (seed, result.feedback)


# ---- HUNT17: a result kept between calls ----


def matmul_cached_by_shape(a, b, cache={}):  # noqa: B006  (the slip: a mutable default)
    if (a.shape, b.shape) not in cache:
        cache[a.shape, b.shape] = (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)
    return cache[a.shape, b.shape]


def distances_cached_by_shape(x, y, cache={}):  # noqa: B006  (the slip)
    if (x.shape, y.shape) not in cache:
        cache[x.shape, y.shape] = ((x.unsqueeze(-2) - y.unsqueeze(-3)) ** 2).sum(-1)
    return cache[x.shape, y.shape]


def last_token_cached_by_shape(x, lengths, cache={}):  # noqa: B006  (the slip)
    if x.shape not in cache:
        cache[x.shape] = x[torch.arange(x.shape[0]), lengths - 1]
    return cache[x.shape]


KEPT = [
    ("ex00.batched_matmul", matmul_cached_by_shape),
    ("ex00.pairwise_sq_distances", distances_cached_by_shape),
    ("ex00.last_token", last_token_cached_by_shape),
]


@pytest.mark.parametrize(("task_id", "impl"), KEPT, ids=[k[1].__name__ for k in KEPT])
def test_a_result_kept_between_calls_fails_and_is_named(task_id, impl):
    # before: full marks in the notebook and under every seed, as no case asked a shape twice;
    # the last case now comes just after a call on other values of its shapes
    impl.__defaults__[0].clear()  # a fresh kernel: the cache starts empty
    result = check_result(task_id, impl)
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert "the one of the call just before" in result.feedback, result.feedback
    task = get_task(task_id)
    for seed in (1, 2, 3, 1234):
        impl.__defaults__[0].clear()
        cases = task.cases(torch.Generator().manual_seed(seed))
        assert judge(task, cases, run_cases(task, impl, cases)).status == "failed", seed


# ---- HUNT17: slips that read only a shape message or 'none of the usual single mistakes' ----


def distances_with_y_on_the_rows(x, y):  # only 'your result has shape (5, 4), expected (4, 5)'
    return ((y.unsqueeze(-2) - x.unsqueeze(-3)) ** 2).sum(-1)


def distances_stacked_over_y_on_dim_0(x, y):  # the same (m, n), built in a loop
    return torch.stack([((x - y[..., j : j + 1, :]) ** 2).sum(-1) for j in range(y.shape[-2])])


def last_token_from_the_grids_diagonal(x, lengths):  # only 'has shape (4, 3), expected (3, 4)'
    return x[:, lengths - 1].diagonal()


def matmul_loop_from_1(a, b):  # 'none of the usual single mistakes'
    total = 0
    for j in range(1, a.shape[-1]):  # the slip: range(1, k) leaves out the first product
        total = total + a[..., :, j : j + 1] * b[..., j : j + 1, :]
    return total


def matmul_loop_after_a_first_product(a, b):  # 'none of the usual single mistakes'
    total = a[..., :, 0:1] * b[..., 0:1, :]  # the shape right from the start ...
    for j in range(a.shape[-1]):  # ... the slip: range(k) adds that product again
        total = total + a[..., :, j : j + 1] * b[..., j : j + 1, :]
    return total


def distances_by_expansion_with_unsquared_norms(x, y):  # 'none of the usual single mistakes'
    norms_x, norms_y = x.norm(dim=-1, keepdim=True), y.norm(dim=-1).unsqueeze(-2)
    return norms_x - 2 * x @ y.mT + norms_y


HUNT17_SLIPS = [
    ("ex00.pairwise_sq_distances", distances_with_y_on_the_rows, "y's points on the rows"),
    ("ex00.pairwise_sq_distances", distances_stacked_over_y_on_dim_0, "y's points on the rows"),
    ("ex00.last_token", last_token_from_the_grids_diagonal, ".diagonal().T"),
    ("ex00.batched_matmul", matmul_loop_from_1, "range(1, k) starts at 1"),
    ("ex00.batched_matmul", matmul_loop_after_a_first_product, "counts the first of the k"),
    (
        "ex00.pairwise_sq_distances",
        distances_by_expansion_with_unsquared_norms,
        "x.norm(dim=-1) is |x| itself",
    ),
]


@pytest.mark.parametrize(
    ("task_id", "impl", "hint"), HUNT17_SLIPS, ids=[s[1].__name__ for s in HUNT17_SLIPS]
)
def test_hunt17_slips_are_named_and_fail_under_every_seed(task_id, impl, hint):
    test_slips_fail_in_the_notebook_with_their_hint_and_under_every_seed(task_id, impl, hint)


# ---- HUNT19: code written for at most one batch axis ----


def distances_for_2d_or_one_batch_axis(x, y):  # full marks before: no case had two batch axes
    if x.dim() == 2:
        return ((x[:, None] - y[None]) ** 2).sum(-1)
    return ((x[:, :, None] - y[:, None]) ** 2).sum(-1)  # the lesson's 3-D axes


def distances_over_flattened_batch_axes(x, y):  # right: any number of (equal) batch axes
    n, m, d = x.shape[-2], y.shape[-2], x.shape[-1]
    xf, yf = x.reshape(-1, n, d), y.reshape(-1, m, d)
    return ((xf[:, :, None] - yf[:, None]) ** 2).sum(-1).reshape(*x.shape[:-2], n, m)


def test_distances_for_at_most_one_batch_axis_fail_on_two():
    # HUNT19: a 2-D branch beside the 3-D axes x[:, :, None] - y[:, None] passed all 3 checks
    # (2-D and 3-D inputs only), though the statement's points are (..., n, d); a case with two
    # batch axes fails it, told that its axes are a 3-D tensor's (not the 2-D first_axes hint)
    test_slips_fail_in_the_notebook_with_their_hint_and_under_every_seed(
        "ex00.pairwise_sq_distances", distances_for_2d_or_one_batch_axis, "exactly one batch axis"
    )
    result = check_result("ex00.pairwise_sq_distances", distances_for_2d_or_one_batch_axis)
    assert "two batch axes" in result.feedback, result.feedback
    test_l14_right_variants_keep_full_marks(
        "ex00.pairwise_sq_distances", distances_over_flattened_batch_axes
    )


def matmul_for_2d_or_one_batch_axis(a, b):  # the 2-D first_axes hint before, on the 4-D case
    if a.dim() == 2 and b.dim() == 2:
        return (a[:, :, None] * b[None]).sum(1)
    return (a.unsqueeze(3) * b.unsqueeze(1)).sum(2)  # the lesson's 3-D axes


def test_matmul_for_at_most_one_batch_axis_is_told_its_3d_axes():
    # HUNT19: right on the 2-D and 3-D cases, it first fails on a (2, 1, 3, 4), where its
    # error is also a[:, :, None] * b[None]'s: it was told it had written that (2-D) slip
    result = check_result("ex00.batched_matmul", matmul_for_2d_or_one_batch_axis)
    assert "on broadcast batch" in result.feedback, result.feedback
    assert "exactly one batch axis" in result.feedback, result.feedback
    assert "a[:, :, None] and b[None]" not in result.feedback, result.feedback


def distances_squeezed_after_keepdim(x, y):  # only 'has shape (2), expected (1, 2, 1)' before
    return ((x.unsqueeze(-2) - y.unsqueeze(-3)) ** 2).sum(-1, keepdim=True).squeeze()


def test_distances_squeezed_without_an_axis_are_named():
    # HUNT19: squeeze() after keepdim also drops batch = 1 and m = 1; batched_matmul and
    # last_token named it, pairwise_sq_distances gave a bare shape message
    test_slips_fail_in_the_notebook_with_their_hint_and_under_every_seed(
        "ex00.pairwise_sq_distances", distances_squeezed_after_keepdim, "squeeze(-1)"
    )


def matmul_loop_over_the_rows_of_a(a, b):  # told only 'range(k - 1) stops at k - 2' before
    total = 0
    for j in range(a.shape[-2]):  # the slip: n, not k = a.shape[-1] (n = k - 1 on case 1)
        total = total + a[..., :, j : j + 1] * b[..., j : j + 1, :]
    return total


def test_matmul_loop_over_n_is_told_a_shape_minus_2_is_n():
    # HUNT19: four of the five cases have n = k - 1, so this loop matches the range(k - 1)
    # row, whose hint named a range the learner never wrote
    test_slips_fail_in_the_notebook_with_their_hint_and_under_every_seed(
        "ex00.batched_matmul", matmul_loop_over_the_rows_of_a, "a.shape[-2] is n"
    )
