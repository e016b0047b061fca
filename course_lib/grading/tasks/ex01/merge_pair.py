"""ex01.merge_pair: every occurrence of a pair, read left to right, replaced by a new id."""

from __future__ import annotations

from ...core import Case, Task, register
from ._shared import (
    BPE_FINISHED,
    BPE_LESSON,
    HELLO,
    check_not_reused,
    merged,
    random_ids,
    spelled,
    tensor_ids,
)


@register
class MergePair(Task):
    id = "ex01.merge_pair"
    lesson = BPE_LESSON
    reference = "course_lib.bpe.merge_pair"
    forbidden = BPE_FINISHED
    mistake_table = {
        "overlapping": "an id can be merged only once: after a merge, skip both ids of the pair, "
        "so [a, a, a] with (a, a) gives [X, a], not [X, X]",
        "one_step_after_a_merge": "after a merge you moved on by one id, so the pair's second id "
        "was copied (or merged) again: new_id stands for both ids, so step over both, i += 2 "
        "(in a for loop, i += 2 changes nothing: the loop sets i again at its next turn; use a "
        "while loop, as lesson 01 does)",
        "first_only": "replace every occurrence of the pair, not only the first",
        "right_to_left": "read left to right: [a, a, a] with (a, a) gives [X, a], not [a, X]",
        "last_id_lost": "the last id went missing: when it does not start a pair, copy it to the "
        "result as it is",
        "last_id_appended": "the last id was appended after the loop even though the last pair "
        "had been merged (new_id already stands for it): append ids[-1] only when the loop "
        "did not consume it",
        "either_order": "(a, b) is ordered: the neighbours (b, a) are not an occurrence of it",
        "end_pair_missed": "the pair at the very end was not merged: the last pair starts at "
        "index len(ids) - 2, so loop while i < len(ids) - 1 (i + 1 < len(ids)), not "
        "len(ids) - 2",
        "past_the_end": "at the last id, ids[i + 1] is past the end of the list: test "
        "i + 1 < len(ids) before comparing the pair (an unmerged last id is copied as it is)",
        "as_text": "you replaced the pair in the ids written as text, where '11 2' contains "
        "'1 2' although no id there is 1; compare the ids themselves, (ids[i], ids[i + 1]) == "
        "pair",
    }

    def cases(self, gen):
        randoms = random_ids(gen, 4, 40)
        return [
            spelled(
                "three times, the last at the end", ids=[1, 2, 1, 2, 1, 2], pair=(1, 2), new_id=9
            ),
            spelled("the pair at both ends", ids=[1, 2, 3, 1, 2], pair=(1, 2), new_id=9),
            spelled("a run of three gives [9, 4]", ids=[4, 4, 4], pair=(4, 4), new_id=9),
            spelled(ids=[4, 4, 4, 4], pair=(4, 4), new_id=9),
            spelled(ids=[4, 4, 4, 4, 4], pair=(4, 4), new_id=9),
            spelled(ids=[3, 3, 3, 5, 3, 3], pair=(3, 3), new_id=7),
            spelled("only the middle is (1, 2)", ids=[2, 1, 2, 1], pair=(1, 2), new_id=9),
            spelled("ends on the pair's first id", ids=[8, 7, 8, 1, 7], pair=(7, 8), new_id=9),
            spelled("the pair is absent", ids=[1, 2, 3], pair=(3, 1), new_id=9),
            Case("an empty list, pair (1, 2), new_id 9", ([], (1, 2), 9)),
            Case("a single id [5], pair (5, 6), new_id 9", ([5], (5, 6), 9)),
            Case(
                "the bytes of 'hello, hello', pair (108, 108) ('ll'), new_id 256",
                (HELLO, (108, 108), 256),
            ),
            Case(
                f"40 random ids from 0..3, pair {tuple(randoms[5:7])}, new_id 300",
                (randoms, tuple(randoms[5:7]), 300),
            ),
            spelled(
                "ids of two digits next to the pair's ids",
                ids=[11, 2, 1, 2, 1, 22],
                pair=(1, 2),
                new_id=9,
            ),
        ]

    def call(self, obj, case):
        ids, pair, new_id = case.args
        given = list(ids)
        merged = obj(given, tuple(pair), new_id)
        if given != list(ids):  # the statement: "Leave ids itself unchanged"
            return {"changed_input": given}
        if merged is not given:
            check_not_reused(obj, merged, [-1, -2, -1], (-1, -2), -3)
        return {"the_same_list": merged} if merged is given else merged  # "a **new** list"

    def compare(self, got, want, case):
        if isinstance(got, dict) and "changed_input" in got:
            return (
                f"your function changed the list it was given (ids became "
                f"{got['changed_input']}): build a new list and leave ids as it was; a caller "
                "may still need it"
            )
        if isinstance(got, dict) and "the_same_list" in got:
            return (
                "you returned the list you were given (`return ids` where nothing is merged), "
                "not a new one: a caller that changes one would change the other; return a "
                "copy, list(ids)"
            )
        return tensor_ids(got) or super().compare(got, want, case)

    def wrong(self, ids, pair, new_id, *, mistake):
        if mistake == "as_text":
            text = " ".join(str(i) for i in ids).replace(f"{pair[0]} {pair[1]}", str(new_id))
            return [int(i) for i in text.split()]
        if mistake == "right_to_left":
            return merged(ids[::-1], pair[::-1], new_id)[::-1]
        out, i = [], 0
        while i < len(ids) - (mistake in ("last_id_lost", "last_id_appended")):
            here = (ids[i], ids[i + 1]) if mistake == "past_the_end" else tuple(ids[i : i + 2])
            if mistake == "either_order":
                found = len(here) == 2 and sorted(here) == sorted(pair)
            else:
                found = here == tuple(pair) and (mistake != "end_pair_missed" or i < len(ids) - 2)
            if not found:
                out.append(ids[i])
                i += 1
                continue
            out.append(new_id)
            if mistake == "first_only":
                return out + list(ids[i + 2 :])
            again = mistake == "overlapping" and tuple(ids[i + 1 : i + 3]) == tuple(pair)
            i += 1 if again or mistake == "one_step_after_a_merge" else 2
        return out + list(ids[-1:]) if mistake == "last_id_appended" else out

    def diagnose(self, got, want, case):
        ids = case.args[0]
        if got == list(ids) and want != list(ids):
            return (
                "nothing was merged: compare each (ids[i], ids[i + 1]) with `pair`, and "
                "append new_id where they are equal (a slice, ids[i:i + 2], is a list, and a "
                "list never equals the tuple pair: [1, 2] != (1, 2))"
            )
        return None
