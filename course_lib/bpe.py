"""Byte-level BPE (byte-pair encoding), the tokenizer of GPT-2 and many models since (lesson 01).

    text --pre-tokenize--> chunks --UTF-8--> bytes (ids 0..255) --merges, in order--> ids
    ids  --vocab--> bytes --UTF-8--> text

Training starts from the 256 byte values and repeatedly merges the most frequent adjacent pair
of ids into a new id (256, 257, ...), until the vocabulary has `vocab_size` entries. Ties
between equally frequent pairs go to the lexicographically greatest pair of byte strings,
compared as (bytes of the first token, bytes of the second): the rule of Stanford CS336's
reference trainer, so the same text gives the same merges here and there, and training is
deterministic. Merges never cross a chunk boundary: the text is first cut into words, numbers,
punctuation runs and white space (`pre_tokenize`), so "the" and " the" can become tokens, but
"e." or "d t" cannot.

Special tokens (GPT-2's "<|endoftext|>") are whole strings with ids of their own after the
merges: training never merges them with anything (the text is cut at each one first), and
`encode` turns one into its single id only where the caller allows it (`allowed_special`);
elsewhere it is ordinary text, as tiktoken's `encode_ordinary` reads it.

GPT-2's own tokenizer loads as a `BPETokenizer`: `BPETokenizer.gpt2()` reads OpenAI's
`encoder.json` and `vocab.bpe` shipped in `course_lib/data/gpt2/` (their licence beside them)
and gives GPT-2's ids (tests/test_gpt2.py compares them with Hugging Face's tokenizer). GPT-2
numbers the 256 single bytes in another order (printable characters first), which
`byte_order` records.

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

import gzip
import heapq
import json
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from os import PathLike
from pathlib import Path

import torch
from torch import Tensor

from .validation import (
    at_the_door,
    check_id_list,
    check_id_pair,
    check_text,
    check_token_id,
    door,
    is_int,
)

__all__ = [
    "PRE_TOKENIZE_PATTERN",
    "pre_tokenize",
    "pair_counts",
    "merge_pair",
    "bpe_encode",
    "BPETokenizer",
    "GPT2_FILES",
]

NUM_BYTES = 256  # ids 0..255 are the byte values; merge number r makes id 256 + r
_FILE_HEADER = "course_lib bpe v1"  # merges only
_FILE_HEADER_V2 = "course_lib bpe v2"  # + the byte order and the special tokens
# OpenAI's GPT-2 tokenizer files, shipped gzip-compressed (decompressed, byte for byte the files
# tiktoken pins by hash; course_lib/data/gpt2/PROVENANCE.md)
GPT2_FILES = Path(__file__).resolve().parent / "data" / "gpt2"

# GPT-2's pre-tokenizer, written for the standard library's `re`. GPT-2's own pattern is
#     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
# and needs the third-party `regex` module for the Unicode classes \p{L} (letters) and \p{N}
# (numbers). Here a letter is [^\W\d_] (a word character that is not a decimal digit or "_"),
# a number is \d (a decimal digit), and punctuation is anything else that is not white space.
# The differences: numerals that are not decimal digits ("²", "½", "Ⅻ") count as letters here
# and as numbers in GPT-2; the separators U+001C-U+001F count as white space here (Python's \s,
# str.isspace) and as punctuation in GPT-2 (not in Unicode's White_Space): "\x1c\x1dctrl" is
# ['\x1c', '\x1d', 'ctrl'] here and ['\x1c\x1d', 'ctrl'] in GPT-2; and code points unassigned
# in Python's Unicode tables may be classed differently. On the course's Shakespeare corpus and
# on ordinary text in any script the chunks are the same as GPT-2's (compared with the `regex`
# module; tests/test_bpe.py keeps examples, tests/test_gpt2.py compares GPT-2's ids).
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


@door
def pair_counts(ids: Sequence[int]) -> dict[tuple[int, int], int]:
    """How often each adjacent pair occurs in ids (n,); overlapping pairs all count.

    >>> pair_counts([5, 5, 5, 7])
    {(5, 5): 2, (5, 7): 1}
    """
    if at_the_door():  # BPETokenizer's own calls skip the checks
        check_id_list(ids)
    counts: dict[tuple[int, int], int] = {}
    for pair in _pairs(ids):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


@door
def merge_pair(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """ids (n,) -> a new list (<= n,) with each occurrence of `pair` replaced by `new_id`.

    Reads left to right and never reuses an id that was just merged:
    >>> merge_pair([5, 5, 5], (5, 5), 9)
    [9, 5]
    """
    if at_the_door():
        check_id_list(ids)
        check_id_pair(pair)
        check_token_id(new_id, "new_id", "the id the pair becomes")
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


@door
def bpe_encode(ids: Sequence[int], merges: dict[tuple[int, int], int]) -> list[int]:
    """ids (n,) -> ids (<= n,) after applying each merge {pair: new_id} in the order learned.

    The order matters, not how often a pair occurs in `ids`: training merged the pairs in this
    order, so encoding must too, or the same text would get different tokens.
    """
    if at_the_door():
        check_id_list(ids)
        if not isinstance(merges, dict):
            raise TypeError(
                "merges must be a dict {(a, b): new_id} in the order the merges were learned, "
                f"got {type(merges).__name__}"
            )
        for pair, new_id in merges.items():
            check_id_pair(pair, "each key of merges")
            check_token_id(new_id, f"merges[{pair!r}]", "the id the pair becomes")
    ids = list(ids)
    for pair, new_id in merges.items():
        ids = merge_pair(ids, pair, new_id)
    return ids


class BPETokenizer:
    """A byte-level BPE tokenizer: a list of merges, `merges[r] = (a, b)` makes id 256 + r.

    >>> tok = BPETokenizer.train("low lower lowest", vocab_size=258)  # merges "ow", "low"
    >>> [tok.vocab[i] for i in tok.encode("lowest")]
    [b'low', b'e', b's', b't']
    >>> tok.decode(tok.encode("naïve café — 東京"))
    'naïve café — 東京'

    special_tokens: strings that get one id each, after the merges (256 + len(merges), ...),
    never merged with anything; `encode(text, allowed_special=...)` reads them whole.
    byte_order: which byte each of the ids 0..255 stands for; None is id b = byte b, the
    course's order. GPT-2 numbers them printable characters first (`BPETokenizer.gpt2()`).
    """

    def __init__(
        self,
        merges: Sequence[tuple[int, int]] = (),
        special_tokens: Sequence[str] = (),
        byte_order: Sequence[int] | None = None,
    ):
        if isinstance(merges, (str, bytes)):
            raise TypeError(f"merges must be a list of (id, id) pairs, got {type(merges).__name__}")
        checked = []
        for rank, pair in enumerate(merges):
            if (
                not isinstance(pair, (tuple, list))
                or len(pair) != 2
                or any(not is_int(i) for i in pair)
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
        self.byte_order: list[int] | None = _check_byte_order(byte_order)
        # _byte_ids[b] is the id of byte b (None: the byte's own value)
        self._byte_ids: list[int] | None = None
        if self.byte_order is not None:
            self._byte_ids = [0] * NUM_BYTES
            for i, b in enumerate(self.byte_order):
                self._byte_ids[b] = i
        # vocab[i] is the bytes that token i stands for
        self.vocab: list[bytes] = [bytes([b]) for b in (self.byte_order or range(NUM_BYTES))]
        for first, second in checked:
            self.vocab.append(self.vocab[first] + self.vocab[second])
        # special token -> its id, after the merges
        self.special_tokens: dict[str, int] = {}
        if isinstance(special_tokens, str):
            raise TypeError("special_tokens must be a list of strings, got one str")
        for token in special_tokens:
            if not isinstance(token, str) or not token:
                raise ValueError(f"special_tokens must be non-empty strings, got {token!r}")
            if token in self.special_tokens:
                raise ValueError(f"the special token {token!r} is listed twice")
            self.special_tokens[token] = len(self.vocab)
            self.vocab.append(token.encode("utf-8"))
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        special = f", special_tokens={list(self.special_tokens)}" if self.special_tokens else ""
        return f"BPETokenizer(vocab_size={self.vocab_size}{special})"

    # -- training ----------------------------------------------------------------------------
    @classmethod
    @door
    def train(cls, text: str, vocab_size: int, special_tokens: Sequence[str] = ()) -> BPETokenizer:
        """Learn vocab_size - 256 - len(special_tokens) merges from `text`: each time, the most
        frequent adjacent pair (summed over all chunks); ties go to the greatest pair of byte
        strings, (vocab[a], vocab[b]), as in the reference trainers. Stops early, with a
        smaller vocabulary, when no chunk has two tokens left to merge. The text is cut at
        every special token first, so no merge reaches into one; they get the last ids.

        Counting every pair again after each merge is what the lesson does by hand; it is
        simple and slow. Here a chunk that occurs 5000 times is stored once with weight 5000,
        a merge updates the counts only in the chunks that contain its pair, and a heap finds
        the most frequent pair without scanning them all.
        """
        check_text(text)
        specials = list(special_tokens) if not isinstance(special_tokens, str) else None
        if specials is None:
            raise TypeError("special_tokens must be a list of strings, got one str")
        if not is_int(vocab_size) or vocab_size < NUM_BYTES + len(specials):
            raise ValueError(
                f"vocab_size must be an int of at least {NUM_BYTES + len(specials)} (one token "
                f"per byte value and per special token, before any merge), got {vocab_size!r}"
            )
        pieces = _split_on_specials(text, specials) if specials else [text]
        chunk_counts = Counter(
            chunk for piece in pieces if piece not in specials for chunk in pre_tokenize(piece)
        )
        words = [list(chunk.encode("utf-8")) for chunk in chunk_counts]  # each distinct chunk
        weights = list(chunk_counts.values())  # how often it occurs
        vocab = [bytes([b]) for b in range(NUM_BYTES)]  # grows with each merge
        counts: dict[tuple[int, int], int] = defaultdict(int)  # pair -> weighted count
        where: dict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> words that hold it
        for w, (ids, weight) in enumerate(zip(words, weights, strict=True)):
            for pair in _pairs(ids):
                counts[pair] += weight
                where[pair].add(w)

        def entry(pair: tuple[int, int]) -> tuple:
            # heapq pops the smallest entry: the largest count, then the greatest byte strings
            return (-counts[pair], _Greatest((vocab[pair[0]], vocab[pair[1]])), pair)

        # Entries go stale when a count changes; a fresh one is pushed, stale ones are skipped.
        heap = [entry(pair) for pair in counts]
        heapq.heapify(heap)
        merges: list[tuple[int, int]] = []
        while len(merges) < vocab_size - NUM_BYTES - len(specials):
            while heap and counts.get(heap[0][2], 0) != -heap[0][0]:
                heapq.heappop(heap)
            if not heap:
                break  # every chunk is a single token
            pair = heapq.heappop(heap)[2]
            new_id = NUM_BYTES + len(merges)
            merges.append(pair)
            vocab.append(vocab[pair[0]] + vocab[pair[1]])
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
                    heapq.heappush(heap, entry(p))
                else:
                    del counts[p]
        return cls(merges, specials)

    # -- GPT-2's tokenizer -------------------------------------------------------------------------
    @classmethod
    def gpt2(cls) -> BPETokenizer:
        """GPT-2's tokenizer (50,257 tokens: 256 bytes, 50,000 merges, "<|endoftext|>"), from
        OpenAI's files shipped in course_lib/data/gpt2/: the same ids as GPT-2's own."""
        return cls.from_gpt2_files(GPT2_FILES / "encoder.json.gz", GPT2_FILES / "vocab.bpe.gz")

    @classmethod
    def from_gpt2_files(
        cls, encoder_json: str | PathLike, vocab_bpe: str | PathLike
    ) -> BPETokenizer:
        """A tokenizer from GPT-2's `encoder.json` (token -> id) and `vocab.bpe` (the merges in
        rank order), plain or gzip-compressed (".gz").

        Both files write each token's bytes with GPT-2's byte-to-unicode table (a space is
        "Ġ"); it is undone here. The ids 0..255 are GPT-2's single bytes in its order, merge r
        makes id 256 + r (checked against encoder.json), and the tokens after the merges
        ("<|endoftext|>", id 50256) are special tokens.
        """
        byte_of = {char: b for b, char in _gpt2_bytes_to_unicode().items()}
        encoder = json.loads(_read_text(encoder_json))
        lines = _read_text(vocab_bpe).split("\n")
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        token_of = {i: token for token, i in encoder.items()}
        try:
            byte_order = [byte_of[token_of[i]] for i in range(NUM_BYTES)]
        except KeyError as error:
            raise ValueError(
                f"{str(encoder_json)!r} should give ids 0..255 to the 256 single bytes "
                f"(GPT-2's byte-to-unicode characters); {error} is not one"
            ) from None
        merges = []
        for number, line in enumerate(lines, start=2):
            if not line:
                continue
            parts = line.split(" ")
            new_id = NUM_BYTES + len(merges)
            if len(parts) != 2 or encoder.get(parts[0] + parts[1]) != new_id:
                raise ValueError(
                    f"line {number} of {str(vocab_bpe)!r}, {line!r}, should be two tokens whose "
                    f"join has id {new_id} in {str(encoder_json)!r}: the files do not match"
                )
            merges.append((encoder[parts[0]], encoder[parts[1]]))
        if sorted(token_of) != list(range(len(encoder))):
            raise ValueError(f"{str(encoder_json)!r} should number its tokens 0, 1, 2, ...")
        specials = [token_of[i] for i in range(NUM_BYTES + len(merges), len(encoder))]
        return cls(merges, specials, byte_order)

    # -- encoding and decoding -----------------------------------------------------------------
    def _encode_chunk(self, chunk: str) -> list[int]:
        """One chunk -> ids. Equal to bpe_encode(bytes, merges in order), but each step merges
        the lowest-ranked pair present, so merges absent from the chunk cost nothing."""
        data = chunk.encode("utf-8", errors="surrogateescape")
        byte_ids = self._byte_ids
        ids = list(data) if byte_ids is None else [byte_ids[b] for b in data]
        ranks = self.ranks
        while len(ids) >= 2:
            pair = min(_pairs(ids), key=lambda p: ranks.get(p, len(ranks)))
            if pair not in ranks:
                break
            ids = merge_pair(ids, pair, NUM_BYTES + ranks[pair])
        return ids

    @door
    def encode(self, text: str, allowed_special: str | Collection[str] = ()) -> list[int]:
        """Text -> list of token ids (any text: every byte has a token).

        allowed_special: the special tokens to read as their single id where they occur in
        the text ("all" for every one); any other occurrence is ordinary text, split into
        bytes and merges like the rest (so text from a user cannot forge an end of text).
        """
        check_text(text)
        allowed = self._allowed_special(allowed_special)
        if not allowed:
            return self._encode_text(text)
        ids: list[int] = []
        for piece in _split_on_specials(text, allowed):
            if piece in allowed:
                ids.append(self.special_tokens[piece])
            else:
                ids.extend(self._encode_text(piece))
        return ids

    def _allowed_special(self, allowed_special: str | Collection[str]) -> list[str]:
        if allowed_special == "all":
            return list(self.special_tokens)
        if isinstance(allowed_special, str):
            raise ValueError(
                f"allowed_special must be 'all' or a collection of special tokens, got the "
                f"string {allowed_special!r}; write [{allowed_special!r}] for one token"
            )
        allowed = list(allowed_special)
        for token in allowed:
            if token not in self.special_tokens:
                raise ValueError(
                    f"allowed_special names {token!r}, which is not a special token of this "
                    f"tokenizer; its special tokens are {list(self.special_tokens)}"
                )
        return allowed

    @door
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
            if not is_int(i):
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
        """Write the merges as a small text file: a header line, then one "a b" line per merge.

        A tokenizer with special tokens or another byte order writes two more lines after the
        header ("course_lib bpe v2"): "bytes" and the 256 bytes in id order, and "special" and
        the special tokens as a JSON list."""
        lines = [_FILE_HEADER]
        if self.special_tokens or self.byte_order is not None:
            order = self.byte_order or range(NUM_BYTES)
            lines = [
                _FILE_HEADER_V2,
                "bytes " + " ".join(map(str, order)),
                "special " + json.dumps(list(self.special_tokens)),
            ]
        lines += [f"{a} {b}" for a, b in self.merges]
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | PathLike) -> BPETokenizer:
        """Read merges written by `save`."""
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        if not lines or lines[0] not in (_FILE_HEADER, _FILE_HEADER_V2):
            raise ValueError(
                f"{str(path)!r} is not a merges file written by BPETokenizer.save "
                f"(its first line should be {_FILE_HEADER!r} or {_FILE_HEADER_V2!r})"
            )
        byte_order, specials, first = None, [], 2
        if lines[0] == _FILE_HEADER_V2:
            try:
                name, _, order = lines[1].partition(" ")
                byte_order = [int(b) for b in order.split()]
                name_2, _, listed = lines[2].partition(" ")
                specials = json.loads(listed)
                if (name, name_2) != ("bytes", "special") or not isinstance(specials, list):
                    raise ValueError
            except (IndexError, ValueError):
                raise ValueError(
                    f"lines 2 and 3 of {str(path)!r} should be 'bytes' and the 256 bytes in id "
                    "order, then 'special' and a JSON list of the special tokens"
                ) from None
            first = 4
        merges = []
        for number, line in enumerate(lines[first - 1 :], start=first):
            parts = line.split()
            if len(parts) != 2 or not all(p.isdecimal() for p in parts):
                raise ValueError(
                    f"line {number} of {str(path)!r} should be two ids such as "
                    f"'101 32', got {line!r}"
                )
            merges.append((int(parts[0]), int(parts[1])))
        return cls(merges, specials, byte_order)


def _pairs(ids: Sequence[int]):
    """The adjacent pairs (ids[0], ids[1]), (ids[1], ids[2]), ...; none for fewer than 2 ids."""
    return zip(ids, ids[1:], strict=False)  # ids[1:] is one shorter: zip stops at the last pair


class _Greatest:
    """Wraps a key so that heapq's smallest entry is the greatest key (ties in training)."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[bytes, bytes]):
        self.key = key

    def __lt__(self, other: _Greatest) -> bool:
        return self.key > other.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Greatest) and self.key == other.key


def _split_on_specials(text: str, specials: Sequence[str]) -> list[str]:
    """text -> pieces, each special token a piece of its own (the longest one where two
    overlap); "".join(pieces) == text."""
    pattern = "|".join(re.escape(token) for token in sorted(specials, key=len, reverse=True))
    return [piece for piece in re.split(f"({pattern})", text) if piece]


def _check_byte_order(byte_order: Sequence[int] | None) -> list[int] | None:
    if byte_order is None:
        return None
    order = list(byte_order)
    if sorted(order) != list(range(NUM_BYTES)) or any(isinstance(b, bool) for b in order):
        raise ValueError(
            "byte_order must list each byte value 0..255 once (the byte of ids 0, 1, ..., 255), "
            f"got {len(order)} values"
        )
    return None if order == list(range(NUM_BYTES)) else order


def _gpt2_bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table byte -> printable character, as in its encoder.py: the printable bytes
    stand for themselves, the other 68 (space, newline, control bytes, ...) for the characters
    256, 257, ... in byte order (a space is "Ġ", chr(288), a newline "Ċ")."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    others = [b for b in range(NUM_BYTES) if b not in printable]
    table = {b: chr(b) for b in printable}
    table.update({b: chr(NUM_BYTES + n) for n, b in enumerate(others)})
    return table


def _read_text(path: str | PathLike) -> str:
    """A UTF-8 text file, gzip-compressed when its name ends in ".gz"."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read()
