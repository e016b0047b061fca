"""ex01, tokens and embeddings: one-hot vectors, the embedding look-up, cosine similarity,
nearest neighbours; and byte-level BPE: counting adjacent pairs, merging a pair, encoding with a
merge table in the order it was learned."""

from __future__ import annotations

import torch

from ..core import Case, Task, register
from .common import OpRecorder, failure_of, randint, randn

LESSON = "lesson 01"


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
            Case("int32 ids (6,), vocab_size=3", (randint(gen, 3, 6).to(torch.int32), 3)),
            Case("a single id (a 0-d tensor) 4, vocab_size=5", (torch.tensor(4), 5)),
            Case(
                "ids [1, 5, 2] with vocab_size=5: id 5 is out of range, so it must raise "
                "ValueError instead of giving an all-zero row",
                (torch.tensor([1, 5, 2]), 5),
                raises=ValueError,
            ),
            Case(
                "ids [0, -1] with vocab_size=4: a negative id must raise ValueError",
                (torch.tensor([0, -1]), 4),
                raises=ValueError,
            ),
            Case(
                "float ids [0.0, 2.0] with vocab_size=3: ids must be integers, so this must "
                "raise TypeError instead of being accepted",
                (torch.tensor([0.0, 2.0]), 3),
                raises=TypeError,
            ),
        ]

    def mistakes(self):
        return [
            (
                lambda ids, vocab_size: (ids.unsqueeze(-1) == torch.arange(vocab_size)).long(),
                "your one-hot vectors are integers (int64); return floats (float32), so they can "
                "be multiplied with a float embedding table",
            ),
            (
                lambda ids, vocab_size: ids.unsqueeze(-1) == torch.arange(vocab_size),
                "your one-hot vectors are booleans; return floats (float32) with .float()",
            ),
            (
                lambda ids, vocab_size: (ids.unsqueeze(-1) == torch.arange(vocab_size)).double(),
                "your one-hot vectors are float64; the task asks for float32",
            ),
            (
                lambda ids, vocab_size: (
                    _unchecked_one_hot(ids, vocab_size).transpose(-2, -1)
                    if ids.dim() >= 1
                    else _unchecked_one_hot(ids, vocab_size)
                ),
                "the vocabulary axis must be the last one: (..., vocab_size)",
            ),
        ]


@register
class Embed(Task):
    id = "ex01.embed"
    lesson = f"{LESSON}, section 'An embedding is a one-hot matrix product'"
    reference = "course_lib.embeddings.embed"
    depends_on = ("one_hot",)
    forbidden = ("torch.nn.Embedding", "torch.nn.functional.embedding", "torch.embedding")

    def cases(self, gen):
        return [
            Case("ids [3, 0] and a table (5, 2)", (torch.tensor([3, 0]), randn(gen, 5, 2))),
            Case("ids (2, 4) and a table (9, 3)", (randint(gen, 3, 2, 4), randn(gen, 9, 3))),
            Case("ids (2, 3, 5) and a table (6, 8)", (randint(gen, 6, 2, 3, 5), randn(gen, 6, 8))),
            Case(
                "float64 table (7, 4), ids (3, 6)",
                (randint(gen, 4, 3, 6), randn(gen, 7, 4, dtype=torch.float64)),
            ),
            Case(
                "ids [0, 4] with a table of 4 rows: id 4 is out of range, must raise ValueError",
                (torch.tensor([0, 4]), randn(gen, 4, 3)),
                raises=ValueError,
            ),
        ]

    def mistakes(self):
        def transposed(ids, table):
            # table used as (d, vocab_size): one-hot over d, then table.T
            return (ids.unsqueeze(-1) == torch.arange(table.shape[-1])).to(table.dtype) @ table.T

        def float32_always(ids, table):
            return _unchecked_one_hot(ids, table.shape[0]) @ table.float()

        def float32_one_hot(ids, table):  # one_hot's float32 times a float64 table: it raises
            return _unchecked_one_hot(ids, table.shape[0]).float() @ table

        return [
            (
                transposed,
                "you treated the table as (d, vocab_size); it is (vocab_size, d), one row "
                "per token, so the product is one_hot(ids, vocab_size) @ table",
            ),
            (float32_always, "keep the table's dtype: make the one-hot vectors in table.dtype"),
            (
                float32_one_hot,
                "one_hot gives float32 vectors, and a matrix product needs both sides in one "
                "dtype: convert them to the table's, one_hot(ids, vocab_size).to(table.dtype) "
                "@ table",
            ),
        ]

    def diagnose(self, got, want, case):
        if isinstance(got, torch.Tensor) and got.shape[-1:] == case.args[1].shape[:1]:
            return (
                "the last axis of your result has vocab_size entries; it should have d: "
                "one_hot(ids) (..., vocab_size) @ table (vocab_size, d)"
            )
        return None


@register
class CosineSimilarityMatrix(Task):
    id = "ex01.cosine_similarity_matrix"
    lesson = f"{LESSON}, section 'Cosine similarity'"
    reference = "course_lib.embeddings.cosine_similarity_matrix"
    forbidden = (
        "torch.nn.functional.cosine_similarity",
        "torch.cosine_similarity",
        "torch.nn.CosineSimilarity",
    )

    def cases(self, gen):
        with_zero = randn(gen, 5, 4)
        with_zero[2] = 0.0
        with_zero64 = randn(gen, 4, 6, dtype=torch.float64)
        with_zero64[0] = 0.0
        scales = torch.tensor([[0.01], [1.0], [30.0], [500.0]])
        return [
            Case("E (4, 3)", (randn(gen, 4, 3),)),
            Case(
                "E (6, 10) whose rows have very different lengths (0.01 to 500)",
                (torch.cat([randn(gen, 4, 10) * scales, randn(gen, 2, 10)]),),
            ),
            Case("float64 E (5, 7)", (randn(gen, 5, 7, dtype=torch.float64),)),
            Case(
                "E (5, 4) whose row 2 is all zeros (its similarities must be 0, not NaN)",
                (with_zero,),
            ),
            Case("float64 E (4, 6) whose row 0 is all zeros", (with_zero64,)),
            Case("a single vector E (1, 5)", (randn(gen, 1, 5),)),
        ]

    def mistakes(self):
        def divide_by_squared_norms(E):
            sq = (E * E).sum(-1, keepdim=True)
            return (E @ E.T) / (sq * sq.T)

        return [
            (
                lambda E: E @ E.T,
                "those are raw dot products; divide by the lengths |E_i| |E_j| "
                "(normalise every row to length 1 first)",
            ),
            (
                lambda E: (E / E.norm(dim=-1, keepdim=True)) @ (E / E.norm(dim=-1, keepdim=True)).T,
                "a zero vector has length 0 and 0/0 = NaN; clamp the lengths (e.g. "
                "norm.clamp_min(1e-12)) so a zero vector gets similarity 0",
            ),
            (
                lambda E: (E @ E.T) / E.norm(dim=-1, keepdim=True).clamp_min(1e-12),
                "you divided by the length of only one of the two vectors; divide by |E_i| |E_j|",
            ),
            (
                divide_by_squared_norms,
                "divide by the lengths |E_i| |E_j|, not by the squared lengths",
            ),
        ]


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


@register
class NearestNeighbours(Task):
    id = "ex01.nearest_neighbours"
    lesson = f"{LESSON}, section 'Nearest neighbours'"
    reference = "course_lib.embeddings.nearest_neighbours"
    depends_on = ("cosine_similarity_matrix",)

    def cases(self, gen):
        lengths = torch.tensor([[0.1], [5.0], [0.3], [9.0], [1.0], [0.05], [2.0], [40.0]])
        return [
            Case("E (8, 5), index 0, k 3", (randn(gen, 8, 5), 0, 3)),
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

        def skip_the_first(E, index, k):  # assumes the row itself sorts first
            sims = _unit_rows(E) @ _unit_rows(E)[index]
            return sims.argsort(descending=True, stable=True)[1 : k + 1]

        def by_dot_product(E, index, k):
            sims = E @ E[index]
            sims[index] = float("-inf")
            return sims.topk(k).indices

        return [
            (
                including_itself,
                "a vector is always most similar to itself; exclude `index` "
                "(e.g. set its similarity to -inf before ranking)",
            ),
            (
                skip_the_first,
                "skipping the first of the sorted similarities assumes the row itself comes "
                "first, but a copy (or any parallel row) ties with it at cosine 1 and may come "
                "first instead: "
                "exclude `index` itself (set its similarity to -inf before ranking)",
            ),
            (
                ascending,
                "you return the right neighbours in ascending order; the most similar "
                "comes first (descending similarity)",
            ),
            (
                least_similar,
                "argsort sorts ascending, so you took the least similar rows; "
                "sort by descending similarity (argsort(descending=True) or topk)",
            ),
            (
                by_dot_product,
                "you ranked by dot product, which favours long vectors; rank by cosine similarity",
            ),
        ]


# --------------------------------------------------------------------------------------------
# Byte-level BPE: counting pairs, merging one pair, encoding with a merge table
# --------------------------------------------------------------------------------------------

BPE_LESSON = f"{LESSON}, section 'Byte-level BPE'"
# Calling any of the course's finished BPE pieces skips the point of these tasks.
_BPE_FINISHED = (
    "course_lib.bpe.pair_counts",
    "course_lib.bpe.merge_pair",
    "course_lib.bpe.bpe_encode",
    "course_lib.bpe.BPETokenizer",
)
_HELLO = list(b"hello, hello")  # bytes: h=104 e=101 l=108 o=111 ","=44 " "=32


def _random_ids(gen: torch.Generator, high: int, n: int, offset: int = 0) -> list[int]:
    return (torch.randint(0, high, (n,), generator=gen) + offset).tolist()


def _adjacent(ids):
    return [(ids[i], ids[i + 1]) for i in range(len(ids) - 1)]


def _merged(ids, pair, new_id):
    # A copy of course_lib.bpe.merge_pair on purpose: the hints' wrong variants are built on
    # it, and a call to the finished version would be reported as "forbidden", not judged.
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _learned_merges(ids: list[int], num_merges: int, first_id: int) -> dict:
    """A merge table learned from `ids` the BPE way (most frequent pair, ties smallest)."""
    merges = {}
    for new_id in range(first_id, first_id + num_merges):
        counts: dict = {}
        for pair in _adjacent(ids):
            counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        merges[pair] = new_id
        ids = _merged(ids, pair, new_id)
    return merges


@register
class PairCounts(Task):
    id = "ex01.pair_counts"
    lesson = BPE_LESSON
    reference = "course_lib.bpe.pair_counts"
    forbidden = _BPE_FINISHED  # the reference among them is reported as such

    def cases(self, gen):
        return [
            Case("ids [3, 9]: one pair", ([3, 9],)),
            Case("ids [1, 2, 3, 4, 1, 2]: (1, 2) at both ends", ([1, 2, 3, 4, 1, 2],)),
            Case(
                "ids [4, 4, 4]: a run of three equal ids holds the pair (4, 4) twice", ([4, 4, 4],)
            ),
            Case(
                "ids [1, 1, 1, 1, 2, 1, 1, 1, 1, 1]: runs of four and five equal ids",
                ([1, 1, 1, 1, 2, 1, 1, 1, 1, 1],),
            ),
            Case("ids [1, 2, 2, 1]: (1, 2) and (2, 1) are different pairs", ([1, 2, 2, 1],)),
            Case("an empty list: no pairs", ([],)),
            Case("a single id [7]: no pairs", ([7],)),
            Case("the bytes of 'hello, hello'", (_HELLO,)),
            Case("40 random ids from 0..4", (_random_ids(gen, 5, 40),)),
            Case("25 random ids from 256..258 (merged tokens)", (_random_ids(gen, 3, 25, 256),)),
        ]

    def call(self, obj, case):
        (ids,) = case.args  # the learner's own copy: the grader sees it changed
        return obj(ids)

    def compare(self, got, want, case):
        if not isinstance(got, dict) or "__repr__" in got:
            kind = got["__repr__"] if isinstance(got, dict) else type(got).__name__
            return f"your result should be a dict {{(a, b): count}}, got {kind}"
        # outcomes carry their keys as text, "(1, 2)"; make sure both sides do
        got = {str(key): count for key, count in got.items()}
        want = {str(key): count for key, count in want.items()}
        for key, count in want.items():
            if key not in got:
                return f"the pair {key} is missing from your counts (it occurs {count} times)"
            if got[key] != count:
                return f"the pair {key} has count {got[key]!r}, expected {count}"
        for key in got:
            if key not in want:
                return (
                    f"your counts have the pair {key} (count {got[key]!r}), but it is not "
                    f"two neighbours in ids"
                )
        return None

    def mistakes(self):
        def distinct_pairs(ids):
            return dict.fromkeys(_adjacent(ids), 1)

        def non_overlapping(ids):
            counts, i = {}, 0
            while i < len(ids) - 1:
                pair = (ids[i], ids[i + 1])
                counts[pair] = counts.get(pair, 0) + 1
                i += 2 if pair[0] == pair[1] else 1
            return counts

        def last_pair_missed(ids):
            counts = {}
            for pair in _adjacent(ids)[:-1]:
                counts[pair] = counts.get(pair, 0) + 1
            return counts

        def wraps_around(ids):
            counts = {}
            for pair in _adjacent(ids) + ([(ids[-1], ids[0])] if ids else []):
                counts[pair] = counts.get(pair, 0) + 1
            return counts

        def even_positions_only(ids):
            counts = {}
            for pair in zip(ids[::2], ids[1::2], strict=False):
                counts[pair] = counts.get(pair, 0) + 1
            return counts

        def unordered(ids):
            counts = {}
            for pair in _adjacent(ids):
                pair = tuple(sorted(pair))
                counts[pair] = counts.get(pair, 0) + 1
            return counts

        return [
            (
                non_overlapping,
                "overlapping pairs count: [a, a, a] holds (a, a) twice, at positions "
                "0-1 and 1-2 (merging skips; counting does not)",
            ),
            (
                distinct_pairs,
                "you counted each distinct pair once; count every position at which it occurs",
            ),
            (
                last_pair_missed,
                "you missed the last pair: ids of length n have n - 1 pairs, the "
                "last one (ids[n - 2], ids[n - 1])",
            ),
            (wraps_around, "the last id has no right neighbour: do not wrap around to the first"),
            (
                even_positions_only,
                "you only counted pairs that start at even positions; every "
                "position but the last starts a pair",
            ),
            (unordered, "(a, b) and (b, a) are different pairs: keep the order of the ids"),
        ]


@register
class MergePair(Task):
    id = "ex01.merge_pair"
    lesson = BPE_LESSON
    reference = "course_lib.bpe.merge_pair"
    forbidden = _BPE_FINISHED  # the reference among them is reported as such

    def cases(self, gen):
        randoms = _random_ids(gen, 4, 40)
        return [
            Case(
                "ids [1, 2, 3, 1, 2], pair (1, 2), new_id 9: the pair at both ends",
                ([1, 2, 3, 1, 2], (1, 2), 9),
            ),
            Case(
                "ids [4, 4, 4], pair (4, 4), new_id 9: a run of three gives [9, 4]",
                ([4, 4, 4], (4, 4), 9),
            ),
            Case("ids [4, 4, 4, 4], pair (4, 4), new_id 9", ([4, 4, 4, 4], (4, 4), 9)),
            Case("ids [4, 4, 4, 4, 4], pair (4, 4), new_id 9", ([4, 4, 4, 4, 4], (4, 4), 9)),
            Case("ids [3, 3, 3, 5, 3, 3], pair (3, 3), new_id 7", ([3, 3, 3, 5, 3, 3], (3, 3), 7)),
            Case(
                "ids [2, 1, 2, 1], pair (1, 2), new_id 9: only the middle is (1, 2)",
                ([2, 1, 2, 1], (1, 2), 9),
            ),
            Case(
                "ids [8, 7, 8, 1, 7], pair (7, 8), new_id 9: ends on the pair's first id",
                ([8, 7, 8, 1, 7], (7, 8), 9),
            ),
            Case(
                "ids [1, 2, 3], pair (3, 1), new_id 9: the pair is absent", ([1, 2, 3], (3, 1), 9)
            ),
            Case("an empty list, pair (1, 2), new_id 9", ([], (1, 2), 9)),
            Case("a single id [5], pair (5, 6), new_id 9", ([5], (5, 6), 9)),
            Case(
                "the bytes of 'hello, hello', pair (108, 108) ('ll'), new_id 256",
                (_HELLO, (108, 108), 256),
            ),
            Case(
                f"40 random ids from 0..3, pair {tuple(randoms[5:7])}, new_id 300",
                (randoms, tuple(randoms[5:7]), 300),
            ),
        ]

    def call(self, obj, case):
        ids, pair, new_id = case.args
        given = list(ids)
        merged = obj(given, tuple(pair), new_id)
        if given != list(ids):  # the statement: "Leave ids itself unchanged"
            return {"changed_input": given}
        return merged

    def compare(self, got, want, case):
        if isinstance(got, dict) and "changed_input" in got:
            return (
                f"your function changed the list it was given (ids became "
                f"{got['changed_input']}): build a new list and leave ids as it was; a caller "
                "may still need it"
            )
        return super().compare(got, want, case)

    def mistakes(self):
        def overlapping(ids, pair, new_id):
            out, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    out.append(new_id)
                    i += 1
                    if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                        continue
                    i += 1
                else:
                    out.append(ids[i])
                    i += 1
            return out

        def one_step_after_a_merge(ids, pair, new_id):
            out, i = [], 0
            while i < len(ids):
                out.append(new_id if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair else ids[i])
                i += 1
            return out

        def first_only(ids, pair, new_id):
            for i in range(len(ids) - 1):
                if (ids[i], ids[i + 1]) == pair:
                    return ids[:i] + [new_id] + ids[i + 2 :]
            return list(ids)

        def right_to_left(ids, pair, new_id):
            return _merged(ids[::-1], pair[::-1], new_id)[::-1]

        def last_id_lost(ids, pair, new_id):
            out, i = [], 0
            while i < len(ids) - 1:
                if (ids[i], ids[i + 1]) == pair:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            return out

        def either_order(ids, pair, new_id):
            out, i = [], 0
            while i < len(ids):
                if (
                    i + 1 < len(ids)
                    and {ids[i], ids[i + 1]} == set(pair)
                    and len({ids[i], ids[i + 1]}) == len(set(pair))
                ):
                    out.append(new_id)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            return out

        return [
            (
                overlapping,
                "an id can be merged only once: after a merge, skip both ids of the "
                "pair, so [a, a, a] with (a, a) gives [X, a], not [X, X]",
            ),
            (
                one_step_after_a_merge,
                "after a merge you moved on by one id, so the pair's second id was copied "
                "(or merged) again: new_id stands for both ids, so step over both, i += 2",
            ),
            (first_only, "replace every occurrence of the pair, not only the first"),
            (right_to_left, "read left to right: [a, a, a] with (a, a) gives [X, a], not [a, X]"),
            (
                last_id_lost,
                "the last id went missing: when it does not start a pair, copy it to "
                "the result as it is",
            ),
            (either_order, "(a, b) is ordered: the neighbours (b, a) are not an occurrence of it"),
        ]

    def diagnose(self, got, want, case):
        ids = case.args[0]
        if got == list(ids) and want != list(ids):
            return (
                "nothing was merged: compare each (ids[i], ids[i + 1]) with `pair`, and "
                "append new_id where they are equal"
            )
        return None


@register
class BpeEncode(Task):
    id = "ex01.bpe_encode"
    lesson = f"{LESSON}, section 'Encoding with the learned merges'"
    reference = "course_lib.bpe.bpe_encode"
    depends_on = ("merge_pair",)
    forbidden = _BPE_FINISHED  # the reference among them is reported as such

    def cases(self, gen):
        hello_merges = {(108, 108): 256, (101, 256): 257, (104, 257): 258, (258, 111): 259}
        learned_from = _random_ids(gen, 3, 60)
        # The first five cases each catch one listed mistake first, in the order of mistakes(),
        # so that the hint a learner reads is the one for their mistake.
        return [
            Case(
                "ids [3, 4, 2, 3, 2, 3], merges {(2, 3): 10, (10, 2): 11}: (2, 3) is merged "
                "everywhere before (10, 2) may apply",
                ([3, 4, 2, 3, 2, 3], {(2, 3): 10, (10, 2): 11}),
            ),
            Case(
                "ids [4, 3, 1, 1], merges {(1, 1): 10, (4, 3): 11}: both merges apply",
                ([4, 3, 1, 1], {(1, 1): 10, (4, 3): 11}),
            ),
            Case(
                "ids [1, 4, 2, 1, 4], merges {(1, 4): 10, (4, 2): 11}: the two pairs overlap",
                ([1, 4, 2, 1, 4], {(1, 4): 10, (4, 2): 11}),
            ),
            Case(
                "ids [2, 4, 4, 4, 4, 4, 3], merges {(2, 4): 10, (4, 4): 11, (11, 4): 12}: "
                "(4, 4) is the most frequent pair, but (2, 4) was learned first",
                ([2, 4, 4, 4, 4, 4, 3], {(2, 4): 10, (4, 4): 11, (11, 4): 12}),
            ),
            Case(
                "ids [4, 1, 2, 4], merges {(1, 2): 10, (10, 4): 11, (4, 11): 12}: (4, 11) "
                "sorts before (10, 4) but was learned after it",
                ([4, 1, 2, 4], {(1, 2): 10, (10, 4): 11, (4, 11): 12}),
            ),
            Case(
                "ids [1, 2, 3, 1, 2, 1, 2], merges {(2, 3): 10, (1, 2): 11}: (1, 2) is more "
                "frequent, but (2, 3) was learned first",
                ([1, 2, 3, 1, 2, 1, 2], {(2, 3): 10, (1, 2): 11}),
            ),
            Case(
                "ids [1, 2, 3], merges {(1, 2): 10, (10, 3): 11}: a merge of a merged token",
                ([1, 2, 3], {(1, 2): 10, (10, 3): 11}),
            ),
            Case(
                "ids [4, 4, 4, 4, 4], merges {(4, 4): 10, (10, 10): 11}",
                ([4, 4, 4, 4, 4], {(4, 4): 10, (10, 10): 11}),
            ),
            Case(
                "the bytes of 'hello, hello' with four merges that build 'hello'",
                (_HELLO, hello_merges),
            ),
            Case("ids [5, 6, 7], merges {(1, 2): 10}: no merge applies", ([5, 6, 7], {(1, 2): 10})),
            Case("ids [1, 2, 3] and no merges at all", ([1, 2, 3], {})),
            Case("an empty list, merges {(1, 2): 10}", ([], {(1, 2): 10})),
            Case("a single id [1], merges {(1, 2): 10}", ([1], {(1, 2): 10})),
            Case(
                "40 random ids from 0..2, with 6 merges learned from other random ids",
                (_random_ids(gen, 3, 40), _learned_merges(learned_from, 6, 3)),
            ),
        ]

    def call(self, obj, case):
        ids, merges = case.args  # ids: the learner's own copy, the grader sees it changed
        return obj(ids, dict(merges))

    def mistakes(self):
        def by_frequency(ids, merges):
            ids, ranks = list(ids), list(merges)
            while True:
                present = [p for p in _adjacent(ids) if p in merges]
                if not present:
                    return ids
                pair = max(set(present), key=lambda p: (present.count(p), -ranks.index(p)))
                ids = _merged(ids, pair, merges[pair])

        def reversed_order(ids, merges):
            for pair, new_id in reversed(list(merges.items())):
                ids = _merged(ids, pair, new_id)
            return ids

        def sorted_by_pair(ids, merges):
            for pair in sorted(merges):
                ids = _merged(ids, pair, merges[pair])
            return ids

        def leftmost_first(ids, merges):
            ids = list(ids)
            while True:
                found = [i for i, p in enumerate(_adjacent(ids)) if p in merges]
                if not found:
                    return ids
                i = found[0]
                ids = ids[:i] + [merges[(ids[i], ids[i + 1])]] + ids[i + 2 :]

        def not_chained(ids, merges):
            result = list(ids)
            for pair, new_id in merges.items():
                result = _merged(ids, pair, new_id) if pair in _adjacent(ids) else result
            return result

        return [
            (
                leftmost_first,
                "you merged the leftmost pair that has a merge; apply the "
                "earliest-learned merge first, wherever its pair is",
            ),
            (
                not_chained,
                "each merge must work on the result of the merges before it (so a "
                "merge of merged tokens can apply), not on the original ids",
            ),
            (
                reversed_order,
                "you applied the merges last-learned first; apply them from the "
                "first learned to the last",
            ),
            (
                by_frequency,
                "you merged the most frequent pair first; apply the merges in the "
                "order they were learned (the order of `merges`), however often each pair occurs",
            ),
            (
                sorted_by_pair,
                "you applied the merges in sorted order of their pairs; keep the "
                "order of `merges`, which is the order they were learned",
            ),
        ]


# Review 2026-11-23 (EX01-1 to EX01-4), kept apart so that it merges with work on the cases above
# --------------------------------------------------------------------------------------------

from ..core import GradingError, extend_task  # noqa: E402


def _cosine_columns(E):
    unit = E / E.norm(dim=0, keepdim=True).clamp_min(1e-12)
    return unit @ unit.T


extend_task(
    CosineSimilarityMatrix,
    mistakes=[
        (
            _cosine_columns,
            "you normalised the columns (dim=0); each ROW is a vector: divide every "
            "row by its own length, E.norm(dim=-1, keepdim=True)",
        ),
    ],
)


def _bool_ids_case(gen):
    return [
        Case(
            "bool ids (3,) (True/False are not token ids: must raise TypeError)",
            (torch.tensor([True, False, True]), 2),
            raises=TypeError,
        )
    ]


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
        Case(
            "ids (2, 3) holding 7 with vocab_size 5: a ValueError whose message names 7",
            (torch.tensor([[0, 1, 2], [3, 7, 4]]), 5),
            data={"bad_id": 7},
            raises=ValueError,
        ),
    ]


OneHot.cases = _one_hot_cases_with_named_id


def _by_ids(index) -> bool:
    """True for an index that looks rows up by id (a tensor or a list of them), not for the
    slices and single positions a one-hot product may use (table[:, :], table[0])."""
    if isinstance(index, (torch.Tensor, list)):
        return True
    return isinstance(index, tuple) and any(isinstance(i, (torch.Tensor, list)) for i in index)


def _one_hot_over_d(ids, table):
    return _unchecked_one_hot(ids, table.shape[-1]).to(table.dtype) @ table


def _wrong_axis_hint(case: Case, error: Exception, failure: tuple | None) -> str | None:
    """The hint for vocab_size taken from the table's last axis, when the learner's code raised
    on ids that are all valid rows of the table: one_hot(ids, d) refuses ids >= d, or makes
    (..., d) vectors that cannot multiply a (vocab_size, d) table."""
    ids, table = case.args
    vocab_size, d = table.shape[0], table.shape[-1]
    if vocab_size == d or not ids.numel() or ids.min() < 0 or ids.max() >= vocab_size:
        return None
    refused = isinstance(error, ValueError) and ids.max() >= d  # one_hot(ids, d) refused them
    if not refused and (failure is None or failure != failure_of(_one_hot_over_d, ids, table)):
        return None
    return (
        f"every id here is a row of the table (vocab_size = table.shape[0] = {vocab_size}); "
        f"did you take vocab_size from the wrong axis? table.shape[1] = {d} is d, the length "
        "of each embedding: one_hot(ids, table.shape[0]) @ table"
    )


def _embed_call(self, obj, case, _inner=Embed.call):
    from torch.overrides import TorchFunctionMode

    table = case.args[1]

    class Indexing(TorchFunctionMode):
        used = False

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.__getitem__ and args and args[0] is table:
                Indexing.used = Indexing.used or _by_ids(args[1] if len(args) > 1 else None)
            elif (
                func
                in (
                    torch.index_select,
                    torch.Tensor.index_select,
                    torch.take,
                    torch.gather,
                    torch.Tensor.gather,
                )
                and args
                and args[0] is table
            ):
                Indexing.used = True
            return func(*args, **(kwargs or {}))

    recorder = OpRecorder()
    with Indexing():
        try:
            with recorder:
                value = _inner(self, obj, case)
        except (NotImplementedError, GradingError):
            raise
        except Exception as error:  # noqa: BLE001  (a learner's code may raise anything)
            hint = _wrong_axis_hint(case, error, recorder.failure)
            if hint is None:
                raise
            raise GradingError(
                f"your code raised {type(error).__name__}: {error}. Hint: {hint}"
            ) from None
    if Indexing.used:
        raise GradingError(
            "you looked the rows up by indexing the table (table[ids]); the "
            "task asks for the one-hot matrix product one_hot(ids) @ table, "
            "which is what nn.Embedding computes"
        )
    return value


Embed.call = _embed_call


# --------------------------------------------------------------------------------------------
# Review 2026-11-25 (a fresh reader's single mistakes), kept apart like the block above
# --------------------------------------------------------------------------------------------


_EMPTY_IDS_HINT = (
    "empty ids (no ids at all) are valid: the result is an empty (0, vocab_size) tensor. "
    "ids.min() and ids.max() raise on an empty tensor; test the range with "
    "((ids < 0) | (ids >= vocab_size)).any(), or check ids.numel() first"
)


def _one_hot_min_max(ids, vocab_size):  # min() and max() of an empty tensor raise
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"ids must be integers, got {ids.dtype}")
    if ids.min() < 0 or ids.max() >= vocab_size:
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise ValueError(f"id {bad} is outside [0, {vocab_size})")
    return _unchecked_one_hot(ids, vocab_size)


def _empty_ids_case(gen):
    return [
        Case(
            "empty ids (shape (0,)) with vocab_size=4: no ids, so a (0, 4) result",
            (torch.zeros(0, dtype=torch.long), 4),
        )
    ]


_one_hot_call_before_empty_ids = OneHot.call


def _one_hot_call_on_empty_ids(self, obj, case):
    """Any error on empty ids (ids.min() of nothing, a learner's own "empty" check) gets the
    hint, whatever function raised it: min, max, amin, aminmax and Python's min word it apart."""
    try:
        return _one_hot_call_before_empty_ids(self, obj, case)
    except Exception as error:  # noqa: BLE001  (a learner's code may raise anything)
        ids = case.args[0]
        if isinstance(error, (NotImplementedError, GradingError)) or ids.numel():
            raise
        raise GradingError(
            f"your code raised {type(error).__name__}: {error}. Hint: {_EMPTY_IDS_HINT}"
        ) from None


OneHot.call = _one_hot_call_on_empty_ids
extend_task(
    OneHot,
    cases=_empty_ids_case,
    mistakes=[(_one_hot_min_max, _EMPTY_IDS_HINT)],
)


def _cosine_whole_norm(E):  # the length of the whole matrix, not of each row
    unit = E / E.norm().clamp_min(1e-12)
    return unit @ unit.T


def _cosine_norm_without_keepdim(E):  # (n, d) / (n,): raises unless n == d
    unit = E / E.norm(dim=-1).clamp_min(1e-12)
    return unit @ unit.T


def _cosine_columns_by_flat_norms(E):  # (n, n) / (n,): column j divided by |E_j|
    return (E @ E.T) / E.norm(dim=-1).clamp_min(1e-12)


def _cosine_by_squared_flat_norms(E):  # (n, n) / (n,)²: column j divided by |E_j|²
    norms = E.norm(dim=-1).clamp_min(1e-12)
    return (E @ E.T) / (norms * norms)


def _cosine_distance(E):
    unit = _unit_rows(E)
    return 1 - unit @ unit.T


def _cosine_diagonal_one(E):  # "every vector is similar to itself", zero vectors included
    return _unit_rows(E) @ _unit_rows(E).T + torch.diag((E.norm(dim=-1) == 0).to(E.dtype))


extend_task(
    CosineSimilarityMatrix,
    mistakes=[
        (
            _cosine_whole_norm,
            "E.norm() without dim is the length of the whole matrix; divide every row by its "
            "own length, E.norm(dim=-1, keepdim=True)",
        ),
        (
            _cosine_norm_without_keepdim,
            "the row lengths E.norm(dim=-1) have shape (n,), which lines up with the LAST "
            "axis of E (d); keep the axis, E.norm(dim=-1, keepdim=True) of shape (n, 1), so "
            "each row is divided by its own length",
        ),
        (
            _cosine_columns_by_flat_norms,
            "(E @ E.T) / norms with 1-D norms (n,) divides column j by |E_j| only (the norms "
            "line up with the last axis); divide by both lengths, the outer product "
            "norms[:, None] * norms[None, :]",
        ),
        (
            _cosine_by_squared_flat_norms,
            "norms * norms with 1-D norms is |E_j|² for column j, not |E_i| |E_j|; divide by "
            "the outer product norms[:, None] * norms[None, :]",
        ),
        (
            _cosine_distance,
            "that is 1 - cosine similarity (the cosine distance); return the similarity itself",
        ),
        (
            _cosine_diagonal_one,
            "a zero vector has no direction, so its similarity with itself is 0 too (not 1)",
        ),
    ],
)


def _zero_row_case(gen):
    E = randn(gen, 6, 4)
    E[1] = E[0] + 0.3 * E[1]  # a row close to row 0, so the zero row is not the first answer
    E[3] = 0.0
    return [
        Case(
            "E (6, 4) whose row 3 is all zeros (its cosine similarity with any row is 0, as in "
            "task 3, not NaN), index 0, k 4",
            (E, 0, 4),
        )
    ]


def _neighbours_similarities(E, index, k):
    sims = _unit_rows(E) @ _unit_rows(E)[index]
    sims[index] = float("-inf")
    return sims.topk(k).values


def _neighbours_itself_at_zero(E, index, k):
    sims = _unit_rows(E) @ _unit_rows(E)[index]
    sims[index] = 0.0
    return sims.topk(k).indices


def _neighbours_removed_after(E, index, k):
    top = (_unit_rows(E) @ _unit_rows(E)[index]).topk(k).indices
    return top[top != index]


def _neighbours_nan_for_zero_rows(E, index, k):
    sims = (E / E.norm(dim=-1, keepdim=True)) @ (E[index] / E[index].norm())
    sims[index] = float("-inf")
    return sims.topk(k).indices


def _neighbours_by_distance(E, index, k):
    distances = (E - E[index]).norm(dim=-1)
    distances[index] = float("inf")
    return distances.topk(k, largest=False).indices


extend_task(
    NearestNeighbours,
    cases=_zero_row_case,
    mistakes=[
        (
            _neighbours_similarities,
            "topk gives the similarities (.values) and their rows (.indices); return the rows, "
            "topk(k).indices",
        ),
        (
            _neighbours_itself_at_zero,
            "a similarity of 0 does not exclude the row itself: cosine similarity goes down to "
            "-1, so rows less similar than 0 rank below it; set its similarity to -inf",
        ),
        (
            _neighbours_removed_after,
            "you took the top k and then removed `index`, which leaves k - 1 rows; exclude "
            "`index` before ranking (set its similarity to -inf)",
        ),
        (
            _neighbours_nan_for_zero_rows,
            "a zero row's similarity came out as NaN (0/0), and topk ranks NaN above every "
            "number; clamp the lengths as in cosine_similarity_matrix (or call yours), so a "
            "zero vector has similarity 0",
        ),
        (
            _neighbours_by_distance,
            "you ranked by Euclidean distance, which depends on the vectors' lengths; rank by "
            "cosine similarity (the angle between them)",
        ),
    ],
)


def _merged_as_text(ids, pair, new_id):
    text = " ".join(str(i) for i in ids).replace(f"{pair[0]} {pair[1]}", str(new_id))
    return [int(i) for i in text.split()]


def _multi_digit_case(gen):
    return [
        Case(
            "ids [11, 2, 1, 2, 1, 22], pair (1, 2), new_id 9: ids of two digits next to the "
            "pair's ids",
            ([11, 2, 1, 2, 1, 22], (1, 2), 9),
        )
    ]


extend_task(
    MergePair,
    cases=_multi_digit_case,
    mistakes=[
        (
            _merged_as_text,
            "you replaced the pair in the ids written as text, where '11 2' contains '1 2' "
            "although no id there is 1; compare the ids themselves, (ids[i], ids[i + 1]) == "
            "pair",
        ),
    ],
)
