"""course_lib.text: tokenizers and corpora."""

from __future__ import annotations

import pytest
import torch

from course_lib.text import (
    CharTokenizer,
    WordTokenizer,
    embedding_corpus,
    list_data_files,
    load_text,
    split_words,
)


def test_char_tokenizer_vocabulary_and_round_trip():
    tok = CharTokenizer.from_text("hello world")
    assert tok.itos[:3] == ["<pad>", "<bos>", "<eos>"]
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    assert tok.vocab_size == 3 + len(set("hello world"))
    assert all(tok.stoi[t] == i for i, t in enumerate(tok.itos))
    ids = tok.encode("hello", add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    assert tok.decode(ids) == "hello"
    assert tok.decode(torch.tensor(ids)) == "hello"
    assert tok.decode(ids, skip_specials=False) == "<bos>hello<eos>"


def test_char_tokenizer_keeps_given_order_and_optional_specials():
    tok = CharTokenizer("cba", specials=("<pad>",))
    assert tok.itos == ["<pad>", "c", "b", "a"]
    assert tok.bos_id is None and tok.eos_id is None
    with pytest.raises(ValueError, match="add_bos"):
        tok.encode("ab", add_bos=True)
    no_pad = CharTokenizer("ab", specials=())
    with pytest.raises(ValueError, match="<pad>"):
        no_pad.encode_batch(["ab"])


def test_char_tokenizer_unknown_character_is_named():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match="'z'"):
        tok.encode("abz")


@pytest.mark.parametrize(
    ("chars", "match"), [(["ab"], "single characters"), ("aa", "twice"), ([""], "single")]
)
def test_char_tokenizer_bad_chars(chars, match):
    with pytest.raises(ValueError, match=match):
        CharTokenizer(chars)


def test_decode_rejects_bad_ids():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([0, 99])
    with pytest.raises(ValueError, match="1-D"):
        tok.decode(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="integers"):
        tok.decode(torch.zeros(3))


def test_switches_of_encode_and_decode_must_be_true_or_false():
    # before: add_eos="no" and skip_specials="no" were truthy, so <eos> was added and the
    # specials dropped, silently
    tok = CharTokenizer.from_text("abc")
    for call, name in (
        (lambda v: tok.encode("ab", add_bos=v), "add_bos"),
        (lambda v: tok.encode("ab", add_eos=v), "add_eos"),
        (lambda v: tok.encode_batch(["ab"], add_eos=v), "add_eos"),
        (lambda v: tok.decode([1, 3], skip_specials=v), "skip_specials"),
    ):
        with pytest.raises(TypeError, match=f"{name} must be True or False, got 'no'"):
            call("no")
        call(False)


def test_encode_batch_pads_and_reports_lengths():
    tok = CharTokenizer.from_text("abcdef")
    ids, lengths = tok.encode_batch(["abc", "a", "fedcba"], add_eos=True)
    assert ids.dtype == torch.long and lengths.dtype == torch.long
    assert ids.shape == (3, 7)
    assert lengths.tolist() == [4, 2, 7]
    assert (ids[1, 2:] == tok.pad_id).all()
    for row, text in zip(ids, ["abc", "a", "fedcba"], strict=True):
        assert tok.decode(row) == text
    with pytest.raises(TypeError, match="texts"):
        tok.encode_batch("abc")
    with pytest.raises(ValueError, match="texts is empty"):
        tok.encode_batch([])


def test_split_words_lowercases_and_splits_punctuation():
    assert split_words("Apple released a new iPhone!") == [
        "apple",
        "released",
        "a",
        "new",
        "iphone",
        "!",
    ]
    assert split_words("Don't stop, cat.") == ["don't", "stop", ",", "cat", "."]


def test_word_tokenizer_from_corpus_min_count_and_unk():
    corpus = ["the cat sat", "the dog sat", "a cat ran"]
    tok = WordTokenizer.from_corpus(corpus, min_count=2)
    assert tok.itos == ["<pad>", "<unk>", "<bos>", "<eos>", "cat", "sat", "the"]
    assert tok.unk_id == 1
    assert tok.encode("the dog sat") == [tok.stoi["the"], tok.unk_id, tok.stoi["sat"]]
    assert tok.decode(tok.encode("The cat sat.")) == "the cat sat <unk>"
    ids, lengths = tok.encode_batch(["the cat", "cat"], add_bos=True)
    assert ids.tolist() == [[2, 6, 4], [2, 4, 0]] and lengths.tolist() == [3, 2]
    with pytest.raises(ValueError, match="min_count"):
        WordTokenizer.from_corpus(corpus, min_count=0)


def test_word_tokenizer_decode_attaches_punctuation():
    tok = WordTokenizer.from_corpus("hello, world!")
    assert tok.decode(tok.encode("Hello, world!", add_eos=True)) == "hello, world!"


def test_word_tokenizer_without_unk_names_the_word():
    tok = WordTokenizer(["cat"], specials=("<pad>",))
    with pytest.raises(ValueError, match="'dog'"):
        tok.encode("cat dog")


def test_shipped_text_is_found_through_the_package():
    assert "lesson01_sentences.txt" in list_data_files()
    text = load_text("lesson01_sentences.txt")
    assert "Apple released a new iPhone." in text
    with pytest.raises(ValueError, match="no data file"):
        load_text("missing.txt")
    with pytest.raises(ValueError, match="name"):
        load_text("../text.py")


def test_embedding_corpus_is_deterministic_and_has_both_senses():
    a, b = embedding_corpus(500, seed=0), embedding_corpus(500, seed=0)
    assert a == b and len(a) == 500
    assert a != embedding_corpus(500, seed=1)
    words = " ".join(a)
    assert "cat scan" in words and "feed my cat" in words
    assert any(s.startswith("apple released") or "made by apple" in s for s in a)
    with pytest.raises(ValueError, match="num_sentences"):
        embedding_corpus(0)
