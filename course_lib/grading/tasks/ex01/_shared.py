"""What the tasks of ex01 share: where to read up, and small pieces of the wrong implementations
(which must not call the graded references)."""

from __future__ import annotations

import numbers

import torch

from ...core import Case, GradingError

LESSON = "lesson 01"
BPE_LESSON = f"{LESSON}, section 'Byte-level BPE'"
# Calling any of the course's finished BPE pieces skips the point of these tasks (a task's own
# reference among them is reported as such).
BPE_FINISHED = (
    "course_lib.bpe.pair_counts",
    "course_lib.bpe.merge_pair",
    "course_lib.bpe.bpe_encode",
    "course_lib.bpe.BPETokenizer",
)
HELLO = list(b"hello, hello")  # bytes: h=104 e=101 l=108 o=111 ","=44 " "=32


def spelled(note: str = "", **inputs) -> Case:
    """A case whose description spells out its inputs, "ids [4, 4, 4], pair (4, 4), new_id 9",
    then `note` after a colon."""
    text = ", ".join(f"{name} {value!r}" for name, value in inputs.items())
    return Case(text + (f": {note}" if note else ""), tuple(inputs.values()))


def unchecked_one_hot(ids, vocab_size):
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


def numpy_number(value) -> bool:
    """np.int64(3) and its kin: equal to the int, but not one (a NumPy array's items)."""
    return isinstance(value, numbers.Number) and not isinstance(value, (int, float, torch.Tensor))


def tensor_ids(got) -> str | None:
    """A list holding 0-d tensors equals its ints value by value (tensor(3) == 3 is truthy);
    one holding NumPy integers reaches the check as "<int64>" (outcomes keep plain types)."""
    items = got if isinstance(got, list) else []
    numpy = [i["__repr__"] for i in items if isinstance(i, dict) and "__repr__" in i]
    if numpy:
        return (
            f"your list holds NumPy integers ({numpy[0].strip('<>')}, from a NumPy array), not "
            "Python ints: ids are a list of ints; convert with .tolist() (or int(...))"
        )
    found = [i for i in items if isinstance(i, torch.Tensor)]
    if not found:
        return None
    return (
        f"your list holds tensors ({found[0]!r}), not ints: later code uses the ids as dict keys, "
        "where a tensor never matches the int; keep Python ints (.item(), .tolist())"
    )


KEPT_RESULT = (
    "your result is the one of an earlier call (on {earlier}), not of the inputs given now: "
    "your function keeps something between calls (a cache keyed on the shapes or sizes, a "
    "result or table built at the first call and reused, a mutable default argument); "
    "compute it from the inputs of every call"
)


def check_not_reused(obj, result, *other_args) -> None:
    """Raise GradingError when a second call, on `other_args`, changes the dict or list that
    the first call returned: one made once (outside the function, emptied at each call)."""
    if not isinstance(result, (dict, list)):
        return
    before = result.copy()
    try:
        obj(*other_args)
    except Exception:  # noqa: BLE001, S110  (the first call's result is what is judged)
        return
    if result != before:
        what = type(result).__name__
        example = "counts={}" if what == "dict" else "merged=[]"
        raise GradingError(
            f"a later call changed the {what} your function returned earlier: it returns the "
            f"same {what} at every call, one made once (a default argument ({example}), or "
            f"one outside the function, emptied or not), so a caller that keeps two results "
            f"sees only the last; make a new {what} inside the function, at every call"
        )


def repeated(description: str, args: tuple, earlier: str, earlier_result) -> Case:
    """A case whose inputs have the shapes of an earlier case's, other values: a function that
    kept a result from the earlier call returns `earlier_result` here."""
    data = {"earlier": earlier, "earlier_result": earlier_result}
    return Case(description, args, data=data)


def kept_result(got, case: Case) -> str | None:
    """The hint for a result equal to an earlier case's (see `repeated`), else None."""
    stale = case.data.get("earlier_result")
    if not isinstance(got, torch.Tensor) or not isinstance(stale, torch.Tensor):
        return None
    if got.shape != stale.shape or got.dtype != stale.dtype or not torch.allclose(got, stale):
        return None
    return KEPT_RESULT.format(earlier=case.data["earlier"])


def unit_rows(E):
    return E / E.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def random_ids(gen: torch.Generator, high: int, n: int, offset: int = 0) -> list[int]:
    return (torch.randint(0, high, (n,), generator=gen) + offset).tolist()


def adjacent(ids):
    return [(ids[i], ids[i + 1]) for i in range(len(ids) - 1)]


def merged(ids, pair, new_id):
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
