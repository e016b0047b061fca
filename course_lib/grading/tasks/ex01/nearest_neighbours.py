"""ex01.nearest_neighbours: the k rows most similar to one row, most similar first."""

from __future__ import annotations

import torch

from ...core import Case, Task, register
from ..common import randn
from ._shared import LESSON, kept_result, repeated, unit_rows


def _parallel_copy_case() -> Case:
    """E (6, 4) in which row 1 is parallel to row 4 (twice as long), index 4, k 3.

    The same under every seed, so the notebook and the grader agree: every entry is a small
    integer and every length a power of two or sqrt(2), so the two similarities of 1 are equal
    to the last bit however they are computed, and the copy sits at the lower index, where a
    stable sort and PyTorch's topk and argsort all put it first. "Skip the first of the sorted
    similarities" then drops the copy and keeps the row itself.
    """
    E = torch.tensor(
        [[1, 1, -1, -1], [2, 2, 2, 2], [1, 1, 1, -1], [1, -1, -1, -1], [1, 1, 1, 1], [1, 1, 0, 0]],
        dtype=torch.float32,
    )
    return Case(
        "E (6, 4) in which row 1 is row 4 times 2 (cosine 1, as high as a row's own), index 4, k 3",
        (E, 4, 3),
    )


def _opposite_row_case() -> Case:
    """E (5, 4) whose last row points away from row 0 (cosine exactly -1), index 0, k 4.

    Every other row is a neighbour, so setting row 0's own similarity to -1 (the lowest cosine)
    ties it with the opposite row, and topk, argsort and sort all keep row 0 instead of row 4.
    Lengths 2 and 4 make the -1 exact; the same under every seed.
    """
    E = torch.tensor(
        [[1, 1, 1, 1], [2, 0, 1, -1], [1, -1, -1, 0], [0, 2, 1, 0], [-2, -2, -2, -2]],
        dtype=torch.float32,
    )
    return Case("E (5, 4) whose row 4 is row 0 times -2 (cosine -1), index 0, k 4", (E, 0, 4))


def _exact_copy_case() -> Case:
    """E (6, 4) whose row 4 is an exact copy of row 1, index 1, k 3: the answer is 4, 0, 3.

    Two tokens can share a vector (lesson 01's devices score 1.00 with each other); excluding
    every row equal to E[index] drops the copy, a neighbour. Placed so that topk, argsort and
    sort all rank `index` before its copy (ties), so skipping the first passes here and fails
    only the parallel-copy case. The same under every seed.
    """
    E = torch.tensor(
        [[0, 1, 1, 0], [1, 2, 0, 1], [2, -1, 1, 0], [1, 0, -1, 2], [1, 2, 0, 1], [-1, 1, 0, 1]],
        dtype=torch.float32,
    )
    return Case(
        "E (6, 4) whose row 4 is an exact copy of row 1 (the same vector: a neighbour at "
        "cosine 1, not row 1 itself), index 1, k 3",
        (E, 1, 3),
    )


def _zero_row_case(gen) -> Case:
    E = randn(gen, 6, 4)
    E[1] = E[0] + 0.3 * E[1]  # a row close to row 0, so the zero row is not the first answer
    E[3] = 0.0
    return Case(
        "E (6, 4) whose row 3 is all zeros (its cosine similarity with any row is 0, as in "
        "task 3, not NaN), index 0, k 4",
        (E, 0, 4),
    )


def _short_row_case() -> Case:
    """E (4, 4) whose row 1, of length 1e-7, points almost as row 0 does, index 0, k 3.

    An epsilon added to every length (norm + 1e-8, up to 1e-5) shrinks row 1's similarity
    below row 2's, so it comes second, not first; lengths only guarded at zero (clamp_min(1e-12),
    F.normalize, or F.cosine_similarity's 1e-8 clamp) keep it first. A dot product or a distance
    ranks the rows otherwise (2, 3, 1 and 1, 2, 3). The same under every seed.
    """
    E = torch.tensor([[1, 0, 0, 0], [1e-7, 1e-8, 0, 0], [3, 0.9, 0, 0], [0.05, 0, 0, 10]])
    return Case(
        "E (4, 4) whose row 1 is short (length 1e-7, not zero: its cosine with row 0 is 0.995), "
        "index 0, k 3",
        (E, 0, 3),
    )


@register
class NearestNeighbours(Task):
    id = "ex01.nearest_neighbours"
    lesson = f"{LESSON}, section 'Nearest neighbours'"
    reference = "course_lib.embeddings.nearest_neighbours"
    depends_on = ("cosine_similarity_matrix",)
    mistake_table = {
        "including_itself": "a vector is always most similar to itself; exclude `index` (e.g. "
        "set its similarity to -inf before ranking)",
        "skip_the_first": "skipping the first of the sorted similarities assumes the row itself "
        "comes first, but a copy (or any parallel row) ties with it at cosine 1 and may come "
        "first instead: exclude `index` itself (set its similarity to -inf before ranking)",
        "equal_rows_excluded": "you excluded every row equal to E[index], but another token "
        "may have the very same vector (a copy, at cosine 1), and it is a neighbour: exclude the "
        "position `index` alone (set similarity[index] to -inf)",
        "excluded_by_value": "you excluded the rows whose similarity is (close to) 1, but a copy "
        "or any parallel row also scores 1 and is a neighbour: exclude `index` itself (set its "
        "similarity to -inf), whatever the others score",
        "ascending": "you return the right neighbours in ascending order; the most similar "
        "comes first (descending similarity)",
        "least_similar": "argsort sorts ascending, so you took the least similar rows; sort by "
        "descending similarity (argsort(descending=True) or topk)",
        "least_similar_itself_first": "argsort sorts ascending (and topk(k, largest=False) "
        "takes the smallest), so `index` (at -inf) came "
        "first and the least similar rows after it; sort by descending similarity "
        "(argsort(descending=True) or topk, whose default is largest=True)",
        "by_dot_product": "you ranked by dot product, which favours long vectors; rank by cosine "
        "similarity",
        "similarities": "topk gives the similarities (.values) and their rows (.indices); "
        "return the rows, topk(k).indices",
        "itself_at_zero": "a similarity of 0 does not exclude the row itself: cosine similarity "
        "goes down to -1, so rows less similar than 0 rank below it; set its similarity to -inf",
        "itself_at_minus_one": "-1 does not exclude the row itself: a row pointing the opposite "
        "way also has cosine -1, and the tie kept `index`; set its similarity to -inf",
        "removed_after": "you took the top k and then removed `index`, which leaves k - 1 rows; "
        "exclude `index` before ranking (set its similarity to -inf)",
        "nan_for_zero_rows": "a zero row's similarity came out as NaN (0/0), and topk ranks NaN "
        "above every number; clamp the lengths as in cosine_similarity_matrix (or call yours), "
        "so a zero vector has similarity 0",
        "row_removed": "after removing row `index`, the rows after it moved up by one, so "
        "your positions are not rows of E: add 1 to those >= index (or keep every row and set "
        "the similarity of `index` to -inf)",
        "row_removed_shifted_past": "after removing row `index`, every row from `index` on moved "
        "up by one: add 1 to the positions >= index, not only > index (or keep every row and "
        "set the similarity of `index` to -inf)",
        "top_three": "you return 3 rows whatever k is (lesson 01's top3 takes the top 3): "
        "return the top k, topk(k)",
        "by_distance": "you ranked by Euclidean distance, which depends on the vectors' lengths; "
        "rank by cosine similarity (the angle between them)",
        "eps_in_length": "an epsilon added to every length (norm + 1e-8) shrinks the similarity "
        "of a short row, enough to move it down the ranking; guard only the zero lengths, "
        "norm.clamp_min(1e-12), as in cosine_similarity_matrix",
        "int32": "your indices are int32; return them as topk (or argsort) gives them, int64 "
        "(long), with no .int() (and dtype=torch.long for a tensor you build from a list)",
    }

    def cases(self, gen):
        lengths = torch.tensor([[0.1], [5.0], [0.3], [9.0], [1.0], [0.05], [2.0], [40.0]])
        first = randn(gen, 8, 5)
        similarity = unit_rows(first) @ unit_rows(first)[0]
        similarity[0] = float("-inf")
        return [
            Case("E (8, 5), index 0, k 3", (first, 0, 3)),
            repeated(  # similarities cached by the shape of E passed, or failed as ascending
                "E (8, 5) again, other values, index 0, k 3: the first case's shape",
                (randn(gen, 8, 5), 0, 3),
                "the first E (8, 5)",
                similarity.topk(3).indices,
            ),
            Case("E (10, 4), index 7, k 5", (randn(gen, 10, 4), 7, 5)),
            Case("float64 E (6, 3), index 2, k 2", (randn(gen, 6, 3, dtype=torch.float64), 2, 2)),
            Case("E (5, 6), index 4, k 4 (every other row)", (randn(gen, 5, 6), 4, 4)),
            Case(
                "E (8, 16) whose rows have very different lengths, index 1, k 4 (rank by cosine "
                "similarity, not by dot product)",
                (randn(gen, 8, 16) * lengths, 1, 4),
            ),
            Case("E (12, 8), index 5, k 1", (randn(gen, 12, 8), 5, 1)),
            _parallel_copy_case(),
            _exact_copy_case(),
            _zero_row_case(gen),
            _opposite_row_case(),
            _short_row_case(),
        ]

    def diagnose(self, got, want, case):
        """The right rows in another order: topk(k, sorted=False), or the indices sorted."""
        if kept_result(got, case):
            return kept_result(got, case)
        if isinstance(got, torch.Tensor) and got.shape == want.shape and not got.equal(want):
            if got.sort().values.equal(want.sort().values):
                return (
                    "these are the right rows, but not most similar first: keep the order of "
                    "topk (sorted=True, its default), and do not sort the indices themselves"
                )
        return None

    def wrong(self, E, index, k, *, mistake):
        if mistake == "by_distance":
            distances = (E - E[index]).norm(dim=-1)
            distances[index] = float("inf")
            return distances.topk(k, largest=False).indices
        if mistake == "by_dot_product":
            similarity = E @ E[index]
        elif mistake in ("nan_for_zero_rows", "eps_in_length"):
            lengths = E.norm(dim=-1, keepdim=True) + (1e-8 if mistake == "eps_in_length" else 0)
            similarity = (E / lengths) @ (E / lengths)[index]
        else:
            similarity = unit_rows(E) @ unit_rows(E)[index]  # (n,)
        if mistake == "skip_the_first":  # assumes the row itself sorts first
            return similarity.argsort(descending=True, stable=True)[1 : k + 1]
        if mistake in ("row_removed", "row_removed_shifted_past"):  # ranked without the row
            top = torch.cat([similarity[:index], similarity[index + 1 :]]).topk(k).indices
            return top if mistake == "row_removed" else top + (top > index).long()
        if mistake == "removed_after":
            top = similarity.topk(k).indices
            return top[top != index]
        if mistake in ("least_similar", "least_similar_itself_first"):
            similarity[index] = float("inf" if mistake == "least_similar" else "-inf")
            return similarity.argsort()[:k]
        if mistake == "excluded_by_value":  # every row at cosine ~1, the copies too
            similarity[similarity > 0.9999] = float("-inf")
        if mistake == "equal_rows_excluded":  # "itself" found by value: exact copies go too
            similarity[(E == E[index]).all(dim=-1)] = float("-inf")
        if mistake != "including_itself":
            own = {"itself_at_zero": 0.0, "itself_at_minus_one": -1.0}  # else -inf
            similarity[index] = own.get(mistake, float("-inf"))
        top = similarity.topk(3 if mistake == "top_three" else k)  # lesson 01's top3, copied
        if mistake in ("similarities", "int32"):
            return top.values if mistake == "similarities" else top.indices.int()
        return top.indices.flip(0) if mistake == "ascending" else top.indices
