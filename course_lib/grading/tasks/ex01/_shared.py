"""What the tasks of ex01 share: where to read up, and small pieces of the wrong implementations
(which must not call the graded references)."""

from __future__ import annotations

import torch

LESSON = "lesson 01"
BPE_LESSON = f"{LESSON}, section 'Byte-level BPE'"
# Calling any of the course's finished BPE pieces skips the point of these tasks.
BPE_FINISHED = (
    "course_lib.bpe.pair_counts",
    "course_lib.bpe.merge_pair",
    "course_lib.bpe.bpe_encode",
    "course_lib.bpe.BPETokenizer",
)
HELLO = list(b"hello, hello")  # bytes: h=104 e=101 l=108 o=111 ","=44 " "=32


def unchecked_one_hot(ids, vocab_size):
    return (ids.unsqueeze(-1) == torch.arange(vocab_size)).float()


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


def learned_merges(ids: list[int], num_merges: int, first_id: int) -> dict:
    """A merge table learned from `ids` the BPE way (most frequent pair, ties smallest)."""
    merges = {}
    for new_id in range(first_id, first_id + num_merges):
        counts: dict = {}
        for pair in adjacent(ids):
            counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        merges[pair] = new_id
        ids = merged(ids, pair, new_id)
    return merges
