"""ex01, tokens and embeddings: one-hot vectors, the embedding look-up, cosine similarity,
nearest neighbours."""

from __future__ import annotations

import torch

from ..core import Case, Task, register

LESSON = "lesson 01"


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


def randint(gen: torch.Generator, high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=gen)


def _unchecked_one_hot(ids, vocab_size):
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


def _unit_rows(E):
    return E / E.norm(dim=-1, keepdim=True).clamp_min(1e-12)


@register
class OneHot(Task):
    id = "ex01.one_hot"
    lesson = f"{LESSON}, section 'One-hot vectors'"
    reference = "course_lib.embeddings.one_hot"
    forbidden = ("torch.nn.functional.one_hot",)

    def cases(self, gen):
        return [
            Case("ids [2, 0, 1] with vocab_size=4", (torch.tensor([2, 0, 1]), 4)),
            Case("a batch of ids (3, 5), vocab_size=7", (randint(gen, 7, 3, 5), 7)),
            Case("ids (2, 3, 4), vocab_size=10", (randint(gen, 10, 2, 3, 4), 10)),
            Case("int32 ids (6,), vocab_size=3",
                 (randint(gen, 3, 6).to(torch.int32), 3)),
            Case("a single id (a 0-d tensor) 4, vocab_size=5", (torch.tensor(4), 5)),
            Case("ids [1, 5, 2] with vocab_size=5: id 5 is out of range, so it must raise "
                 "ValueError instead of giving an all-zero row",
                 (torch.tensor([1, 5, 2]), 5), raises=ValueError),
            Case("ids [0, -1] with vocab_size=4: a negative id must raise ValueError",
                 (torch.tensor([0, -1]), 4), raises=ValueError),
            Case("float ids [0.0, 2.0] with vocab_size=3: ids must be integers, so this must "
                 "raise TypeError instead of being accepted", (torch.tensor([0.0, 2.0]), 3),
                 raises=TypeError),
        ]

    def mistakes(self):
        return [
            (lambda ids, vocab_size: (ids.unsqueeze(-1) == torch.arange(vocab_size)).long(),
             "your one-hot vectors are integers (int64); return floats (float32), so they can be "
             "multiplied with a float embedding table"),
            (lambda ids, vocab_size: ids.unsqueeze(-1) == torch.arange(vocab_size),
             "your one-hot vectors are booleans; return floats (float32) with .float()"),
            (lambda ids, vocab_size: (ids.unsqueeze(-1) == torch.arange(vocab_size)).double(),
             "your one-hot vectors are float64; the task asks for float32"),
            (lambda ids, vocab_size: _unchecked_one_hot(ids, vocab_size).transpose(-2, -1)
             if ids.dim() >= 1 else _unchecked_one_hot(ids, vocab_size),
             "the vocabulary axis must be the last one: (..., vocab_size)"),
        ]


@register
class Embed(Task):
    id = "ex01.embed"
    lesson = f"{LESSON}, section 'An embedding is a one-hot matrix product'"
    reference = "course_lib.embeddings.embed"
    forbidden = ("torch.nn.Embedding", "torch.nn.functional.embedding", "torch.embedding")

    def cases(self, gen):
        return [
            Case("ids [3, 0] and a table (5, 2)", (torch.tensor([3, 0]), randn(gen, 5, 2))),
            Case("ids (2, 4) and a table (9, 3)", (randint(gen, 3, 2, 4), randn(gen, 9, 3))),
            Case("ids (2, 3, 5) and a table (6, 8)", (randint(gen, 6, 2, 3, 5), randn(gen, 6, 8))),
            Case("float64 table (7, 4), ids (3, 6)",
                 (randint(gen, 4, 3, 6), randn(gen, 7, 4, dtype=torch.float64))),
            Case("ids [0, 4] with a table of 4 rows: id 4 is out of range, must raise ValueError",
                 (torch.tensor([0, 4]), randn(gen, 4, 3)), raises=ValueError),
        ]

    def mistakes(self):
        def transposed(ids, table):
            # table used as (d, vocab_size): one-hot over d, then table.T
            return (ids.unsqueeze(-1) == torch.arange(table.shape[-1])).to(table.dtype) @ table.T

        def float32_always(ids, table):
            return _unchecked_one_hot(ids, table.shape[0]) @ table.float()

        return [
            (transposed, "you treated the table as (d, vocab_size); it is (vocab_size, d), one row "
             "per token, so the product is one_hot(ids, vocab_size) @ table"),
            (float32_always, "keep the table's dtype: make the one-hot vectors in table.dtype"),
        ]

    def diagnose(self, got, want, case):
        if isinstance(got, torch.Tensor) and got.shape[-1:] == case.args[1].shape[:1]:
            return ("the last axis of your result has vocab_size entries; it should have d: "
                    "one_hot(ids) (..., vocab_size) @ table (vocab_size, d)")
        return None


@register
class CosineSimilarityMatrix(Task):
    id = "ex01.cosine_similarity_matrix"
    lesson = f"{LESSON}, section 'Cosine similarity'"
    reference = "course_lib.embeddings.cosine_similarity_matrix"
    forbidden = ("torch.nn.functional.cosine_similarity", "torch.cosine_similarity",
                 "torch.nn.CosineSimilarity")

    def cases(self, gen):
        with_zero = randn(gen, 5, 4)
        with_zero[2] = 0.0
        with_zero64 = randn(gen, 4, 6, dtype=torch.float64)
        with_zero64[0] = 0.0
        scales = torch.tensor([[0.01], [1.0], [30.0], [500.0]])
        return [
            Case("E (4, 3)", (randn(gen, 4, 3),)),
            Case("E (6, 10) whose rows have very different lengths (0.01 to 500)",
                 (torch.cat([randn(gen, 4, 10) * scales, randn(gen, 2, 10)]),)),
            Case("float64 E (5, 7)", (randn(gen, 5, 7, dtype=torch.float64),)),
            Case("E (5, 4) whose row 2 is all zeros (its similarities must be 0, not NaN)",
                 (with_zero,)),
            Case("float64 E (4, 6) whose row 0 is all zeros", (with_zero64,)),
            Case("a single vector E (1, 5)", (randn(gen, 1, 5),)),
        ]

    def mistakes(self):
        def divide_by_squared_norms(E):
            sq = (E * E).sum(-1, keepdim=True)
            return (E @ E.T) / (sq * sq.T)

        return [
            (lambda E: E @ E.T, "those are raw dot products; divide by the lengths |E_i| |E_j| "
             "(normalise every row to length 1 first)"),
            (lambda E: (E / E.norm(dim=-1, keepdim=True)) @ (E / E.norm(dim=-1, keepdim=True)).T,
             "a zero vector has length 0 and 0/0 = NaN; clamp the lengths (e.g. "
             "norm.clamp_min(1e-12)) so a zero vector gets similarity 0"),
            (lambda E: (E @ E.T) / E.norm(dim=-1, keepdim=True).clamp_min(1e-12),
             "you divided by the length of only one of the two vectors; divide by |E_i| |E_j|"),
            (divide_by_squared_norms,
             "divide by the lengths |E_i| |E_j|, not by the squared lengths"),
        ]


@register
class NearestNeighbours(Task):
    id = "ex01.nearest_neighbours"
    lesson = f"{LESSON}, section 'Nearest neighbours'"
    reference = "course_lib.embeddings.nearest_neighbours"

    def cases(self, gen):
        lengths = torch.tensor([[0.1], [5.0], [0.3], [9.0], [1.0], [0.05], [2.0], [40.0]])
        return [
            Case("E (8, 5), index 0, k 3", (randn(gen, 8, 5), 0, 3)),
            Case("E (10, 4), index 7, k 5", (randn(gen, 10, 4), 7, 5)),
            Case("float64 E (6, 3), index 2, k 2", (randn(gen, 6, 3, dtype=torch.float64), 2, 2)),
            Case("E (5, 6), index 4, k 4 (every other row)", (randn(gen, 5, 6), 4, 4)),
            Case("E (8, 16) whose rows have very different lengths, index 1, k 4 (rank by cosine "
                 "similarity, not by dot product)", (randn(gen, 8, 16) * lengths, 1, 4)),
            Case("E (12, 8), index 5, k 1", (randn(gen, 12, 8), 5, 1)),
        ]

    def mistakes(self):
        def including_itself(E, index, k):
            return (_unit_rows(E) @ _unit_rows(E)[index]).topk(k).indices

        def ascending(E, index, k):
            sims = _unit_rows(E) @ _unit_rows(E)[index]
            sims[index] = float("-inf")
            return sims.topk(k).indices.flip(0)

        def least_similar(E, index, k):
            sims = _unit_rows(E) @ _unit_rows(E)[index]
            sims[index] = float("inf")
            return sims.argsort()[:k]

        def by_dot_product(E, index, k):
            sims = E @ E[index]
            sims[index] = float("-inf")
            return sims.topk(k).indices

        return [
            (including_itself, "a vector is always most similar to itself; exclude `index` "
             "(e.g. set its similarity to -inf before ranking)"),
            (ascending, "you return the right neighbours in ascending order; the most similar "
             "comes first (descending similarity)"),
            (least_similar, "argsort sorts ascending, so you took the least similar rows; "
             "sort by descending similarity (argsort(descending=True) or topk)"),
            (by_dot_product, "you ranked by dot product, which favours long vectors; rank by "
             "cosine similarity"),
        ]


# --------------------------------------------------------------------------------------------
# Review 2026-11-23 (EX01-1 to EX01-4), kept apart so that it merges with work on the cases above
# --------------------------------------------------------------------------------------------

from ..core import GradingError, extend_task  # noqa: E402


def _cosine_columns(E):
    unit = E / E.norm(dim=0, keepdim=True).clamp_min(1e-12)
    return unit @ unit.T


extend_task(CosineSimilarityMatrix, mistakes=[
    (_cosine_columns, "you normalised the columns (dim=0); each ROW is a vector: divide every "
     "row by its own length, E.norm(dim=-1, keepdim=True)"),
])


def _bool_ids_case(gen):
    return [Case("bool ids (3,) (True/False are not token ids: must raise TypeError)",
                 (torch.tensor([True, False, True]), 2), raises=TypeError)]


extend_task(OneHot, cases=_bool_ids_case)


class _NamesTheBadId:
    """Wraps OneHot.call: a ValueError for an id out of range must name that id."""

    def __init__(self, call):
        self.inner = call

    def __call__(self, task, obj, case):
        bad = case.data.get("bad_id")
        if bad is None:
            return self.inner(task, obj, case)
        try:
            value = obj(*case.args, **case.kwargs)
        except ValueError as error:
            if str(bad) not in str(error):
                raise GradingError(
                    f"your ValueError says {str(error)!r}; name the id that is out of range "
                    f"({bad}) so that whoever calls one_hot knows what to fix"
                ) from None
            raise
        return value


_NAMED_ID_CALL = _NamesTheBadId(OneHot.call)
OneHot.call = lambda self, obj, case: _NAMED_ID_CALL(self, obj, case)
_original_one_hot_cases = OneHot.cases


def _one_hot_cases_with_named_id(self, gen):
    return _original_one_hot_cases(self, gen) + [
        Case("ids (2, 3) holding 7 with vocab_size 5: a ValueError whose message names 7",
             (torch.tensor([[0, 1, 2], [3, 7, 4]]), 5), data={"bad_id": 7}, raises=ValueError),
    ]


OneHot.cases = _one_hot_cases_with_named_id


def _embed_call(self, obj, case, _inner=Embed.call):
    from torch.overrides import TorchFunctionMode

    table = case.args[1]

    class Indexing(TorchFunctionMode):
        used = False

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.__getitem__ and args and args[0] is table:
                Indexing.used = True
            elif func in (torch.index_select, torch.Tensor.index_select, torch.take,
                          torch.gather, torch.Tensor.gather) and args and args[0] is table:
                Indexing.used = True
            return func(*args, **(kwargs or {}))

    with Indexing():
        value = _inner(self, obj, case)
    if Indexing.used:
        raise GradingError("you looked the rows up by indexing the table (table[ids]); the "
                           "task asks for the one-hot matrix product one_hot(ids) @ table, "
                           "which is what nn.Embedding computes")
    return value


Embed.call = _embed_call
