"""ex01.embed: the embedding look-up as a one-hot matrix product."""

from __future__ import annotations

import functools

import torch

from ...core import Case, GradingError, register
from ..common import HintOnError, failure_of, randint, randn
from ._shared import LESSON, kept_result, repeated, unchecked_one_hot

_WRONG_AXIS = (
    "did you take vocab_size from the wrong axis? table.shape[1] is d, the length of each "
    "embedding: one_hot(ids, table.shape[0]) @ table"
)
_LOOK_UPS = (
    torch.index_select,
    torch.Tensor.index_select,
    torch.take,
    torch.Tensor.take,
    torch.take_along_dim,
    torch.Tensor.take_along_dim,
    torch.gather,
    torch.Tensor.gather,
)


def _by_ids(index) -> bool:
    """True for an index that looks rows up by id (a tensor or a list of them), not for the
    slices and single positions a one-hot product may use (table[:, :], table[0])."""
    if isinstance(index, (torch.Tensor, list)):
        return True
    return isinstance(index, tuple) and any(isinstance(i, (torch.Tensor, list)) for i in index)


def _looked_up(calls, table) -> bool:
    """True when one of the recorded calls looks rows of `table` up by id."""
    return any(
        args
        and args[0] is table
        and (func is not torch.Tensor.__getitem__ or _by_ids(args[1] if len(args) > 1 else None))
        for func, args, _ in calls
    )


def _refuses(one_hot, ids, vocab_size) -> bool:
    """True when `one_hot` (the learner's, beside their embed) raises ValueError on `ids`, which
    all lie in [0, vocab_size): the refusal is then one_hot's off-by-one, not the table's axis."""
    if not callable(one_hot):
        return False
    try:
        one_hot(ids, vocab_size)
    except ValueError:
        return True
    except Exception:  # noqa: BLE001  (a learner's code may raise anything)
        return False
    return False


@register
class Embed(HintOnError):
    id = "ex01.embed"
    lesson = f"{LESSON}, section 'An embedding is a one-hot matrix product'"
    reference = "course_lib.embeddings.embed"
    backward = True  # the table is learned (an embedding): its gradients are judged too
    depends_on = ("one_hot",)
    forbidden = ("torch.nn.Embedding", "torch.nn.functional.embedding", "torch.embedding")
    watch = (torch.Tensor.__getitem__, *_LOOK_UPS)
    mistake_table = {
        "transposed": "you treated the table as (d, vocab_size); it is (vocab_size, d), one row "
        "per token, so the product is one_hot(ids, vocab_size) @ table",
        "float32_always": "keep the table's dtype: make the one-hot vectors in table.dtype, with "
        "no .float() on the table or on the result",
        "float32_one_hot": "one_hot gives float32 vectors, and a matrix product needs both sides "
        "in one dtype: convert them to the table's, one_hot(ids, vocab_size).to(table.dtype) @ "
        "table",
        "vocab_from_last_axis": _WRONG_AXIS,
        "float32_product": "you multiplied in float32 and converted the result back: that loses "
        "float64's digits, and its range (float32 ends near 3.4e38); convert the one-hot vectors "
        "to the table's dtype instead, one_hot(ids, vocab_size).to(table.dtype) @ table",
        "lesson_vocab": "one_hot(ids, 10) makes the lesson's 10 columns; this table has "
        "table.shape[0] rows, so one_hot(ids, table.shape[0]) @ table",
        "squeezed": "squeeze() drops every axis of length 1, here the one sequence's batch axis "
        "too; the result is (..., d), one vector per id, with the axes of ids kept",
        "float64_always": "your embeddings are float64 for a float32 table: keep the table's "
        "dtype, with no .double() (or .to(torch.float64)) on either side: "
        "one_hot(ids, vocab_size).to(table.dtype) @ table",
    }

    def cases(self, gen):
        ids, table = randint(gen, 3, 2, 4), randn(gen, 9, 3)  # asked again, last
        return [
            Case("ids [3, 0] and a table (5, 2)", (torch.tensor([3, 0]), randn(gen, 5, 2))),
            Case("ids (2, 4) and a table (9, 3)", (ids, table)),
            Case("ids (2, 3, 5) and a table (6, 8)", (randint(gen, 6, 2, 3, 5), randn(gen, 6, 8))),
            Case(
                "float64 table (7, 4), ids (3, 6)",
                (randint(gen, 4, 3, 6), randn(gen, 7, 4, dtype=torch.float64)),
            ),
            Case(
                "float64 table (5, 3) with entries around 1e40, beyond float32's range (the "
                "product must be done in float64), ids (2, 3)",
                (randint(gen, 5, 2, 3), randn(gen, 5, 3, dtype=torch.float64, scale=1e40)),
            ),
            Case(
                "ids [0, 4] with a table of 4 rows: id 4 is out of range, must raise ValueError",
                (torch.tensor([0, 4]), randn(gen, 4, 3)),
                raises=ValueError,
            ),
            Case(
                "ids [1, -1] with a table of 4 rows: a negative id is out of range too (table[-1] "
                "or eye[-1] would be the last row), so it must raise ValueError",
                (torch.tensor([1, -1]), randn(gen, 4, 3)),
                raises=ValueError,
            ),
            Case(
                "one sequence: ids (1, 3) and a table (4, 2)",
                (randint(gen, 4, 1, 3), randn(gen, 4, 2)),
            ),
            repeated(  # a one-hot cached by the shape of ids and vocab_size passed
                "ids (2, 4) again with the same table (9, 3), other ids (each 3 more): the "
                "second case's shapes",
                ((ids + 3) % 9, table.clone()),
                "the second case's ids",
                unchecked_one_hot(ids, 9) @ table,
            ),
        ]

    def checked(self, value, case, calls):
        """Rows looked up by indexing are not the product the task asks for."""
        if _looked_up(calls, case.args[1]):
            raise GradingError(
                "you looked the rows up by indexing the table (table[ids]); the task asks for "
                "the one-hot matrix product one_hot(ids) @ table, which is what nn.Embedding "
                "computes"
            )
        return value

    def _hint_for_error(self, obj, case, failure, error=None) -> str | None:
        """The hint when the learner's code raised on ids that are all rows of the table:
        one_hot(ids, d) refuses ids >= d, or makes (..., d) vectors that cannot multiply a
        (vocab_size, d) table."""
        ids, table = case.args
        vocab_size, d = table.shape[0], table.shape[-1]
        if vocab_size == d or not ids.numel() or ids.min() < 0 or ids.max() >= vocab_size:
            return None
        over_d = functools.partial(self.wrong, mistake="vocab_from_last_axis")
        refused = isinstance(error, ValueError) and ids.max() >= d  # one_hot(ids, d) refused
        if refused and _refuses(getattr(obj, "__globals__", {}).get("one_hot"), ids, vocab_size):
            return None  # the learner's one_hot refuses them at the right size: its own slip
        if not refused and (failure is None or failure != failure_of(over_d, ids, table)):
            return None
        return (
            f"every id here is a row of the table (vocab_size = table.shape[0] = {vocab_size}); "
            + _WRONG_AXIS
        )

    def wrong(self, ids, table, *, mistake):
        over_d = mistake in ("transposed", "vocab_from_last_axis")
        vocab_size = 10 if mistake == "lesson_vocab" else table.shape[-1 if over_d else 0]
        hot = unchecked_one_hot(ids, vocab_size)  # float32
        if mistake == "transposed":  # the table used as (d, vocab_size)
            return hot.to(table.dtype) @ table.T
        if mistake == "float32_always":
            return hot @ table.float()
        if mistake == "float64_always":  # "float64 to be safe": a float32 table's dtype is lost
            return hot.double() @ table.double()
        if mistake == "float32_one_hot":  # float32 times a float64 table: it raises
            return hot @ table
        if mistake == "float32_product":  # the product in float32, converted back
            return (hot @ table.float()).to(table.dtype)
        if mistake == "squeezed":  # the ids checked as the task asks, the result squeezed
            if ((ids < 0) | (ids >= vocab_size)).any():
                raise ValueError(f"ids must be in [0, {vocab_size})")
            return (hot.to(table.dtype) @ table).squeeze()
        return hot.to(table.dtype) @ table

    def diagnose(self, got, want, case):
        if kept_result(got, case):
            return kept_result(got, case)
        if isinstance(got, torch.Tensor) and got.shape[-1:] == case.args[1].shape[:1]:
            return (
                "the last axis of your result has vocab_size entries; it should have d: "
                "one_hot(ids) (..., vocab_size) @ table (vocab_size, d)"
            )
        return None
