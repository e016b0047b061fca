"""Byte-level BPE (byte-pair encoding), the tokenizer of GPT-2 and most models since (lesson 01).

    text --pre-tokenize--> chunks --UTF-8--> bytes (ids 0..255) --merges, in order--> ids
    ids  --vocab--> bytes --UTF-8--> text

Training starts from the 256 byte values and repeatedly merges the most frequent adjacent pair
of ids into a new id (256, 257, ...), until the vocabulary has `vocab_size` entries. Ties
between equally frequent pairs go to the smallest pair (compared as a tuple of ids), so
training is deterministic. Merges never cross a chunk boundary: the text is first cut into
words, numbers, punctuation runs and white space (`pre_tokenize`), so "the" and " the" can
become tokens, but "e." or "d t" cannot.

Any text encodes (every string is a sequence of bytes, and every byte is a token), and decoding
is exact. A list of ids that cuts a multi-byte character in half (e.g. the first byte of "é"
alone) is not valid UTF-8: `decode` shows each broken piece as "\\ufffd" (errors="replace"),
and `decode_bytes` returns the raw bytes.

The three building blocks, `pair_counts`, `merge_pair` and `bpe_encode`, are the ones the
lesson builds by hand (and exercise 01 asks for); `BPETokenizer` adds the speed: training
counts each distinct chunk once (weighted by how often it occurs) and updates the pair counts
after a merge only where the merged pair occurred; encoding remembers each chunk it has seen.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from os import PathLike

import torch
from torch import Tensor

from .validation import check_text

__all__ = [
    "PRE_TOKENIZE_PATTERN",
    "pre_tokenize",
    "pair_counts",
    "merge_pair",
    "bpe_encode",
    "BPETokenizer",
]

NUM_BYTES = 256  # ids 0..255 are the byte values; merge number r makes id 256 + r
_FILE_HEADER = "course_lib bpe v1"

# GPT-2's pre-tokenizer, written for the standard library's `re`. GPT-2's own pattern is
#     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
# and needs the third-party `regex` module for the Unicode classes \p{L} (letters) and \p{N}
# (numbers). Here a letter is [^\W\d_] (a word character that is not a decimal digit or "_"),
# a number is \d (a decimal digit), and punctuation is anything else that is not white space.
# The differences: numerals that are not decimal digits ("²", "½", "Ⅻ") count as letters here
# and as numbers in GPT-2, and code points unassigned in Python's Unicode tables may be classed
# differently. On the course's Shakespeare corpus and on ordinary text in any script the chunks
# are the same as GPT-2's (compared with the `regex` module; tests/test_bpe.py keeps examples).
# Every character falls into exactly one class, so the chunks always join back to the text.
PRE_TOKENIZE_PATTERN = re.compile(
    r"'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"
)


def pre_tokenize(text: str) -> list[str]:
    """Cut text into the chunks that merges may not cross; "".join(chunks) == text.

    >>> pre_tokenize("Who's there? 'Tis 12 o'clock.")
    ['Who', "'s", ' there', '?', " '", 'Tis', ' 12', ' o', "'", 'clock', '.']
    """
    check_text(text)
    return PRE_TOKENIZE_PATTERN.findall(text)


def pair_counts(ids: Sequence[int]) -> dict[tuple[int, int], int]:
    """How often each adjacent pair occurs in ids (n,); overlapping pairs all count.

    >>> pair_counts([5, 5, 5, 7])
    {(5, 5): 2, (5, 7): 1}
    """
    counts: dict[tuple[int, int], int] = {}
    for pair in _pairs(ids):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge_pair(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """ids (n,) -> a new list (<= n,) with each occurrence of `pair` replaced by `new_id`.

    Reads left to right and never reuses an id that was just merged:
    >>> merge_pair([5, 5, 5], (5, 5), 9)
    [9, 5]
    """
    first, second = pair
    merged: list[int] = []
    i = 0
    while i < len(ids):
        if ids[i] == first and i + 1 < len(ids) and ids[i + 1] == second:
            merged.append(new_id)
            i += 2
        else:
            merged.append(ids[i])
            i += 1
    return merged


def bpe_encode(ids: Sequence[int], merges: dict[tuple[int, int], int]) -> list[int]:
    """ids (n,) -> ids (<= n,) after applying each merge {pair: new_id} in the order learned.

    The order matters, not how often a pair occurs in `ids`: training merged the pairs in this
    order, so encoding must too, or the same text would get different tokens.
    """
    ids = list(ids)
    for pair, new_id in merges.items():
        ids = merge_pair(ids, pair, new_id)
    return ids


class BPETokenizer:
    """A byte-level BPE tokenizer: a list of merges, `merges[r] = (a, b)` makes id 256 + r.

    >>> tok = BPETokenizer.train("low lower lowest", vocab_size=259)
    >>> [tok.vocab[i] for i in tok.encode("lowest")]
    [b'low', b'e', b's', b't']
    >>> tok.decode(tok.encode("naïve café — 東京"))
    'naïve café — 東京'
    """

    def __init__(self, merges: Sequence[tuple[int, int]] = ()):
        if isinstance(merges, (str, bytes)):
            raise TypeError(f"merges must be a list of (id, id) pairs, got {type(merges).__name__}")
        checked = []
        for rank, pair in enumerate(merges):
            if (
                not isinstance(pair, (tuple, list))
                or len(pair) != 2
                or any(isinstance(i, bool) or not isinstance(i, int) for i in pair)
            ):
                raise ValueError(f"merges[{rank}] must be a pair of two int ids, got {pair!r}")
            if not all(0 <= i < NUM_BYTES + rank for i in pair):
                raise ValueError(
                    f"merges[{rank}] = {tuple(pair)} uses an id outside [0, {NUM_BYTES + rank}): "
                    f"a merge may only join bytes and the tokens of earlier merges"
                )
            checked.append((pair[0], pair[1]))
        if len(set(checked)) != len(checked):
            twice = next(p for p in checked if checked.count(p) > 1)
            raise ValueError(f"the pair {twice} is merged twice in merges; each pair merges once")
        self.merges: list[tuple[int, int]] = checked
        self.ranks: dict[tuple[int, int], int] = {pair: r for r, pair in enumerate(checked)}
        # vocab[i] is the bytes that token i stands for
        self.vocab: list[bytes] = [bytes([b]) for b in range(NUM_BYTES)]
        for first, second in checked:
            self.vocab.append(self.vocab[first] + self.vocab[second])
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size})"

    # -- training ----------------------------------------------------------------------------
    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        """Learn vocab_size - 256 merges from `text`: each time, the most frequent adjacent pair
        (summed over all chunks), ties to the smallest pair. Stops early, with a smaller
        vocabulary, when no chunk has two tokens left to merge.

        Counting every pair again after each merge is what the lesson does by hand; it is
        simple and slow. Here a chunk that occurs 5000 times is stored once with weight 5000,
        a merge updates the counts only in the chunks that contain its pair, and a heap finds
        the most frequent pair without scanning them all.
        """
        check_text(text)
        if (
            isinstance(vocab_size, bool)
            or not isinstance(vocab_size, int)
            or vocab_size < NUM_BYTES
        ):
            raise ValueError(
                f"vocab_size must be an int of at least {NUM_BYTES} (one token per "
                f"byte value, before any merge), got {vocab_size!r}"
            )
        chunk_counts = Counter(pre_tokenize(text))
        words = [list(chunk.encode("utf-8")) for chunk in chunk_counts]  # each distinct chunk
        weights = list(chunk_counts.values())  # how often it occurs
        counts: dict[tuple[int, int], int] = defaultdict(int)  # pair -> weighted count
        where: dict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> words that hold it
        for w, (ids, weight) in enumerate(zip(words, weights, strict=True)):
            for pair in _pairs(ids):
                counts[pair] += weight
                where[pair].add(w)
        # A max-heap by (count, then smallest pair) as a min-heap of (-count, pair). Entries go
        # stale when a count changes; a fresh one is pushed, and stale ones are skipped on pop.
        heap = [(-count, pair) for pair, count in counts.items()]
        heapq.heapify(heap)
        merges: list[tuple[int, int]] = []
        while len(merges) < vocab_size - NUM_BYTES:
            while heap and counts.get(heap[0][1], 0) != -heap[0][0]:
                heapq.heappop(heap)
            if not heap:
                break  # every chunk is a single token
            pair = heapq.heappop(heap)[1]
            new_id = NUM_BYTES + len(merges)
            merges.append(pair)
            changed = set()
            for w in where.pop(pair):
                old = words[w]
                new = merge_pair(old, pair, new_id)
                if len(new) == len(old):
                    continue  # this word lost the pair to an earlier merge
                weight = weights[w]
                for p in _pairs(old):
                    counts[p] -= weight
                for p in _pairs(new):
                    counts[p] += weight
                    where[p].add(w)
                changed.update(_pairs(old), _pairs(new))
                words[w] = new
            for p in changed:
                if counts[p] > 0:
                    heapq.heappush(heap, (-counts[p], p))
                else:
                    del counts[p]
        return cls(merges)

    # -- encoding and decoding -----------------------------------------------------------------
    def _encode_chunk(self, chunk: str) -> list[int]:
        """One chunk -> ids. Equal to bpe_encode(bytes, merges in order), but each step merges
        the lowest-ranked pair present, so merges absent from the chunk cost nothing."""
        ids = list(chunk.encode("utf-8", errors="surrogateescape"))
        ranks = self.ranks
        while len(ids) >= 2:
            pair = min(_pairs(ids), key=lambda p: ranks.get(p, len(ranks)))
            if pair not in ranks:
                break
            ids = merge_pair(ids, pair, NUM_BYTES + ranks[pair])
        return ids

    def encode(self, text: str) -> list[int]:
        """Text -> list of token ids (any text: every byte has a token)."""
        check_text(text)
        return self._encode_text(text)

    def encode_bytes(self, data: bytes) -> list[int]:
        """Any bytes -> list of token ids, even bytes that are not valid UTF-8:
        decode_bytes(encode_bytes(data)) == data."""
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        # "surrogateescape" turns each byte that is not valid UTF-8 into a stand-in character,
        # and back into the same byte in _encode_chunk: nothing is lost
        return self._encode_text(bytes(data).decode("utf-8", errors="surrogateescape"))

    def _encode_text(self, text: str) -> list[int]:
        ids: list[int] = []
        cache = self._cache
        for chunk in PRE_TOKENIZE_PATTERN.findall(text):
            chunk_ids = cache.get(chunk)
            if chunk_ids is None:
                chunk_ids = cache[chunk] = self._encode_chunk(chunk)
            ids.extend(chunk_ids)
        return ids

    def decode_bytes(self, ids: Sequence[int] | Tensor) -> bytes:
        """List (or 1-D tensor) of ids -> the bytes they stand for."""
        if isinstance(ids, Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    f"ids must be a 1-D tensor (seq_len,), got shape "
                    f"{tuple(ids.shape)}; decode one sequence at a time"
                )
            if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
                raise TypeError(
                    f"ids must hold integers, got dtype {str(ids.dtype).replace('torch.', '')}"
                )
            ids = ids.tolist()
        elif isinstance(ids, (str, bytes)):
            raise TypeError(f"ids must be a list of int token ids, got {type(ids).__name__}")
        vocab, size = self.vocab, len(self.vocab)
        pieces = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"ids must be ints, got {i!r} ({type(i).__name__})")
            if not 0 <= i < size:
                raise ValueError(f"id {i} is outside the vocabulary [0, {size})")
            pieces.append(vocab[i])
        return b"".join(pieces)

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """List (or 1-D tensor) of ids -> text. Exact for the ids of any text; bytes that are
        not valid UTF-8 (half a character) become "\\ufffd" instead of raising."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    # -- saving and loading ----------------------------------------------------------------------
    def save(self, path: str | PathLike) -> None:
        """Write the merges as a small text file: a header line, then one "a b" line per merge."""
        lines = [_FILE_HEADER] + [f"{a} {b}" for a, b in self.merges]
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | PathLike) -> BPETokenizer:
        """Read merges written by `save`."""
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        if not lines or lines[0] != _FILE_HEADER:
            raise ValueError(
                f"{str(path)!r} is not a merges file written by BPETokenizer.save "
                f"(its first line should be {_FILE_HEADER!r})"
            )
        merges = []
        for number, line in enumerate(lines[1:], start=2):
            parts = line.split()
            if len(parts) != 2 or not all(p.isdecimal() for p in parts):
                raise ValueError(
                    f"line {number} of {str(path)!r} should be two ids such as "
                    f"'101 32', got {line!r}"
                )
            merges.append((int(parts[0]), int(parts[1])))
        return cls(merges)


def _pairs(ids: Sequence[int]):
    """The adjacent pairs (ids[0], ids[1]), (ids[1], ids[2]), ...; none for fewer than 2 ids."""
    return zip(ids, ids[1:], strict=False)  # ids[1:] is one shorter: zip stops at the last pair
