"""course_lib.bpe: the fast trainer learns exactly the merges of the slow, obvious one; encoding
is the merges applied in the order learned; decoding is exact for any text and any bytes."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest
import torch

from course_lib.bpe import (
    PRE_TOKENIZE_PATTERN,
    BPETokenizer,
    bpe_encode,
    merge_pair,
    pair_counts,
    pre_tokenize,
)
from course_lib.datasets import load_shakespeare

# ---- a plain reference: count every pair again after every merge ----------------------------


def reference_merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    out, i = [], 0
    while i < len(ids):
        if tuple(ids[i : i + 2]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def reference_train(
    text: str, vocab_size: int, special_tokens: tuple[str, ...] = ()
) -> list[tuple[int, int]]:
    """Every chunk occurrence kept separately, all pairs recounted after each merge; the most
    frequent pair wins, ties go to the greatest pair of byte strings (vocab[a], vocab[b]), as
    in CS336's reference trainer. The text is cut at the special tokens, which are left out."""
    if special_tokens:
        pattern = "|".join(map(re.escape, sorted(special_tokens, key=len, reverse=True)))
        pieces = [p for p in re.split(pattern, text) if p]
    else:
        pieces = [text]
    words = [list(chunk.encode("utf-8")) for piece in pieces for chunk in pre_tokenize(piece)]
    vocab = [bytes([b]) for b in range(256)]
    merges = []
    for new_id in range(256, vocab_size - len(special_tokens)):
        counts = Counter()
        for word in words:
            for i in range(len(word) - 1):
                counts[word[i], word[i + 1]] += 1
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]]))
        merges.append(pair)
        vocab.append(vocab[pair[0]] + vocab[pair[1]])
        words = [reference_merge(word, pair, new_id) for word in words]
    return merges


def random_text(seed: int, alphabet: str, length: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(length))


TEXTS = {
    "shakespeare": (load_shakespeare()[:3000], 330),
    "runs of one letter": ("aaaaaaaaa aaaa aaa aaaaa bbbbbbbb abababab aaaa\n" * 3, 290),
    "non-ASCII": ("naïve café — 東京, naïve cafés; Привет, мир! 東京 東京タワー ünïcödé " * 4, 320),
    "two letters, many ties": (random_text(0, "ab", 600), 300),
    "letters, spaces, punctuation": (random_text(1, "aab c.\n'", 1500), 320),
    "digits and underscores": (random_text(2, "0123__x y", 800), 300),
}


@pytest.fixture(scope="module")
def shakespeare_tokenizer():
    return BPETokenizer.train(load_shakespeare(), 512)


@pytest.mark.parametrize("name", TEXTS)
def test_merges_equal_the_plain_reference(name):
    text, vocab_size = TEXTS[name]
    tok = BPETokenizer.train(text, vocab_size)
    assert tok.merges == reference_train(text, vocab_size)


def test_a_smaller_vocabulary_is_the_start_of_a_larger_one():
    # training is greedy, so lesson 01 may learn 1024 tokens once and keep the first 512
    text = load_shakespeare()[:20_000]
    assert BPETokenizer.train(text, 300).merges == BPETokenizer.train(text, 340).merges[:44]


def test_ties_go_to_the_greatest_pair_of_byte_strings():
    # "dc", "cd", "ba" and "ab" each occur twice (lines are chunks of their own): the first
    # merge is the greatest pair of byte strings, (b"d", b"c"), though it is the first to appear
    tok = BPETokenizer.train("ab\nba\ncd\ndc\n" * 2, 258)
    assert tok.merges == [(100, 99), (99, 100)]


def test_ties_compare_bytes_not_ids():
    # Wikipedia's "aaabdaaabac": after "aa" (id 256), ("aa", "a") and ("a", "b") both occur
    # twice. As ids, (97, 98) < (256, 97); as byte strings, (b"aa", b"a") > (b"a", b"b"), and
    # the bytes decide (CS336's and GPT-2's rule), so the second merge is "aaa"
    tok = BPETokenizer.train("aaabdaaabac", 259)
    assert [tok.vocab[i] for i in range(256, 259)] == [b"aa", b"aaa", b"aaab"]
    assert tok.merges == reference_train("aaabdaaabac", 259)


def test_training_stops_when_nothing_is_left_to_merge():
    tok = BPETokenizer.train("ab ab", 1000)
    assert tok.merges == [(97, 98), (32, 256)]  # "ab", then " ab"; each chunk is one token
    assert tok.vocab_size == 258
    assert BPETokenizer.train("", 300).vocab_size == 256
    assert BPETokenizer.train("anything", 256).merges == []


def test_merges_never_cross_a_chunk_boundary(shakespeare_tokenizer):
    tokens = [t.decode("utf-8") for t in shakespeare_tokenizer.vocab[256:]]
    for token in tokens:
        if not token.isspace():
            assert " " not in token[1:] and "\n" not in token, token  # space only in front
        # a word never runs on into a space or punctuation ("d t", "e.")
        assert not re.search(r"[A-Za-z][^A-Za-z]", token), token


def test_the_vocabulary_is_bytes_then_merged_pairs(shakespeare_tokenizer):
    tok = shakespeare_tokenizer
    assert tok.vocab_size == len(tok.vocab) == len(tok) == 512
    assert tok.vocab[:256] == [bytes([b]) for b in range(256)]
    for r, (a, b) in enumerate(tok.merges):
        assert tok.vocab[256 + r] == tok.vocab[a] + tok.vocab[b]
    assert tok.vocab.index(b" the") < tok.vocab.index(b" thee")  # the commoner word first


# ---- pre-tokenization ------------------------------------------------------------------------

# What GPT-2's own pattern (with the `regex` module and \p{L}, \p{N}) gives on these texts.
GPT2_CHUNKS = {
    "Who's there? 'Tis 12 o'clock.": [
        "Who",
        "'s",
        " there",
        "?",
        " '",
        "Tis",
        " 12",
        " o",
        "'",
        "clock",
        ".",
    ],
    "naïve café — 東京": ["naïve", " café", " —", " 東京"],
    "  two  spaces,\n\n\ttab_and x__y 3.14!": [
        " ",
        " two",
        " ",
        " spaces",
        ",",
        "\n\n",
        "\t",
        "tab",
        "_",
        "and",
        " x",
        "__",
        "y",
        " 3",
        ".",
        "14",
        "!",
    ],
    "We'll see; they've gone, I'm sure you'd agree.": [
        "We",
        "'ll",
        " see",
        ";",
        " they",
        "'ve",
        " gone",
        ",",
        " I",
        "'m",
        " sure",
        " you",
        "'d",
        " agree",
        ".",
    ],
    "Привет, мир! 안녕 こんにちは 👍🏽": [
        "Привет",
        ",",
        " мир",
        "!",
        " 안녕",
        " こんにちは",
        " 👍🏽",
    ],
}


@pytest.mark.parametrize("text", GPT2_CHUNKS)
def test_pre_tokenize_matches_gpt2_on_examples(text):
    assert pre_tokenize(text) == GPT2_CHUNKS[text]


def test_pre_tokenize_loses_nothing():
    rng = random.Random(0)
    for _ in range(200):
        text = "".join(
            chr(
                rng.choice(
                    [
                        rng.randrange(32, 127),
                        rng.randrange(0x80, 0x3000),
                        rng.randrange(0x1F300, 0x1F600),
                        10,
                        9,
                        32,
                        39,
                    ]
                )
            )
            for _ in range(rng.randrange(0, 40))
        )
        assert "".join(pre_tokenize(text)) == text


def test_non_decimal_numerals_are_letters_here():
    # the documented difference from GPT-2, which would split "x²" into "x", "²"
    assert pre_tokenize("x² ½") == ["x²", " ½"]


# ---- the building blocks ---------------------------------------------------------------------


def test_pair_counts_counts_overlapping_pairs():
    assert pair_counts([]) == {} and pair_counts([4]) == {}
    assert pair_counts([7, 7, 7]) == {(7, 7): 2}
    assert pair_counts([1, 2, 1, 2, 3]) == {(1, 2): 2, (2, 1): 1, (2, 3): 1}


def test_merge_pair_reads_left_to_right_without_overlap():
    assert merge_pair([], (1, 2), 9) == []
    assert merge_pair([1], (1, 2), 9) == [1]
    assert merge_pair([5, 5, 5], (5, 5), 9) == [9, 5]
    assert merge_pair([5, 5, 5, 5], (5, 5), 9) == [9, 9]
    assert merge_pair([1, 2, 3, 1, 2], (1, 2), 9) == [9, 3, 9]
    assert merge_pair([2, 1, 2, 1], (1, 2), 9) == [2, 9, 1]
    ids = [1, 2]
    merge_pair(ids, (1, 2), 9)
    assert ids == [1, 2]  # a new list; the input is left alone


def test_bpe_encode_follows_the_order_learned_not_the_frequency():
    ids = [1, 2, 3, 1, 2, 1, 2]  # (1, 2) occurs three times, (2, 3) once
    assert bpe_encode(ids, {(2, 3): 10, (1, 2): 11}) == [1, 10, 11, 11]
    assert bpe_encode(ids, {(1, 2): 10, (2, 3): 11}) == [10, 3, 10, 10]
    assert bpe_encode([1, 2, 3], {(1, 2): 10, (10, 3): 11}) == [11]  # a merge of a merge


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: pair_counts("hello"), r"got a str; turn text into its byte ids first"),
        (lambda: merge_pair("hello", ("l", "l"), 256), "got a str"),
        (lambda: bpe_encode("hello", {(108, 108): 256}), "got a str"),
        (lambda: pair_counts(["h", "e", "l"]), r"ids\[0\] is 'h' \(str\); ids must hold int ids"),
        (
            lambda: pair_counts(torch.tensor([1, 2, 1, 2])),
            r"got Tensor; convert it with ids.tolist",
        ),
        (lambda: merge_pair([1, 2], "ab", 9), r"pair must be a pair of two int ids \(a, b\)"),
        (lambda: merge_pair([1, 2], (1, 2, 3), 9), "pair must be a pair of two int ids"),
        (lambda: merge_pair([1, 2], (1, 2), "9"), "new_id must be an int"),
        (lambda: bpe_encode([1, 2], [((1, 2), 10)]), "merges must be a dict"),
        (lambda: bpe_encode([1, 2], {"ab": 10}), "each key of merges must be a pair"),
    ],
)
def test_the_bpe_pieces_name_ids_that_are_not_a_list_of_ints(call, words):
    # before: a str was read as ids silently (pair_counts("hello") counted ('h', 'e'), ...;
    # bpe_encode("hello", ...) returned the letters), a tensor's pairs were tensors that never
    # equal a dict key, merge_pair([1, 2], "ab", 9) merged nothing, and a list of merges raised
    # "'list' object has no attribute 'items'"
    with pytest.raises(TypeError, match=words):
        call()
    # the bytes of a text are ids too
    assert pair_counts(b"lll") == {(108, 108): 2} and merge_pair(b"lll", (108, 108), 9) == [9, 108]


# ---- encoding and decoding --------------------------------------------------------------------


def test_encode_applies_the_merges_in_rank_order(shakespeare_tokenizer):
    tok = shakespeare_tokenizer
    merges = {pair: 256 + r for r, pair in enumerate(tok.merges)}
    text = load_shakespeare()[-5000:] + " naïve café — 東京 Zwölf Boxkämpfer"
    by_rank = [
        i for chunk in pre_tokenize(text) for i in bpe_encode(list(chunk.encode("utf-8")), merges)
    ]
    assert tok.encode(text) == by_rank
    assert tok.encode(text) == by_rank  # again, now from the cache


def test_encoding_the_training_text_gives_the_training_tokens():
    text, vocab_size = TEXTS["letters, spaces, punctuation"]
    tok = BPETokenizer.train(text, vocab_size)
    words = [list(chunk.encode("utf-8")) for chunk in pre_tokenize(text)]
    for r, pair in enumerate(tok.merges):
        words = [reference_merge(word, pair, 256 + r) for word in words]
    assert tok.encode(text) == [i for word in words for i in word]


def test_frequent_words_become_one_token_and_rare_words_stay_split(shakespeare_tokenizer):
    tok = shakespeare_tokenizer
    assert len(tok.encode(" the")) == 1 and len(tok.encode(" you")) == 1
    assert len(tok.encode(" incarnadine")) >= 4


def test_decode_round_trips_any_text(shakespeare_tokenizer):
    tok = shakespeare_tokenizer
    assert tok.decode(tok.encode("naïve café — 東京")) == "naïve café — 東京"
    assert tok.decode(tok.encode("")) == ""
    rng = random.Random(1)
    for _ in range(300):
        text = "".join(
            chr(
                rng.choice(
                    [
                        rng.randrange(0, 0xD800),
                        rng.randrange(0xE000, 0x110000),
                        rng.randrange(32, 127),
                    ]
                )
            )
            for _ in range(rng.randrange(0, 30))
        )
        assert tok.decode(tok.encode(text)) == text


def test_any_bytes_round_trip(shakespeare_tokenizer):
    tok = shakespeare_tokenizer
    rng = random.Random(2)
    for _ in range(300):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        assert tok.decode_bytes(tok.encode_bytes(data)) == data
    text = "Thou art a villain. naïve café"
    assert tok.encode_bytes(text.encode("utf-8")) == tok.encode(text)


def test_invalid_utf8_decodes_to_the_replacement_character(shakespeare_tokenizer):
    tok = shakespeare_tokenizer
    e_acute = tok.encode("é")  # two bytes, 0xC3 0xA9: two byte tokens
    assert e_acute == [0xC3, 0xA9]
    assert tok.decode(e_acute[:1]) == "\ufffd"
    assert tok.decode_bytes(e_acute[:1]) == b"\xc3"
    assert tok.decode(torch.tensor(tok.encode("the king"))) == "the king"


# ---- saving and loading -----------------------------------------------------------------------


def test_save_and_load_round_trip(tmp_path, shakespeare_tokenizer):
    tok = shakespeare_tokenizer
    path = tmp_path / "merges.txt"
    tok.save(path)
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + 256 and lines[1] == "{} {}".format(*tok.merges[0])
    loaded = BPETokenizer.load(path)
    assert loaded.merges == tok.merges and loaded.vocab == tok.vocab
    text = load_shakespeare()[:2000]
    assert loaded.encode(text) == tok.encode(text)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is not a merges file"),
        ("101 32\n", "is not a merges file"),
        ("course_lib bpe v1\n101 32 7\n", "line 2"),
        ("course_lib bpe v1\n101 x\n", "line 2"),
        ("course_lib bpe v1\n101 32\n256 300\n", "outside [0, 257)"),
    ],
)
def test_load_rejects_a_bad_file(tmp_path, content, message):
    path = tmp_path / "bad.txt"
    path.write_text(content)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(")", r"\)")):
        BPETokenizer.load(path)


# ---- errors that say what to fix ---------------------------------------------------------------


@pytest.mark.parametrize("vocab_size", [100, 255, -1, 300.0, True, "512"])
def test_train_rejects_a_vocab_size_below_256(vocab_size):
    with pytest.raises(ValueError, match=r"vocab_size must be an int of at least 256.*got"):
        BPETokenizer.train("some text", vocab_size)


def test_text_must_be_a_str(shakespeare_tokenizer):
    with pytest.raises(TypeError, match="text must be a str, got bytes.*encode_bytes"):
        shakespeare_tokenizer.encode(b"abc")
    with pytest.raises(TypeError, match="text must be a str, got list"):
        BPETokenizer.train(["abc"], 300)
    with pytest.raises(TypeError, match="data must be bytes, got str"):
        shakespeare_tokenizer.encode_bytes("abc")
    with pytest.raises(ValueError, match="lone surrogate"):
        shakespeare_tokenizer.encode("ab\udc80")


def test_decode_rejects_unknown_ids(shakespeare_tokenizer):
    tok = shakespeare_tokenizer
    with pytest.raises(ValueError, match=r"id 512 is outside the vocabulary \[0, 512\)"):
        tok.decode([5, 512])
    with pytest.raises(ValueError, match=r"id -1 is outside"):
        tok.decode([-1])
    with pytest.raises(TypeError, match="ids must be ints, got 2.0"):
        tok.decode([1, 2.0])
    with pytest.raises(TypeError, match="ids must hold integers, got dtype float32"):
        tok.decode(torch.tensor([1.0]))
    with pytest.raises(ValueError, match=r"1-D tensor \(seq_len,\), got shape \(1, 2\)"):
        tok.decode(torch.tensor([[1, 2]]))


@pytest.mark.parametrize(
    ("merges", "message"),
    [
        ([(97, 98), (256, 300)], r"merges\[1\] = \(256, 300\) uses an id outside \[0, 257\)"),
        ([(97, 98), (97, 98)], r"the pair \(97, 98\) is merged twice"),
        ([(97,)], r"merges\[0\] must be a pair of two int ids"),
        ([(97, 1.5)], r"merges\[0\] must be a pair of two int ids"),
    ],
)
def test_merges_are_checked(merges, message):
    with pytest.raises(ValueError, match=message):
        BPETokenizer(merges)


def test_the_pattern_is_the_standard_library_one():
    assert isinstance(PRE_TOKENIZE_PATTERN, re.Pattern)  # no third-party `regex` needed


# ---- special tokens --------------------------------------------------------------------------

EOT = "<|endoftext|>"
WITH_SPECIALS = ("ab <|x|> abab" + EOT + "ab<|x|>ab " + EOT) * 5 + "<|x|" + EOT[:-1]


def test_special_tokens_are_never_merged():
    # "<|", "|>" and "ab" are frequent inside and beside the special tokens; the trainer cuts
    # the text at each special token first, exactly as the reference does
    tok = BPETokenizer.train(WITH_SPECIALS, 266, special_tokens=[EOT, "<|x|>"])
    assert tok.merges == reference_train(WITH_SPECIALS, 266, (EOT, "<|x|>"))
    assert tok.vocab_size == 266 and tok.special_tokens == {EOT: 264, "<|x|>": 265}
    assert tok.vocab[264:] == [EOT.encode(), b"<|x|>"]
    # no learned token reaches across the edge of a special token ("b<", ">a" never occur in
    # the text outside them): the trailing "<|x|" and "<|endoftext|" are ordinary text
    assert not any(b"b<" in t or b">a" in t for t in tok.vocab[256:264])


def test_special_tokens_are_encoded_whole_only_when_allowed():
    tok = BPETokenizer.train(WITH_SPECIALS, 266, special_tokens=[EOT, "<|x|>"])
    text = "ab<|x|>ab" + EOT
    ordinary = tok.encode(text)
    assert EOT.encode() not in [tok.vocab[i] for i in ordinary] and 264 not in ordinary
    assert ordinary == tok.encode(text, allowed_special=())
    only_eot = tok.encode(text, allowed_special=[EOT])
    assert only_eot[-1] == 264 and 265 not in only_eot
    both = tok.encode(text, allowed_special="all")
    assert both == tok.encode("ab") + [265] + tok.encode("ab") + [264]
    for ids in (ordinary, only_eot, both):
        assert tok.decode(ids) == text


def test_allowed_special_is_checked():
    tok = BPETokenizer([], special_tokens=[EOT])
    with pytest.raises(ValueError, match=r"allowed_special names '<\|x\|>', which is not"):
        tok.encode("a", allowed_special=["<|x|>"])
    with pytest.raises(ValueError, match=r"'all' or a collection.*write \['<\|endoftext\|>'\]"):
        tok.encode("a", allowed_special=EOT)
    with pytest.raises(ValueError, match=r"listed twice"):
        BPETokenizer([], special_tokens=[EOT, EOT])
    with pytest.raises(ValueError, match=r"vocab_size must be an int of at least 257"):
        BPETokenizer.train("abc", 256, special_tokens=[EOT])


def test_save_and_load_keep_special_tokens_and_byte_order(tmp_path):
    tok = BPETokenizer.train(WITH_SPECIALS, 266, special_tokens=[EOT, "<|x|>"])
    order = list(range(255, -1, -1))
    reordered = BPETokenizer([(200, 200), (256, 200)], [EOT], byte_order=order)
    assert reordered.vocab[:2] == [b"\xff", b"\xfe"] and reordered.vocab[256] == b"77"
    assert reordered.encode("777") == [257] and reordered.encode("7") == [200]
    for original in (tok, reordered):
        original.save(tmp_path / "merges.txt")
        loaded = BPETokenizer.load(tmp_path / "merges.txt")
        assert loaded.merges == original.merges and loaded.vocab == original.vocab
        assert loaded.special_tokens == original.special_tokens
        assert loaded.encode(WITH_SPECIALS, "all") == original.encode(WITH_SPECIALS, "all")
    with pytest.raises(ValueError, match="byte_order must list each byte value 0..255 once"):
        BPETokenizer([], byte_order=[0] * 256)
