"""ex00, the warm-up: broadcasting, batched matrix products, picking tokens by index."""

from __future__ import annotations

import torch

from ..core import Case, Task, register
from .common import randn


@register
class BatchedMatmul(Task):
    id = "ex00.batched_matmul"
    lesson = "lesson 00, section 'Tensors, shapes and broadcasting'"
    reference = "course_lib.tensor_basics.batched_matmul"
    forbidden = (
        "torch.matmul",
        "torch.Tensor.matmul",
        "torch.Tensor.__matmul__",
        "torch.Tensor.__rmatmul__",
        "torch.bmm",
        "torch.Tensor.bmm",
        "torch.mm",
        "torch.Tensor.mm",
        "torch.einsum",
        "torch.tensordot",
        "torch.baddbmm",
        "torch.nn.functional.linear",
        "torch.linalg.matmul",
        "torch.addmm",
        "torch.Tensor.addmm",
    )

    def cases(self, gen):
        return [
            Case("2-D a (3, 4) and b (4, 5)", (randn(gen, 3, 4), randn(gen, 4, 5))),
            Case("a batch: a (2, 3, 4), b (2, 4, 6)", (randn(gen, 2, 3, 4), randn(gen, 2, 4, 6))),
            Case(
                "broadcast batch: a (2, 1, 3, 4), b (5, 4, 2)",
                (randn(gen, 2, 1, 3, 4), randn(gen, 5, 4, 2)),
            ),
            Case(
                "float64 a (3, 2, 7), b (3, 7, 1)",
                (
                    randn(gen, 3, 2, 7, dtype=torch.float64),
                    randn(gen, 3, 7, 1, dtype=torch.float64),
                ),
            ),
        ]

    def mistakes(self):
        return [
            (
                lambda a, b: (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-1),
                "you summed over the last axis (m); the matrix product sums over the shared axis k",
            ),
            (
                lambda a, b: (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-3),
                "you summed over the n axis; the matrix product sums over the shared axis k",
            ),
        ]


@register
class PairwiseSqDistances(Task):
    id = "ex00.pairwise_sq_distances"
    lesson = "lesson 00, section 'Tensors, shapes and broadcasting'"
    reference = "course_lib.tensor_basics.pairwise_sq_distances"
    forbidden = ("torch.cdist", "torch.nn.functional.pairwise_distance")

    def cases(self, gen):
        return [
            Case("x (4, 3), y (5, 3)", (randn(gen, 4, 3), randn(gen, 5, 3))),
            Case("a batch: x (2, 3, 8), y (2, 6, 8)", (randn(gen, 2, 3, 8), randn(gen, 2, 6, 8))),
            Case(
                "float64 x (1, 2, 4), y (1, 1, 4)",
                (
                    randn(gen, 1, 2, 4, dtype=torch.float64),
                    randn(gen, 1, 1, 4, dtype=torch.float64),
                ),
            ),
        ]

    def mistakes(self):
        def not_squared(x, y):
            return ((x.unsqueeze(-2) - y.unsqueeze(-3)) ** 2).sum(-1).sqrt()

        def dot_only(x, y):
            return (x.unsqueeze(-2) * y.unsqueeze(-3)).sum(-1)

        def mean_not_sum(x, y):
            return ((x.unsqueeze(-2) - y.unsqueeze(-3)) ** 2).mean(-1)

        return [
            (not_squared, "that is the distance itself; the task asks for its square (no sqrt)"),
            (
                mean_not_sum,
                "you averaged the squared differences over the features; the squared distance "
                "is their sum",
            ),
            (dot_only, "that is the dot product x·y; the squared distance is |x|² - 2x·y + |y|²"),
        ]


@register
class LastToken(Task):
    id = "ex00.last_token"
    lesson = "lesson 00, section 'Indexing a batch'"
    reference = "course_lib.tensor_basics.last_token"

    def cases(self, gen):
        x = randn(gen, 3, 5, 4)
        return [
            Case("x (3, 5, 4), lengths [5, 2, 1]", (x, torch.tensor([5, 2, 1]))),
            Case(
                "x (4, 6, 2), random lengths",
                (randn(gen, 4, 6, 2), torch.randint(1, 7, (4,), generator=gen)),
            ),
            Case(
                "float64 x (1, 3, 3), lengths [3]",
                (randn(gen, 1, 3, 3, dtype=torch.float64), torch.tensor([3])),
            ),
        ]

    def mistakes(self):
        return [
            (
                lambda x, lengths: x[:, -1],
                "that is the last position, padding included; use each sequence's own length",
            ),
            (
                lambda x, lengths: x[torch.arange(x.shape[0]), lengths],
                "off by one: a sequence of length L ends at index L - 1",
            ),
            (
                lambda x, lengths: x[torch.arange(x.shape[0]), (lengths % x.shape[1])],
                "off by one: a sequence of length L ends at index L - 1",
            ),
            (lambda x, lengths: x[:, 0], "that is the first token of each sequence"),
        ]


# --------------------------------------------------------------------------------------------
# Review 2026-11-23 (EX00-1), kept apart so that it merges with work on the cases above
# --------------------------------------------------------------------------------------------

from ..core import extend_task  # noqa: E402


def _l1_distances(x, y):
    return (x.unsqueeze(-2) - y.unsqueeze(-3)).abs().sum(-1)


extend_task(
    PairwiseSqDistances,
    mistakes=[
        (
            _l1_distances,
            "you summed the absolute differences (the L1 distance); square each "
            "difference instead: ((x_i - y_j) ** 2).sum(-1)",
        ),
    ],
)
