"""ex00, the warm-up: broadcasting, batched matrix products, picking tokens by index."""

from __future__ import annotations

import torch
from torch import Tensor

from ..core import Case, Task, register
from .common import HintOnError, _shapes, randn, randns

F64 = torch.float64
FIRST_AXES = (
    "count the axes from the front, which is right only without batch dimensions; count them "
    "from the end instead: "
)
ONE_BATCH_AXIS = (
    "count the axes from the front of a 3-D (batch, rows, columns) tensor, which is right only "
    "with exactly one batch axis; count them from the end instead: "
)
BROADCASTING = "lesson 00, section 'Tensors, shapes and broadcasting'"
OFF_BY_ONE = "off by one: a sequence of length L ends at index L - 1"
KEPT_RESULT = (
    "your result is the one of the call just before (on {earlier}, the same shapes), not of "
    "the inputs given now: your function keeps something between calls (a cache keyed on the "
    "shapes, a result or tensor built at the first call and reused, a mutable default "
    "argument); compute it from the inputs of every call"
)


def called_after(case: Case, earlier_args: tuple, earlier: str, earlier_result: Tensor) -> Case:
    """`case`, judged on a second call: the function is first called on `earlier_args` (the
    case's shapes, other values) and that result is dropped, so that a function that keeps its
    result between calls gives `earlier_result` here (no case of a task repeats a shape)."""
    case.data.update(earlier_args=earlier_args, earlier=earlier, earlier_result=earlier_result)
    return case


class KeptBetweenCalls(Task):
    """Runs the call on a case's `earlier_args` first (see `called_after`) and names a result
    equal to that earlier call's."""

    def call(self, obj, case):
        if "earlier_args" in case.data:
            try:  # its result is dropped; an error here is the real call's to report
                obj(*case.data["earlier_args"])
            except Exception:  # noqa: BLE001, S110  (a learner's code may raise anything)
                pass
        return super().call(obj, case)

    def diagnose(self, got, want, case):
        stale = case.data.get("earlier_result")
        if not isinstance(got, Tensor) or not isinstance(stale, Tensor):
            return None
        if got.shape != stale.shape or got.dtype != stale.dtype or not torch.allclose(got, stale):
            return None
        return KEPT_RESULT.format(earlier=case.data["earlier"])


def dot_t(name: str) -> str:
    return (
        f"{name}.T reverses every axis of a batch (it is for 2-D matrices); swap only the last "
        f"two: {name}.transpose(-2, -1) or {name}.mT"
    )


def squeeze_all(axis: str, also: str) -> str:
    return (
        f"squeeze() without an axis drops every axis of length 1, here {also} too; name the "
        f"axis: squeeze({axis})"
    )


@register
class BatchedMatmul(KeptBetweenCalls, Task):
    id = "ex00.batched_matmul"
    lesson = BROADCASTING
    reference = "course_lib.tensor_basics.batched_matmul"
    forbidden = tuple(
        "torch.matmul torch.Tensor.matmul torch.Tensor.__matmul__ torch.Tensor.__rmatmul__ "
        "torch.bmm torch.Tensor.bmm torch.mm torch.Tensor.mm torch.einsum torch.tensordot "
        "torch.baddbmm torch.nn.functional.linear torch.linalg.matmul torch.addmm "
        "torch.Tensor.addmm torch.linalg.vecdot torch.inner torch.Tensor.inner torch.dot "
        "torch.Tensor.dot torch.vdot torch.mv torch.Tensor.mv torch.addmv torch.addbmm "
        "torch.Tensor.addbmm torch.Tensor.baddbmm torch.linalg.multi_dot torch.chain_matmul".split()
    )
    mistake_table = {
        "k_from_front": "you summed over axis a.dim() - 1, counted from the front: when b has "
        "more batch axes than a, the product has more axes in front and that one is not k; "
        "sum over dim=-2",
        "sum_over_m": "you summed over the last axis (m); the matrix product sums over the "
        "shared axis k",
        "sum_over_n": "you summed over the n axis; the matrix product sums over the shared axis k",
        "mean_over_k": "you averaged over the shared axis k; the matrix product sums the k "
        "products: .sum(dim=-2), not .mean",
        # before first_axes: on a 4-D a both raise one error, and code that gets there (right
        # on the 2-D and 3-D cases) has a 3-D branch, a.unsqueeze(3) * b.unsqueeze(1)
        "one_batch_axis": "a.unsqueeze(3) and b.unsqueeze(1) "
        + ONE_BATCH_AXIS
        + "a.unsqueeze(-1) * b.unsqueeze(-3), summed over dim -2",
        "first_axes": "a[:, :, None] and b[None] (unsqueeze(2), unsqueeze(0)) "
        + FIRST_AXES
        + "a.unsqueeze(-1) * b.unsqueeze(-3), summed over dim -2",
        "squeeze_all": squeeze_all("-2", "m = 1"),
        "b_from_front": "b's new axis went in front of its batch axes (b[None], unsqueeze(0)), "
        "which is right only without batch dimensions; count from the end: b.unsqueeze(-3)",
        "dot_T": dot_t("b"),
        "no_new_axes": "a * b multiplies entry by entry, which needs equal shapes; give a and b "
        "a new axis each so that every row of a meets every column of b: a.unsqueeze(-1) * "
        "b.unsqueeze(-3), summed over dim -2",
        "b_axis_before_m": "b.unsqueeze(-2) puts b's new axis between k and m, so b's k meets "
        "a's n; it goes before k, b.unsqueeze(-3): (..., 1, k, m) against a's (..., n, k, 1)",
        "new_axes_swapped": "a.unsqueeze(-3) and b.unsqueeze(-1) give the new axes to the wrong "
        "tensors, so a's n axis lines up with b's m (and fails when n and m differ); a (..., n, "
        "k) gets its new axis last and b "
        "(..., k, m) gets one before k: a.unsqueeze(-1) * b.unsqueeze(-3), (..., n, k, 1) * "
        "(..., 1, k, m), summed over dim -2",
        "float32": "your product is float32 for float64 inputs: compute it in the inputs' "
        "dtype, with no .float() on a, b or the result (and dtype=a.dtype for a tensor you "
        "create)",
        "k_minus_1_terms": "your sum leaves out the last of the k products: range(k - 1) stops "
        "at k - 2 (so does range(a.shape[-2]) on this case, where n = k - 1: a.shape[-2] is n, "
        "the rows of a; k is a.shape[-1]). Loop over range(k), all k of them, or sum the "
        "broadcast products over dim -2",
        "first_term_left_out": "your sum leaves out the first of the k products: range(1, k) "
        "starts at 1, and a total that starts at 0 never gets the product of column 0 of a and "
        "row 0 of b. Loop over range(k), all k of them, or sum the broadcast products over "
        "dim -2",
        "first_term_twice": "your sum counts the first of the k products twice: a total that "
        "starts at the product of column 0 of a and row 0 of b, then a loop over range(k), "
        "adds it again. Start the total at 0 (or loop over range(1, k) after it), or sum the "
        "broadcast products over dim -2",
    }

    def cases(self, gen):
        return [
            Case("2-D a (3, 4) and b (4, 5)", randns(gen, (3, 4), (4, 5))),
            Case("a batch: a (2, 3, 4), b (2, 4, 6)", randns(gen, (2, 3, 4), (2, 4, 6))),
            Case(
                "broadcast batch: a (2, 1, 3, 4), b (5, 4, 2)", randns(gen, (2, 1, 3, 4), (5, 4, 2))
            ),
            Case("float64 a (3, 2, 7), b (3, 7, 1)", randns(gen, (3, 2, 7), (3, 7, 1), dtype=F64)),
            called_after(  # a product cached by the shapes passed: no case repeated a shape
                Case(
                    "a (3, 4) without a batch, b (2, 4, 5), called just after a call on -a and b",
                    (a := randn(gen, 3, 4), b := randn(gen, 2, 4, 5)),
                ),
                (-a, b),
                "-a and b",
                -(a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2),
            ),
        ]

    def wrong(self, a, b, *, mistake):
        if mistake == "float32":  # a.float(), b.float(): float64's digits given up
            a, b = a.float(), b.float()
        if mistake == "first_axes":  # right for 2-D a and b only
            return (a.unsqueeze(2) * b.unsqueeze(0)).sum(1)
        if mistake == "dot_T":  # rows of a times rows of b.T: right for 2-D b only
            return (a.unsqueeze(-2) * b.T.unsqueeze(-3)).sum(-1)
        if mistake == "one_batch_axis":  # the lesson's 3-D axes: right for 3-D a and b only
            return (a.unsqueeze(3) * b.unsqueeze(1)).sum(2)
        if mistake == "no_new_axes":  # entry by entry: right only when a and b have one shape
            return (a * b).sum(-1)
        if mistake == "new_axes_swapped":  # (..., 1, n, k) * (..., k, m, 1): n meets m
            return (a.unsqueeze(-3) * b.unsqueeze(-1)).sum(-2)
        b_axis = {"b_from_front": 0, "b_axis_before_m": -2}.get(mistake, -3)
        products = a.unsqueeze(-1) * b.unsqueeze(b_axis)
        terms = {  # range(k - 1); range(1, k) from 0; range(k) from the first product
            "k_minus_1_terms": lambda p: p[..., :-1, :],
            "first_term_left_out": lambda p: p[..., 1:, :],
            "first_term_twice": lambda p: torch.cat([p[..., :1, :], p], dim=-2),
        }
        if mistake in terms:
            products = terms[mistake](products)
        if mistake == "squeeze_all":
            return products.sum(-2, keepdim=True).squeeze()
        if mistake == "mean_over_k":
            return products.mean(-2)
        axis = {"sum_over_m": -1, "sum_over_n": -3, "k_from_front": a.dim() - 1}
        return products.sum(axis.get(mistake, -2))


@register
class PairwiseSqDistances(KeptBetweenCalls, HintOnError):
    id = "ex00.pairwise_sq_distances"
    lesson = BROADCASTING
    reference = "course_lib.tensor_basics.pairwise_sq_distances"
    forbidden = ("torch.cdist", "torch.nn.functional.pairwise_distance")
    mistake_table = {
        "not_squared": "that is the distance itself; the task asks for its square (no sqrt)",
        "mean_not_sum": "you averaged the squared differences over the features; the squared "
        "distance is their sum",
        "dot_only": "that is the dot product x·y; the squared distance sums the squared "
        "differences, ((x_i - y_j) ** 2).sum(-1)",
        # before first_axes: on two batch axes both raise one error, and code that gets there
        # (right on the 2-D and 3-D cases) has a 3-D branch, x[:, :, None] - y[:, None]
        "one_batch_axis": "x[:, :, None] and y[:, None] (unsqueeze(2), unsqueeze(1)) "
        + ONE_BATCH_AXIS
        + "x.unsqueeze(-2) - y.unsqueeze(-3)",
        "first_axes": "x[:, None] and y[None] (unsqueeze(1), unsqueeze(0)) "
        + FIRST_AXES
        + "x.unsqueeze(-2) - y.unsqueeze(-3)",
        "expansion_no_2": "|x - y|² = |x|² - 2 x·y + |y|²: you left out the factor 2 of the "
        "middle term",
        "expansion_plus": "|x - y|² = |x|² - 2 x·y + |y|²: the middle term is subtracted, "
        "not added",
        "norms_not_squared": "|x - y|² = |x|² - 2 x·y + |y|² has the squared norms: x.norm(dim=-1) "
        "is |x| itself; square it, or sum the squares: (x ** 2).sum(-1)",
        "square_of_sum": "you squared the sum of the differences; square each difference first, "
        "then sum: ((x_i - y_j) ** 2).sum(-1)",
        "unsquared": "you summed the differences themselves, so positive and negative ones "
        "cancel; square each difference, then sum: ((x_i - y_j) ** 2).sum(-1)",
        "l1": "you summed the absolute differences (the L1 distance); square each difference "
        "instead: ((x_i - y_j) ** 2).sum(-1)",
        "l1_squared": "you squared the L1 norm (norm(p=1), the sum of the absolute differences); "
        "the squared Euclidean distance squares each difference before the sum: ((x_i - y_j) "
        "** 2).sum(-1), or the default norm (p=2) squared",
        "y_from_front": "y's new axis went in front of the batch axes (y[None], unsqueeze(0), "
        "or |y|² of shape (..., m) added as it is), which is right only without batch "
        "dimensions; count from the end: y.unsqueeze(-3), |y|².unsqueeze(-2)",
        "dot_T": dot_t("y"),
        "float32": "your distances are float32 for float64 points: compute them in the inputs' "
        "dtype, with no .float() on x, y or the result (and dtype=x.dtype for a tensor you "
        "create)",
        "squeeze_all": squeeze_all("-1", "batch = 1 and m = 1"),
        "y_on_rows": "your result is (..., m, n), y's points on the rows: row i holds the "
        "distances from x's point i, so x gets its new axis after its points and y before "
        "its: x.unsqueeze(-2) - y.unsqueeze(-3), (..., n, 1, d) - (..., 1, m, d)",
    }

    def cases(self, gen):
        return [
            Case("x (4, 3), y (5, 3)", randns(gen, (4, 3), (5, 3))),
            Case("a batch: x (2, 3, 8), y (2, 6, 8)", randns(gen, (2, 3, 8), (2, 6, 8))),
            Case(  # code written for at most one batch axis (x[:, :, None]) passed the others
                "two batch axes: x (2, 3, 4, 5), y (2, 3, 6, 5)",
                randns(gen, (2, 3, 4, 5), (2, 3, 6, 5)),
            ),
            called_after(  # distances cached by the shapes passed: no case repeated a shape
                Case(
                    "float64 x (1, 2, 4), y (1, 1, 4), called just after a call on x + 1 and y",
                    (x := randn(gen, 1, 2, 4, dtype=F64), y := randn(gen, 1, 1, 4, dtype=F64)),
                ),
                (x + 1, y),  # not -x: |-x - y|² is the expansion with + 2 x·y, a listed slip
                "x + 1 and y",
                ((x.unsqueeze(-2) + 1 - y.unsqueeze(-3)) ** 2).sum(-1),
            ),
        ]

    def _hint_for_error(self, obj, case, failure, error=None):
        """x - y with no new axes fails with the message of x[:, :, None] - y[:, None] (a
        listed mistake): it is told apart by the failing operation getting x and y as given."""
        if failure is not None and failure[2] == _shapes(case.args):
            return (
                "x - y pairs point i of x with point i of y only (and fails when n and m "
                "differ); give each a new axis so that every point of x meets every point of "
                "y: x.unsqueeze(-2) - y.unsqueeze(-3)"
            )
        return None

    def wrong(self, x, y, *, mistake):
        if mistake == "float32":  # x.float(), y.float(): float64's digits given up
            x, y = x.float(), y.float()
        if mistake == "y_on_rows":  # y.unsqueeze(-2) - x.unsqueeze(-3): (..., m, n)
            x, y = y, x
        if mistake == "dot_T":  # right for 2-D x and y only
            return (x * x).sum(-1, keepdim=True) - 2 * x @ y.T + (y * y).sum(-1)
        if mistake in ("first_axes", "one_batch_axis"):  # right for 2-D (3-D) x and y only
            front = 1 if mistake == "first_axes" else 2
            x, y = x.unsqueeze(front), y.unsqueeze(front - 1)
        else:  # (..., n, 1, d), (..., 1, m, d)
            x, y = x.unsqueeze(-2), y.unsqueeze(0 if mistake == "y_from_front" else -3)
        if mistake in ("dot_only", "expansion_no_2", "expansion_plus", "norms_not_squared"):
            dot = (x * y).sum(-1) * {"expansion_plus": -2, "norms_not_squared": 2}.get(mistake, 1)
            norm = 1 if mistake == "norms_not_squared" else 2  # x.norm(dim=-1): |x|, not |x|²
            sq_x, sq_y = x.norm(dim=-1) ** norm, y.norm(dim=-1) ** norm
            return dot if mistake == "dot_only" else sq_x - dot + sq_y
        if mistake == "square_of_sum":
            return (x - y).sum(-1) ** 2
        per_feature = {"l1": (x - y).abs(), "l1_squared": (x - y).abs(), "unsquared": x - y}.get(
            mistake, (x - y) ** 2
        )
        total = per_feature.mean(-1) if mistake == "mean_not_sum" else per_feature.sum(-1)
        if mistake == "squeeze_all":  # .sum(-1, keepdim=True).squeeze(): (n,) when batch = m = 1
            return total.squeeze()
        return {"not_squared": total.sqrt(), "l1_squared": total**2}.get(mistake, total)


@register
class LastToken(KeptBetweenCalls, Task):
    id = "ex00.last_token"
    lesson = "lesson 00, section 'Indexing a batch'"
    reference = "course_lib.tensor_basics.last_token"
    mistake_table = {
        "last_position": "that is the last position, padding included; use each sequence's "
        "own length",
        "at_length": OFF_BY_ONE,
        "at_length_wrapped": OFF_BY_ONE,
        "first_token": "that is the first token of each sequence; take each one's last real "
        "token, x[torch.arange(batch), lengths - 1]",
        "all_positions": "x[:, lengths - 1] takes every sequence at every one of those "
        "positions, a (batch, batch, d) grid; index both axes together, one position per "
        "sequence: x[torch.arange(batch), lengths - 1]",
        "batch_index_from_seq": "the batch index counts the sequences, torch.arange(batch) "
        "with batch = x.shape[0]; torch.arange(x.shape[1]) counts the positions",
        "at_length_clamped": OFF_BY_ONE,
        "positions_first": "the positions lengths - 1 went into the first axis, which counts "
        "the sequences (x[lengths - 1], x[lengths - 1, batch_index]); the batch index comes "
        "first: x[torch.arange(batch), lengths - 1]",
        "squeeze_all": squeeze_all("1", "batch = 1"),
        "left_padded": "x.shape[1] - lengths (or -lengths) is where a sequence padded at the "
        "start would begin; here the padding is at the end, so the last real token is at "
        "lengths - 1",
        "lesson_batch": "torch.arange(2) counts the lesson's batch of 2 sequences; count this "
        "one's: torch.arange(x.shape[0])",
        "grid_diagonal": "x[:, lengths - 1].diagonal() puts the diagonal's axis last, so "
        "the result is (d, batch); transpose it, .diagonal().T, or index both axes together, "
        "one position per sequence: x[torch.arange(batch), lengths - 1]",
        "gather_not_expanded": "x.gather(1, index) returns the shape of its index, so an index "
        "of shape (batch, 1, 1) picks one number per sequence; expand it over d first: "
        "index.expand(-1, 1, x.shape[-1])",
    }

    def cases(self, gen):
        x = randn(gen, 3, 5, 4)
        return [
            Case("x (3, 5, 4), lengths [5, 2, 1]", (x, torch.tensor([5, 2, 1]))),
            Case(
                "x (4, 6, 2), random lengths",
                (randn(gen, 4, 6, 2), torch.randint(1, 7, (4,), generator=gen)),
            ),
            called_after(  # last tokens cached by the shape passed: no case repeated a shape
                Case(
                    "float64 x (1, 3, 3), lengths [3], called just after a call on -x",
                    (x := randn(gen, 1, 3, 3, dtype=F64), lengths := torch.tensor([3])),
                ),
                (-x, lengths.clone()),
                "-x",
                -x[:, 2],
            ),
        ]

    def wrong(self, x, lengths, *, mistake):
        position = {
            "last_position": torch.full_like(lengths, -1),
            "at_length": lengths,
            "at_length_wrapped": lengths % x.shape[1],
            "at_length_clamped": lengths.clamp(max=x.shape[1] - 1),
            "first_token": torch.zeros_like(lengths),
            "left_padded": x.shape[1] - lengths,
        }.get(mistake, lengths - 1)
        if mistake in ("all_positions", "grid_diagonal"):  # the (batch, batch, d) grid
            return x[:, position].diagonal() if mistake == "grid_diagonal" else x[:, position]
        if mistake == "gather_not_expanded":  # (batch, 1, 1): the first feature only
            return x.gather(1, position.view(-1, 1, 1)).squeeze(1)
        if mistake == "positions_first":
            return x[position, torch.arange(x.shape[0])]
        if mistake == "squeeze_all":  # x.gather(1, index).squeeze(): (d,) when batch is 1
            return x[torch.arange(x.shape[0]), position].unsqueeze(1).squeeze()
        batch = {"batch_index_from_seq": x.shape[1], "lesson_batch": 2}.get(mistake, x.shape[0])
        return x[torch.arange(batch), position]
