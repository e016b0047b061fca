"""What the tasks of ex01 share: where to read up, and small pieces of the wrong implementations
(which must not call the graded references)."""

from __future__ import annotations

import torch

from ...core import Case

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


def tensor_ids(got) -> str | None:
    """A list holding 0-d tensors equals its ints value by value (tensor(3) == 3 is truthy)."""
    found = [i for i in got if isinstance(i, torch.Tensor)] if isinstance(got, list) else []
    if not found:
        return None
    return (
        f"your list holds tensors ({found[0]!r}), not ints: later code uses the ids as dict keys, "
        "where a tensor never matches the int; keep Python ints (.item(), .tolist())"
    )


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
