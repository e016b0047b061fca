"""ex01.one_hot: token ids -> float32 one-hot vectors, with the bad ids refused."""

from __future__ import annotations

import torch

from ...core import Case, GradingError, Task, register
from ..common import randint
from ._shared import LESSON, kept_result, repeated, unchecked_one_hot

_EMPTY_IDS_HINT = (
    "empty ids (no ids at all) are valid: the result is an empty (0, vocab_size) tensor. "
    "ids.min() and ids.max() raise on an empty tensor; test the range with "
    "((ids < 0) | (ids >= vocab_size)).any(), or check ids.numel() first"
)


@register
class OneHot(Task):
    id = "ex01.one_hot"
    lesson = f"{LESSON}, section 'One-hot vectors'"
    reference = "course_lib.embeddings.one_hot"
    forbidden = ("torch.nn.functional.one_hot",)
    mistake_table = {
        "long": "your one-hot vectors are integers (int64); return floats (float32), so they "
        "can be multiplied with a float embedding table",
        "bool": "your one-hot vectors are booleans; return floats (float32) with .float()",
        "double": "your one-hot vectors are float64; the task asks for float32",
        "vocab_not_last": "the vocabulary axis must be the last one: (..., vocab_size)",
        "min_max_on_empty": _EMPTY_IDS_HINT,
        "squeezed": "squeeze() drops every axis of length 1, here the one sequence's batch axis "
        "too; one_hot only adds the last axis: (..., vocab_size)",
        "axis_one": "ids.unsqueeze(1) (or ids[:, None]) puts the new axis second, which lines up "
        "with torch.arange(vocab_size) only for 1-D ids; ids can have any shape, so add the axis "
        "last: ids.unsqueeze(-1)",
        "lesson_vocab": "torch.arange(6) is the lesson's vocab_size = 6; compare with "
        "torch.arange(vocab_size), the argument, so the last axis has vocab_size entries",
        "rows_by_arange": "out[torch.arange(len(ids)), ids] = 1 gives each id its own row only "
        "when ids are 1-D; ids can have any shape: compare ids.unsqueeze(-1) with "
        "torch.arange(vocab_size) (or flatten the ids first and reshape the result to "
        "(*ids.shape, vocab_size))",
    }

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
            Case(
                "float64 ids [1.0, 0.0] with vocab_size=3: ids of any float dtype must raise "
                "TypeError (test ids.is_floating_point(), not one dtype)",
                (torch.tensor([1.0, 0.0], dtype=torch.float64), 3),
                raises=TypeError,
            ),
            Case(
                "float16 ids [2.0, 1.0] with vocab_size=3: half precision is a float dtype too, "
                "so this must raise TypeError (a list such as (float32, float64) misses it; "
                "ids.is_floating_point() covers every float dtype)",
                (torch.tensor([2.0, 1.0], dtype=torch.float16), 3),
                raises=TypeError,
            ),
            Case(  # a range test run before the dtype test raised ValueError here, full marks
                "float ids [0.0, 7.0] with vocab_size=3: float ids must raise TypeError whatever "
                "their values, so test the dtype before the range (not ValueError for 7.0)",
                (torch.tensor([0.0, 7.0]), 3),
                raises=TypeError,
            ),
            Case(
                "bool ids (3,) (True/False are not token ids: must raise TypeError)",
                (torch.tensor([True, False, True]), 2),
                raises=TypeError,
            ),
            Case(
                "ids (2, 3) holding 7 with vocab_size 5: a ValueError whose message names 7",
                (torch.tensor([[0, 1, 2], [3, 7, 4]]), 5),
                data={"bad_id": 7},
                raises=ValueError,
            ),
            Case(
                "empty ids (shape (0,)) with vocab_size=4: no ids, so a (0, 4) result",
                (torch.zeros(0, dtype=torch.long), 4),
            ),
            Case(
                "ids [3, -2, 0] with vocab_size 4: a ValueError whose message names -2",
                (torch.tensor([3, -2, 0]), 4),
                data={"bad_id": -2},
                raises=ValueError,
            ),
            Case("one sequence: ids (1, 4), vocab_size=6", (randint(gen, 6, 1, 4), 6)),
            repeated(  # a one-hot cached by shape and vocab_size at the first call passed
                "ids [1, 3, 0] with vocab_size=4 again: the shape and vocab_size of the first "
                "ids, [2, 0, 1], other values",
                (torch.tensor([1, 3, 0]), 4),
                "ids [2, 0, 1]",
                unchecked_one_hot(torch.tensor([2, 0, 1]), 4),
            ),
            Case(  # last, so that it decides no other slip's hint; (int64, int32) passed before
                "int16 ids (2, 3), vocab_size=4: ids of any integer dtype are accepted",
                (randint(gen, 4, 2, 3).to(torch.int16), 4),
            ),
            Case(  # a list (int64, int32, int16), the statement's, passed before
                "uint8 ids (the bytes of 'hi!'), vocab_size=128: bytes are integer ids too",
                (torch.tensor(list(b"hi!"), dtype=torch.uint8), 128),
            ),
        ]

    def diagnose(self, got, want, case):
        return kept_result(got, case)

    def call(self, obj, case):
        """A ValueError for an id out of range must name that id; a TypeError for int32 or int16
        ids refused more than floats and bools, or a crash of an index made of int16 ids
        (eye[ids], scatter), gets its hint; and any error on empty ids (ids.min() of nothing, a
        learner's own "empty" check) gets the empty-ids hint, whatever function raised it: min,
        max, amin, aminmax and Python's min word it apart."""
        ids, bad = case.args[0], case.data.get("bad_id")
        try:
            return obj(*case.args, **case.kwargs)
        except (NotImplementedError, GradingError):
            raise
        except Exception as error:  # noqa: BLE001  (a learner's code may raise anything)
            if bad is not None and isinstance(error, ValueError) and str(bad) not in str(error):
                raise GradingError(
                    f"your ValueError says {str(error)!r}; name the id that is out of range "
                    f"({bad}) so that whoever calls one_hot knows what to fix"
                ) from None
            if isinstance(error, ValueError) and case.raises is None and ids.numel():
                raise GradingError(
                    f"your code raised ValueError: {error}. Hint: every id here lies in [0, "
                    f"{case.args[1]}), so none may be refused: the range includes 0 and "
                    "vocab_size - 1; refuse only ids < 0 or ids >= vocab_size"
                ) from None
            if isinstance(error, TypeError) and ids.dtype in (
                torch.int32,
                torch.int16,
                torch.uint8,
            ):
                raise GradingError(
                    f"your code raised TypeError: {error}. Hint: {ids.dtype} ids are integers "
                    "too; refuse only float and bool ids (ids.is_floating_point(), torch.bool)"
                ) from None
            if isinstance(error, (RuntimeError, IndexError)) and ids.dtype == torch.int16:
                raise GradingError(
                    f"your code raised {type(error).__name__}: {error}. Hint: int16 ids are "
                    "integers too, but indexing (eye[ids]) and scatter take int64 or int32 "
                    "indices only: convert the ids with ids.long() first (or compare "
                    "ids.unsqueeze(-1) with torch.arange(vocab_size), which takes any dtype)"
                ) from None
            if ids.numel():
                raise
            raise GradingError(
                f"your code raised {type(error).__name__}: {error}. Hint: {_EMPTY_IDS_HINT}"
            ) from None

    def wrong(self, ids, vocab_size, *, mistake):
        if mistake == "min_max_on_empty" or (mistake == "squeezed" and ids.numel()):
            # min() and max() of an empty tensor raise
            if ids.is_floating_point() or ids.dtype == torch.bool:
                raise TypeError(f"ids must be integers, got {ids.dtype}")
            if ids.min() < 0 or ids.max() >= vocab_size:
                bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
                raise ValueError(f"id {bad} is outside [0, {vocab_size})")
        if mistake == "rows_by_arange":  # NumPy's out[np.arange(n), ids] = 1: 1-D ids only
            hot = torch.zeros(len(ids), vocab_size)
            hot[torch.arange(len(ids)), ids] = 1.0
            return hot
        columns = torch.arange(6 if mistake == "lesson_vocab" else vocab_size)
        hot = ids.unsqueeze(1 if mistake == "axis_one" else -1) == columns  # (..., vocab_size)
        if mistake == "vocab_not_last" and ids.dim() >= 1:
            hot = hot.transpose(-2, -1)
        wrong = {"long": hot.long(), "bool": hot, "double": hot.double()}
        wrong["squeezed"] = hot.float().squeeze()
        return wrong.get(mistake, hot.float())
