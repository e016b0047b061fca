"""ex01.bpe_encode: the merges applied in the order they were learned."""

from __future__ import annotations

from collections import Counter

from ...core import Case, Task, register
from ._shared import (
    BPE_FINISHED,
    HELLO,
    LESSON,
    adjacent,
    merged,
    random_ids,
    spelled,
    tensor_ids,
)


def learned_merges(ids: list[int], num_merges: int, first_id: int) -> dict:
    """A merge table learned from `ids` the BPE way (most frequent pair, ties smallest)."""
    merges = {}
    for new_id in range(first_id, first_id + num_merges):
        counts = Counter(adjacent(ids))
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        merges[pair] = new_id
        ids = merged(ids, pair, new_id)
    return merges


@register
class BpeEncode(Task):
    id = "ex01.bpe_encode"
    lesson = f"{LESSON}, section 'Encoding with the learned merges'"
    reference = "course_lib.bpe.bpe_encode"
    depends_on = ("merge_pair",)
    forbidden = BPE_FINISHED
    mistake_table = {
        "leftmost_first": "you merged the leftmost pair that has a merge; apply the "
        "earliest-learned merge first, wherever its pair is",
        "not_chained": "each merge must work on the result of the merges before it (so a merge "
        "of merged tokens can apply), not on the original ids",
        "reversed_order": "you applied the merges last-learned first; apply them from the first "
        "learned to the last",
        "by_frequency": "you merged the most frequent pair first; apply the merges in the order "
        "they were learned (the order of `merges`), however often each pair occurs",
        "stopped_at_absent": "you stopped at the first merge whose pair does not occur; a merge "
        "that does not apply is skipped (continue, not break), and the merges after it still "
        "apply",
        "encoded_again": "ids is already a list of ids (ints): lesson 01's encode_chunk starts "
        "from a chunk of text, list(chunk.encode('utf-8')); here start from ids itself "
        "(list(ids), a copy)",
        "sorted_by_pair": "you applied the merges in sorted order of their pairs; keep the order "
        "of `merges`, which is the order they were learned",
        "new_ids_from_256": "256 + the merge's rank numbers lesson 01's own merges; the new ids "
        "are the values of `merges` (here 10, 11, ...): for pair, new_id in merges.items()",
        "result_dropped": "nothing was merged: merge_pair returns a new list and leaves the one "
        "it is given as it was, so keep its result, ids = merge_pair(ids, pair, new_id); and "
        "loop over merges.items(): `for pair, new_id in merges` goes over the keys alone and "
        "unpacks each pair (a, b) into pair = a, new_id = b, which never matches. Or your "
        "function kept the merges of an earlier call (a list or table of them built at the "
        "first call, or cached by their number): use the `merges` it is given, at every call",
        "new_ids_from_0": "enumerate(merges) numbers the merges 0, 1, 2, ...; the new ids are "
        "the values of `merges` (here 10, 11, ...): for pair, new_id in merges.items()",
        "first_merge_only": "only the first merge of `merges` was applied: is your `return` "
        "inside the for loop? Return after the loop, once every merge has run",
    }

    def cases(self, gen):
        hello_merges = {(108, 108): 256, (101, 256): 257, (104, 257): 258, (258, 111): 259}
        learned_from = random_ids(gen, 3, 60)
        # The first five cases each catch one listed mistake first, in the order of mistakes(),
        # so that the hint a learner reads is the one for their mistake.
        return [
            spelled(
                "(2, 3) is merged everywhere before (10, 2) may apply",
                ids=[3, 4, 2, 3, 2, 3],
                merges={(2, 3): 10, (10, 2): 11},
            ),
            spelled("both merges apply", ids=[4, 3, 1, 1], merges={(1, 1): 10, (4, 3): 11}),
            spelled("the two pairs overlap", ids=[1, 4, 2, 1, 4], merges={(1, 4): 10, (4, 2): 11}),
            spelled(
                "(4, 4) is the most frequent pair, but (2, 4) was learned first",
                ids=[2, 4, 4, 4, 4, 4, 3],
                merges={(2, 4): 10, (4, 4): 11, (11, 4): 12},
            ),
            spelled(
                "(4, 11) sorts before (10, 4) but was learned after it",
                ids=[4, 1, 2, 4],
                merges={(1, 2): 10, (10, 4): 11, (4, 11): 12},
            ),
            spelled(
                "(1, 2) is more frequent, but (2, 3) was learned first",
                ids=[1, 2, 3, 1, 2, 1, 2],
                merges={(2, 3): 10, (1, 2): 11},
            ),
            spelled("a merge of a merged token", ids=[1, 2, 3], merges={(1, 2): 10, (10, 3): 11}),
            spelled(ids=[4, 4, 4, 4, 4], merges={(4, 4): 10, (10, 10): 11}),
            Case(
                "the bytes of 'hello, hello' with four merges that build 'hello'",
                (HELLO, hello_merges),
            ),
            spelled("no merge applies", ids=[5, 6, 7], merges={(1, 2): 10}),
            Case("ids [1, 2, 3] and no merges at all", ([1, 2, 3], {})),
            Case("an empty list, merges {(1, 2): 10}", ([], {(1, 2): 10})),
            Case("a single id [1], merges {(1, 2): 10}", ([1], {(1, 2): 10})),
            spelled(
                "(5, 6) does not occur, but the merges after it apply",
                ids=[1, 2, 3, 1, 2],
                merges={(5, 6): 10, (1, 2): 11, (11, 3): 12},
            ),
            Case(
                "40 random ids from 0..2, with 6 merges learned from other random ids",
                (random_ids(gen, 3, 40), learned_merges(learned_from, 6, 3)),
            ),
        ]

    def call(self, obj, case):
        ids, merges = case.args  # the learner's own copies: the grader sees either changed
        return obj(ids, merges)

    def compare(self, got, want, case):
        return tensor_ids(got) or super().compare(got, want, case)

    def wrong(self, ids, merges, *, mistake):
        if mistake == "encoded_again":  # lesson 01's encode_chunk, which starts from text
            ids = list(ids.encode("utf-8"))
        if mistake == "result_dropped":  # merge_pair(ids, pair, new_id) without ids =
            return list(ids)
        ranks, ids = list(merges), list(ids)
        while mistake in ("leftmost_first", "by_frequency"):  # one merge at a time, picked anew
            found = [(i, pair) for i, pair in enumerate(adjacent(ids)) if pair in merges]
            if not found:
                return ids
            if mistake == "leftmost_first":
                i, pair = found[0]
                ids = ids[:i] + [merges[pair]] + ids[i + 2 :]
            else:
                present = [pair for _, pair in found]
                pair = max(set(present), key=lambda p: (present.count(p), -ranks.index(p)))
                ids = merged(ids, pair, merges[pair])
        order = {
            "reversed_order": ranks[::-1],
            "sorted_by_pair": sorted(ranks),
            "first_merge_only": ranks[:1],  # `return` indented into the loop
        }.get(mistake, ranks)
        result = ids
        for pair in order:
            if mistake == "stopped_at_absent" and pair not in adjacent(result):
                break
            if mistake == "not_chained":  # each merge applied to the original ids
                result = merged(ids, pair, merges[pair]) if pair in adjacent(ids) else result
            else:  # the lesson's training numbered its merges 256, 257, ...; enumerate 0, 1, ...
                start = {"new_ids_from_256": 256, "new_ids_from_0": 0}.get(mistake)
                new_id = merges[pair] if start is None else start + ranks.index(pair)
                result = merged(result, pair, new_id)
        return result
