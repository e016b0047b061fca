"""Text to token ids and back: a character tokenizer, a word tokenizer and the course's corpora
(lesson 01; lessons 08 and 09 reuse the tokenizers).

    text  --tokenize-->  tokens  --stoi-->  ids          "cat sat" -> ["cat", "sat"] -> [7, 12]
    ids   --itos------>  tokens  --join-->  text

Special tokens come first in the vocabulary, in the order given: with the default specials
`<pad>` is id 0, so a padded batch is zeros wherever there is no token.

Corpora live in the package (`course_lib/data/`), found with `importlib.resources`, so they load
the same way in a checkout, on Binder and on Colab, and never download anything.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from importlib import resources

import torch
from torch import Tensor

from .validation import check_flag, check_positive_int, is_int

__all__ = [
    "CharTokenizer",
    "WordTokenizer",
    "split_words",
    "load_text",
    "list_data_files",
    "embedding_corpus",
]


class _Tokenizer:
    """What both tokenizers share: the vocabulary tables, ids <-> tokens, padding a batch.

    A subclass says how text splits into tokens (`tokenize`) and how tokens join back (`_join`).
    """

    def __init__(self, tokens: Iterable[str], specials: Sequence[str], what: str):
        if isinstance(specials, str):
            raise TypeError(
                f"specials must be a sequence of strings such as ('<pad>',), got {specials!r}"
            )
        specials = tuple(specials)
        tokens = list(tokens)
        for name, group in (("specials", specials), (what, tokens)):
            for token in group:
                if not isinstance(token, str) or token == "":
                    raise ValueError(
                        f"every entry of {name} must be a non-empty string, got {token!r}"
                    )
        self.itos: list[str] = [*specials, *tokens]
        seen: set[str] = set()
        for token in self.itos:
            if token in seen:
                raise ValueError(f"{token!r} appears twice in the vocabulary (specials + {what})")
            seen.add(token)
        self.stoi: dict[str, int] = {token: i for i, token in enumerate(self.itos)}
        self.specials: tuple[str, ...] = specials
        self.special_ids: frozenset[int] = frozenset(range(len(specials)))

    # -- sizes and special ids ---------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def _special(self, token: str) -> int | None:
        return self.stoi[token] if token in self.specials else None

    @property
    def pad_id(self) -> int | None:
        return self._special("<pad>")

    @property
    def bos_id(self) -> int | None:
        return self._special("<bos>")

    @property
    def eos_id(self) -> int | None:
        return self._special("<eos>")

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, specials={self.specials})"

    # -- what a subclass defines -----------------------------------------------------------
    def tokenize(self, text: str) -> list[str]:
        raise NotImplementedError

    def _token_id(self, token: str, text: str) -> int:
        raise NotImplementedError

    def _join(self, tokens: list[str]) -> str:
        raise NotImplementedError

    # -- encoding and decoding -------------------------------------------------------------
    def _edge_id(self, which: str, flag: str) -> int:
        token_id = self._special(which)
        if token_id is None:
            raise ValueError(
                f"{flag}=True needs the special token {which!r}, but this tokenizer's "
                f"specials are {self.specials}"
            )
        return token_id

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Text -> list of ids, optionally wrapped in `<bos>` ... `<eos>`."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        check_flag(add_bos, "add_bos")  # add_eos="no" would be truthy: an <eos> added
        check_flag(add_eos, "add_eos")
        ids = [self._token_id(token, text) for token in self.tokenize(text)]
        if add_bos:
            ids.insert(0, self._edge_id("<bos>", "add_bos"))
        if add_eos:
            ids.append(self._edge_id("<eos>", "add_eos"))
        return ids

    def decode(self, ids: Sequence[int] | Tensor, skip_specials: bool = True) -> str:
        """List (or 1-D tensor) of ids -> text. `skip_specials` drops `<pad>`, `<bos>`, `<eos>`."""
        check_flag(skip_specials, "skip_specials")
        if isinstance(ids, Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    "ids must be a 1-D tensor (seq_len,), got shape "
                    f"{tuple(ids.shape)}; decode one sequence at a time"
                )
            if ids.is_floating_point() or ids.dtype == torch.bool:
                dtype = str(ids.dtype).replace("torch.", "")
                raise TypeError(f"ids must hold integers, got dtype {dtype}")
            ids = ids.tolist()
        tokens = []
        for i in ids:
            if not is_int(i):
                raise TypeError(f"ids must be ints, got {i!r} ({type(i).__name__})")
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i} is outside the vocabulary [0, {self.vocab_size})")
            if skip_specials and i in self.special_ids and self.itos[i] != "<unk>":
                continue
            tokens.append(self.itos[i])
        return self._join(tokens)

    def encode_batch(
        self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Several texts -> (ids (batch, max_len) padded with pad_id, lengths (batch,)), long."""
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings, got a single str; wrap it: [text]")
        texts = list(texts)
        if not texts:
            raise ValueError("texts is empty; encode_batch needs at least one text")
        if self.pad_id is None:
            raise ValueError(
                f"encode_batch pads with '<pad>', but this tokenizer's specials are {self.specials}"
            )
        encoded = [self.encode(t, add_bos=add_bos, add_eos=add_eos) for t in texts]
        max_len = max(len(e) for e in encoded)
        # pad the Python lists, then build the tensor in one call (one small tensor per row
        # costs more than the rest of encoding a training batch)
        padded = [e + [self.pad_id] * (max_len - len(e)) for e in encoded]
        ids = torch.tensor(padded, dtype=torch.long).reshape(len(texts), max_len)
        lengths = torch.tensor([len(e) for e in encoded], dtype=torch.long)  # (batch,)
        return ids, lengths


class CharTokenizer(_Tokenizer):
    """One token per character. `chars` is a string or a sequence of single characters.

    >>> tok = CharTokenizer.from_text("hello")
    >>> tok.itos
    ['<pad>', '<bos>', '<eos>', 'e', 'h', 'l', 'o']
    >>> tok.encode("hello")
    [4, 3, 5, 5, 6]
    """

    def __init__(self, chars: Iterable[str], specials: Sequence[str] = ("<pad>", "<bos>", "<eos>")):
        chars = list(chars)
        for c in chars:
            if not isinstance(c, str) or len(c) != 1:
                raise ValueError(f"chars must hold single characters, got {c!r}")
        super().__init__(chars, specials, "chars")

    @classmethod
    def from_text(
        cls, text: str, specials: Sequence[str] = ("<pad>", "<bos>", "<eos>")
    ) -> CharTokenizer:
        """A tokenizer whose vocabulary is every character of `text`, sorted."""
        if not isinstance(text, str) or not text:
            raise ValueError(f"text must be a non-empty str, got {text!r:.40}")
        return cls(sorted(set(text)), specials)

    def tokenize(self, text: str) -> list[str]:
        return list(text)

    def _token_id(self, token: str, text: str) -> int:
        if token not in self.stoi or token in self.specials:
            raise ValueError(
                f"character {token!r} (at position {text.index(token)} of the text) "
                "is not in the vocabulary; build the tokenizer from text that has it"
            )
        return self.stoi[token]

    def _join(self, tokens: list[str]) -> str:
        return "".join(tokens)


_WORD = re.compile(r"\w+(?:'\w+)?|[^\w\s]")
_NO_SPACE_BEFORE = set(".,!?;:)'%")


def split_words(text: str) -> list[str]:
    """Lower-case `text` and split it into words and single punctuation marks.

    >>> split_words("Apple released a new iPhone!")
    ['apple', 'released', 'a', 'new', 'iphone', '!']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return _WORD.findall(text.lower())


class WordTokenizer(_Tokenizer):
    """One token per lower-cased word or punctuation mark; unknown words become `<unk>`.

    Decoding is lossy by design: the case and the exact spacing of the text are gone.
    """

    def __init__(
        self, words: Iterable[str], specials: Sequence[str] = ("<pad>", "<unk>", "<bos>", "<eos>")
    ):
        super().__init__(words, specials, "words")

    @classmethod
    def from_corpus(
        cls,
        texts: str | Iterable[str],
        min_count: int = 1,
        specials: Sequence[str] = ("<pad>", "<unk>", "<bos>", "<eos>"),
    ) -> WordTokenizer:
        """A vocabulary of every word seen at least `min_count` times, most frequent first
        (ties alphabetical, so the ids never depend on the order of a set)."""
        check_positive_int(min_count, "min_count")
        if isinstance(texts, str):
            texts = [texts]
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(split_words(text))
        if not counts:
            raise ValueError("texts contains no words; a vocabulary needs at least one")
        words = sorted(
            (w for w, c in counts.items() if c >= min_count and w not in specials),
            key=lambda w: (-counts[w], w),
        )
        return cls(words, specials)

    @property
    def unk_id(self) -> int | None:
        return self._special("<unk>")

    def tokenize(self, text: str) -> list[str]:
        return split_words(text)

    def _token_id(self, token: str, text: str) -> int:
        if token in self.stoi and token not in self.specials:
            return self.stoi[token]
        if self.unk_id is None:
            raise ValueError(
                f"word {token!r} is not in the vocabulary and this tokenizer has no "
                "'<unk>' special to stand for it"
            )
        return self.unk_id

    def _join(self, tokens: list[str]) -> str:
        out = ""
        for token in tokens:
            glue = "" if not out or token[0] in _NO_SPACE_BEFORE else " "
            out += glue + token
        return out


# ------------------------------------------------------------------------------------------
# Corpora
# ------------------------------------------------------------------------------------------


def list_data_files() -> list[str]:
    """The names of the text files shipped in `course_lib/data/`."""
    folder = resources.files("course_lib") / "data"
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".txt"))


def load_text(name: str) -> str:
    """The text of a file shipped in course_lib/data/, e.g. load_text("lesson01_sentences.txt")."""
    if not isinstance(name, str) or "/" in name or "\\" in name:
        raise ValueError(f"name must be a file name in course_lib/data, got {name!r}")
    path = resources.files("course_lib") / "data" / name
    if not path.is_file():
        raise ValueError(
            f"no data file {name!r} in course_lib/data; the shipped files are "
            f"{', '.join(list_data_files()) or 'none'}"
        )
    return path.read_text(encoding="utf-8")


# The embedding corpus: templates with slots, filled from small word families. Words of one
# family appear in the same contexts, and that is all the embeddings will learn from.
_FAMILIES = {
    "pet": ["cat", "dog", "kitten", "puppy", "pet", "hamster"],
    "fruit": ["apple", "banana", "pear", "orange", "fruit", "mango"],
    "company": ["apple", "google", "samsung", "microsoft", "sony"],
    "device": ["iphone", "phone", "laptop", "tablet", "computer"],
    "scan": ["scan", "ultrasound", "mri", "test"],
    "person": ["i", "she", "he", "we", "they", "my sister", "the farmer", "the doctor"],
}
_TEMPLATES = {
    "pet": [
        "every morning i feed my {pet}",
        "{person} fed the hungry {pet}",
        "the {pet} chased the ball in the garden",
        "my {pet} sleeps on the warm sofa",
        "the vet looked after the sick {pet}",
        "{person} took the {pet} for a walk",
        "the {pet} ate its food and drank some water",
        "a hungry {pet} waits by the door",
        "{person} played with the little {pet}",
    ],
    "fruit": [
        "{person} ate a ripe {fruit}",
        "{person} bought a fresh {fruit} at the market",
        "a sweet {fruit} is good for breakfast",
        "{person} cut the juicy {fruit} with a knife",
        "the {fruit} tree grows in the orchard",
        "{person} made juice from a {fruit}",
        "{person} picked a {fruit} from the tree",
        "the {fruit} tastes sweet and juicy",
    ],
    "company": [
        "{company} released a new {device}",
        "{company} announced a faster {device} today",
        "shares of {company} rose after the launch",
        "the {company} engineers designed the {device}",
        "{person} bought a {device} made by {company}",
        "{company} sells millions of {device}s",
    ],
    "scan": [
        "the doctor ordered a cat {scan} of the brain",
        "the hospital did a cat {scan} of his chest",
        "{person} needed a {scan} at the hospital",
        "the doctor read the {scan} results",
        "{person} waited for the {scan} in the clinic",
    ],
}
# Sentences about one word only, so that the words of a family are alike but not identical
# (a cat purrs, a dog barks; a banana is yellow, a pear green).
_PARTICULAR = {
    "cat": ["the cat purred on my lap", "the cat caught a mouse in the barn"],
    "kitten": ["the kitten purred softly", "a tiny kitten chased a mouse"],
    "dog": ["the dog barked at the postman", "the dog fetched the stick"],
    "puppy": ["the puppy barked and wagged its tail", "the puppy fetched a stick"],
    "hamster": ["the hamster ran in its wheel", "the hamster stored seeds in its cheeks"],
    "apple": ["the apple was red and crisp", "she baked an apple pie"],
    "pear": ["the pear was green and soft", "she baked a pear pie"],
    "banana": ["peel the yellow banana", "the monkey ate a banana"],
    "mango": ["the mango was yellow and soft", "peel the ripe mango"],
    "orange": ["she peeled an orange", "the orange was round and full of juice"],
    "google": ["google updated its search engine", "google runs huge data centres"],
    "microsoft": ["microsoft updated its software", "microsoft runs huge data centres"],
    "samsung": ["samsung makes screens and chips", "samsung built a new factory"],
    "sony": ["sony makes cameras and game consoles", "sony built a new factory"],
}
# How often each topic is drawn: pets and fruit dominate, the company sense of "apple" and the
# medical sense of "cat" are rarer, as in real text.
_TOPIC_WEIGHTS = {"pet": 5, "fruit": 4, "company": 3, "scan": 1}


def embedding_corpus(num_sentences: int = 3000, seed: int = 0) -> list[str]:
    """Simple sentences about pets, fruit, tech companies and hospital scans (lesson 01).

    Generated from templates with a seeded random generator, so every run gives the same list.
    "apple" is both a fruit and a company, "cat" is both a pet and part of "cat scan": the two
    ambiguities the lesson uses to show what a static embedding cannot do.
    """
    check_positive_int(num_sentences, "num_sentences")
    rng = random.Random(seed)
    topics = list(_TOPIC_WEIGHTS)
    weights = [_TOPIC_WEIGHTS[t] for t in topics]
    sentences = []
    for _ in range(num_sentences):
        topic = rng.choices(topics, weights)[0]
        if topic != "scan" and rng.random() < 0.25:
            word = rng.choice([w for w in _FAMILIES[topic] if w in _PARTICULAR])
            sentences.append(rng.choice(_PARTICULAR[word]))
            continue
        template = rng.choice(_TEMPLATES[topic])
        slots = {family: rng.choice(words) for family, words in _FAMILIES.items()}
        sentences.append(template.format(**slots))
    return sentences
