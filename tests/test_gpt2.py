"""GPT-2 in the course's code: OpenAI's tokenizer files read by course_lib.bpe, and GPT-2's
weights (Hugging Face's state dict) loaded into course_lib.gpt.GPT.

The reference is Hugging Face's `transformers` (the [test] extra), built offline from the same
files (the tokenizer) or from a small random configuration (the model): nothing downloads.
"""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from course_lib.bpe import GPT2_FILES, BPETokenizer, _gpt2_bytes_to_unicode
from course_lib.datasets import load_shakespeare

transformers = pytest.importorskip("transformers")

# accents, emoji (one with a skin tone: two code points), CJK, numbers, runs of spaces and
# tabs, contractions ('s 'll 're 've 'm 'd 't, and "'S", which GPT-2's pattern does not split)
HARD_TEXT = (
    "naïve café — Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. "
    "👍🏽 🎉🎉 東京タワー 안녕하세요 Привет, мир!\n"
    "It's 3.14159 or 1,000,000 or 2024-11-26; she'll say we're sure they've I'm he'd don't "
    "IT'S\n\n\n   four spaces    and\ttabs\t\t end  \n  "
    "x² ½ Ⅻ — «quotes» “curly” ‘single’ e\u0301 (e + combining accent) \u00a0nbsp"
)


def _read(name: str) -> bytes:
    return gzip.decompress((GPT2_FILES / f"{name}.gz").read_bytes())


@pytest.fixture(scope="module")
def gpt2_tokenizer():
    return BPETokenizer.gpt2()


@pytest.fixture(scope="module")
def reference_tokenizer():
    """Hugging Face's GPT-2 tokenizer, from the same two files (decompressed)."""
    vocab = json.loads(_read("encoder.json"))
    lines = _read("vocab.bpe").decode("utf-8").split("\n")[1:]  # after "#version: 0.2"
    merges = [tuple(line.split(" ")) for line in lines if line]
    return transformers.GPT2Tokenizer(vocab=vocab, merges=merges)


def test_the_shipped_files_are_the_ones_tiktoken_pins():
    pins = {
        "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
        "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    }
    for name, sha256 in pins.items():
        assert hashlib.sha256(_read(name)).hexdigest() == sha256
    assert (GPT2_FILES / "LICENSE").read_text().startswith("Modified MIT License")


def test_the_vocabulary_is_gpt2s(gpt2_tokenizer):
    tok = gpt2_tokenizer
    assert tok.vocab_size == 50257 and len(tok.merges) == 50000
    assert tok.special_tokens == {"<|endoftext|>": 50256}
    # every token's bytes, written with GPT-2's byte-to-unicode table, is its encoder.json entry
    to_unicode = _gpt2_bytes_to_unicode()
    encoder = json.loads(_read("encoder.json"))
    written = {
        "".join(to_unicode[b] for b in token) if i < 50256 else token.decode(): i
        for i, token in enumerate(tok.vocab)
    }
    assert written == encoder
    assert tok.vocab[encoder["Ġthe"]] == b" the" and tok.vocab[encoder["Ċ"]] == b"\n"


@pytest.mark.parametrize("name", ["hard text", "course corpus"])
def test_ids_equal_hugging_faces(name, gpt2_tokenizer, reference_tokenizer):
    text = HARD_TEXT if name == "hard text" else load_shakespeare()
    ids = gpt2_tokenizer.encode(text)
    assert ids == reference_tokenizer.encode(text)
    assert gpt2_tokenizer.decode(ids) == text == reference_tokenizer.decode(ids)


def test_end_of_text_is_one_token_where_allowed(gpt2_tokenizer, reference_tokenizer):
    text = "The end.<|endoftext|>A new text: <|endoftext|>"
    ids = gpt2_tokenizer.encode(text, allowed_special="all")
    assert ids == reference_tokenizer.encode(text)  # Hugging Face always reads it whole
    assert ids.count(50256) == 2 and gpt2_tokenizer.decode(ids) == text
    plain = gpt2_tokenizer.encode(text)  # not allowed: ordinary text, "<", "|", "end", ...
    assert 50256 not in plain and gpt2_tokenizer.decode(plain) == text
