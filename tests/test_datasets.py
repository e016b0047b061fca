"""course_lib.datasets: the date task and the warm-up task are seeded, disjoint and unambiguous."""

import datetime
import re

import pytest
import torch

from course_lib.datasets import (
    DATE_STYLES,
    date_batches,
    date_pairs,
    date_splits,
    date_tokenizer,
    encode_pairs,
    format_date,
    iso_date,
    ordinal,
    reversal_batches,
    reversal_pairs,
)

DAY = datetime.date(2021, 3, 3)


def test_every_style_of_one_date():
    written = {style: format_date(DAY, style) for style in DATE_STYLES}
    assert written == {
        "weekday": "Wednesday, 3 March 2021",
        "us_ordinal": "March 3rd, 2021",
        "short": "3 Mar 2021",
        "spoken": "the 3rd of March 2021",
        "us_short": "Mar 3, 2021",
        "dashed": "03-Mar-2021",
    }
    assert iso_date(DAY) == "2021-03-03"


def test_no_style_writes_the_month_as_a_number():
    """03/04/2021 is ambiguous across countries; every style names the month in words."""
    for style in DATE_STYLES:
        text = format_date(datetime.date(1999, 4, 5), style)
        assert re.search("Apr", text), text
        assert "/" not in text and "04" not in text


@pytest.mark.parametrize(
    "day,expected",
    [
        (1, "1st"),
        (2, "2nd"),
        (3, "3rd"),
        (4, "4th"),
        (11, "11th"),
        (12, "12th"),
        (13, "13th"),
        (21, "21st"),
        (22, "22nd"),
        (23, "23rd"),
        (31, "31st"),
    ],
)
def test_ordinal(day, expected):
    assert ordinal(day) == expected


def test_splits_are_disjoint_cover_the_calendar_and_are_seeded():
    splits = date_splits(seed=0)
    train, val, test = set(splits.train), set(splits.validation), set(splits.test)
    assert len(val) == len(test) == 1000
    assert not (train & val) and not (train & test) and not (val & test)
    total = (datetime.date(2299, 12, 31) - datetime.date(1700, 1, 1)).days + 1
    assert len(train) + len(val) + len(test) == total
    assert min(d.year for d in splits.test) < 1800 and max(d.year for d in splits.test) > 2200
    assert date_splits(seed=0).test == splits.test
    assert date_splits(seed=1).test != splits.test


def test_splits_reject_bad_arguments():
    with pytest.raises(ValueError, match="num_test"):
        date_splits(num_test=0)
    with pytest.raises(ValueError, match="first_year"):
        date_splits(first_year=2000, last_year=1999)
    with pytest.raises(ValueError, match="only"):
        date_splits(first_year=2000, last_year=2000, num_validation=200, num_test=200)


def test_format_date_rejects_bad_input():
    with pytest.raises(ValueError, match="style"):
        format_date(DAY, "us_slash")
    with pytest.raises(TypeError, match="date"):
        format_date("2021-03-03", "short")


def test_date_pairs_are_seeded_and_use_every_style():
    dates = date_splits().test[:300]
    pairs = date_pairs(dates, seed=3)
    assert pairs == date_pairs(dates, seed=3)
    assert [target for _, target in pairs] == [d.isoformat() for d in dates]
    styles_seen = {
        style
        for (source, _), d in zip(pairs, dates, strict=True)
        for style in DATE_STYLES
        if format_date(d, style) == source
    }
    assert styles_seen == set(DATE_STYLES)
    with pytest.raises(ValueError, match="style"):
        date_pairs(dates, styles=["nope"])


def test_tokenizer_covers_both_sides_and_round_trips():
    tok = date_tokenizer()
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    for d in date_splits().test[:200]:
        for style in DATE_STYLES:
            text = format_date(d, style)
            assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode("2021-03-03")) == "2021-03-03"


def test_encode_pairs_pads_and_ends_targets_with_eos():
    tok = date_tokenizer()
    src, tgt = encode_pairs([("3 Mar 2021", "2021-03-03"), ("Mar 3, 2021", "2021-03-03")], tok)
    assert src.shape == (2, 11) and src[0, -1] == tok.pad_id and src.dtype == torch.long
    assert tgt.shape == (2, 11) and (tgt[:, -1] == tok.eos_id).all()
    with pytest.raises(ValueError, match="pairs"):
        encode_pairs([], tok)


@pytest.mark.parametrize(
    "pairs, words",
    [
        ("3 Mar 2021", "pairs must be a list of .* got str"),
        (("3 Mar 2021", "2021-03-03"), r"pairs looks like one pair: write \[\(source, target\)\]"),
        (["ab", "cd"], r"pairs\[0\] must be a \(source, target\) pair of two strings, got 'ab'"),
        ([("a", "b"), ("a", "b", "c")], r"pairs\[1\] must be .* got \('a', 'b', 'c'\)"),
        ([(b"12", b"2")], r"pairs\[0\] must be .* two strings"),
    ],
)
def test_encode_pairs_names_what_is_not_a_list_of_pairs(pairs, words):
    # before: "not enough values to unpack (expected 2, got 1)" for a str, and ["ab", "cd"]
    # silently became the pairs ("a", "b") and ("c", "d")
    with pytest.raises(TypeError, match=words):
        encode_pairs(pairs, date_tokenizer())


def test_date_batches_draw_only_from_the_given_dates_and_are_seeded():
    tok = date_tokenizer()
    splits = date_splits()
    allowed = {d.isoformat() for d in splits.train[:50]}
    a = date_batches(splits.train[:50], tok, 8, seed=1)
    b = date_batches(splits.train[:50], tok, 8, seed=1)
    for _ in range(5):
        (src_a, tgt_a), (src_b, tgt_b) = next(a), next(b)
        assert torch.equal(src_a, src_b) and torch.equal(tgt_a, tgt_b)
        assert src_a.shape[0] == 8
        for row in tgt_a:
            assert tok.decode(row) in allowed
    with pytest.raises(ValueError, match="batch_size"):
        next(date_batches(splits.train, tok, 0))


def test_reversal_task():
    pairs = reversal_pairs(5, length=6, seed=0)
    assert all(target == source[::-1] and len(source) == 6 for source, target in pairs)
    assert all(s == t for s, t in reversal_pairs(3, reverse=False))
    src, tgt = next(reversal_batches(date_tokenizer(), 4, length=10))
    assert src.shape == (4, 10) and tgt.shape == (4, 11)
    with pytest.raises(ValueError, match="length"):
        reversal_pairs(3, length=0)


def test_bucketed_batches_have_less_padding_and_the_same_kind_of_data():
    tok = date_tokenizer()
    dates = date_splits().train
    plain = date_batches(dates, tok, 32, seed=0)
    bucketed = date_batches(dates, tok, 32, seed=0, bucket=8)
    pads_plain = sum(int((next(plain)[0] == tok.pad_id).sum()) for _ in range(16))
    pads_bucketed = sum(int((next(bucketed)[0] == tok.pad_id).sum()) for _ in range(16))
    assert pads_bucketed < 0.5 * pads_plain
    src, tgt = next(date_batches(dates, tok, 32, seed=3, bucket=4))
    assert src.shape[0] == 32 and tgt.shape == (32, 11)
    with pytest.raises(ValueError, match="bucket"):
        next(date_batches(dates, tok, 32, bucket=0))
