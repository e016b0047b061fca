"""ex01.pair_counts: how often each pair of neighbouring ids occurs."""

from __future__ import annotations

import torch

from ...core import Case, Task, register
from ._shared import (
    BPE_FINISHED,
    BPE_LESSON,
    HELLO,
    adjacent,
    check_not_reused,
    numpy_number,
    random_ids,
    spelled,
)


@register
class PairCounts(Task):
    id = "ex01.pair_counts"
    lesson = BPE_LESSON
    reference = "course_lib.bpe.pair_counts"
    forbidden = BPE_FINISHED
    mistake_table = {
        "non_overlapping": "overlapping pairs count: [a, a, a] holds (a, a) twice, at positions "
        "0-1 and 1-2 (merging skips; counting does not)",
        "distinct_pairs": "you counted each distinct pair once; count every position at which "
        "it occurs",
        "last_pair_missed": "you missed the last pair: ids of length n have n - 1 pairs, the "
        "last one (ids[n - 2], ids[n - 1])",
        "wraps_around": "the last id has no right neighbour: do not wrap around to the first",
        "even_positions_only": "you only counted pairs that start at even positions; every "
        "position but the last starts a pair",
        "past_the_end": "your loop runs up to the last id, which has no right neighbour, so "
        "ids[i + 1] is out of range: a list of n ids has n - 1 pairs, for i in "
        "range(len(ids) - 1)",
        "unordered": "(a, b) and (b, a) are different pairs: keep the order of the ids",
        "reversed": "your pairs are back to front: each pair is (ids[i], ids[i + 1]), the left "
        "id first",
        "no_start_value": "counts[pair] += 1 reads the count of a pair the dict does not hold "
        "yet, which raises KeyError the first time a pair is seen: start it at 0, "
        "counts[pair] = counts.get(pair, 0) + 1 (or count with collections.Counter)",
        "list_pairs": "a list cannot be a dict key (it has no hash, since it can change): make "
        "each pair a tuple, (ids[i], ids[i + 1]), not [ids[i], ids[i + 1]]",
    }

    def cases(self, gen):
        return [
            spelled("one pair", ids=[3, 9]),
            spelled("(1, 2) at both ends", ids=[1, 2, 3, 4, 1, 2]),
            spelled("a run of three equal ids holds the pair (4, 4) twice", ids=[4, 4, 4]),
            spelled("runs of four and five equal ids", ids=[1, 1, 1, 1, 2, 1, 1, 1, 1, 1]),
            spelled("(1, 2) and (2, 1) are different pairs", ids=[1, 2, 2, 1]),
            Case("an empty list: no pairs", ([],)),
            Case("a single id [7]: no pairs", ([7],)),
            Case("the bytes of 'hello, hello'", (HELLO,)),
            Case("40 random ids from 0..4", (random_ids(gen, 5, 40),)),
            Case("25 random ids from 256..258 (merged tokens)", (random_ids(gen, 3, 25, 256),)),
        ]

    def call(self, obj, case):
        (ids,) = case.args  # the learner's own copy: the grader sees it changed
        counts = obj(ids)
        check_not_reused(obj, counts, [-1, -2])
        # outcomes carry their keys as text, "(1, 2)", so keys that were text already look right
        if isinstance(counts, dict) and not all(isinstance(key, tuple) for key in counts):
            key = next(key for key in counts if not isinstance(key, tuple))
            return {"__repr__": f"a dict with the key {key!r}, a {type(key).__name__}, not a tuple"}
        for key in counts if isinstance(counts, dict) else ():  # zip over a tensor's 0-d ids,
            if any(isinstance(i, torch.Tensor) for i in key):  # which hash by identity
                return {"__repr__": f"the key {key!r}, of tensors, not ints (use .tolist())"}
            if any(numpy_number(i) for i in (*key, counts[key])):  # from a NumPy array
                return {
                    "__repr__": f"NumPy integers in {{{key!r}: {counts[key]!r}}}; the pairs and "
                    "counts must be Python ints (convert with .tolist() or int(...))"
                }
        return counts

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

    def wrong(self, ids, *, mistake):
        if mistake == "distinct_pairs":
            return dict.fromkeys(adjacent(ids), 1)
        if mistake == "even_positions_only":
            pairs = list(zip(ids[::2], ids[1::2], strict=False))
        elif mistake == "non_overlapping":  # skips on, as merging does
            pairs, i = [], 0
            while i < len(ids) - 1:
                pairs.append((ids[i], ids[i + 1]))
                i += 2 if ids[i] == ids[i + 1] else 1
        elif mistake == "past_the_end":  # IndexError at the last id
            pairs = [(ids[i], ids[i + 1]) for i in range(len(ids))]
        else:
            pairs = adjacent(ids)
        if mistake == "last_pair_missed":
            pairs = pairs[:-1]
        if mistake == "wraps_around" and ids:
            pairs.append((ids[-1], ids[0]))
        counts = {}
        for pair in pairs:
            pair = tuple(sorted(pair)) if mistake == "unordered" else pair
            pair = pair[::-1] if mistake == "reversed" else pair
            pair = list(pair) if mistake == "list_pairs" else pair  # unhashable
            seen = counts[pair] if mistake == "no_start_value" else counts.get(pair, 0)  # KeyError
            counts[pair] = seen + 1
        return counts
