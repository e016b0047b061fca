"""The course's data sets, generated in code or shipped in the package: nothing downloads.

Lesson 08: synthetic sequence-to-sequence tasks. The real task: human-written dates -> ISO 8601.

    "Wednesday, 3 March 2021"   "March 3rd, 2021"   "3 Mar 2021"     -> "2021-03-03"
    "the 3rd of March 2021"     "Mar 3, 2021"       "03-Mar-2021"

Every style names the month in words, so no input is ambiguous (03/04/2021 means March in one
country and April in another; it is not used). `date_splits` cuts the calendar into train,
validation and test dates that never overlap, so the test measures dates the model has never
seen in any style.

The warm-up task: reverse (or copy) a string of digits, "40213" -> "31204". It needs no
knowledge at all, only attention to the right position, so it checks the mechanics first.

Everything is seeded: the same seed gives the same splits and the same batches on every machine.

Lesson 09: the Shakespeare corpus, and batches of random windows of a long text.

    load_shakespeare()     about 1.1 million characters of nine plays (dialogue only), shipped
                           compressed in course_lib/data (see SHAKESPEARE_PROVENANCE.md)
    train_val_split(ids)   the first 90 % for training, the last 10 % for validation (by
                           position, so no validation sentence leaks into training)
    random_windows(...)    a batch of windows at random positions: inputs x and targets y,
                           y = x shifted left by one (the next character at every position)

Nothing downloads: the corpus is read from the package with importlib.resources.
"""

from __future__ import annotations

import datetime
import gzip
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch
from torch import Tensor

from .text import CharTokenizer
from .validation import check_date, check_positive_int, check_tensor

__all__ = [
    "MONTHS",
    "WEEKDAYS",
    "DATE_STYLES",
    "ordinal",
    "format_date",
    "iso_date",
    "DateSplits",
    "date_splits",
    "date_pairs",
    "date_tokenizer",
    "encode_pairs",
    "date_batches",
    "reversal_pairs",
    "reversal_batches",
    "load_shakespeare",
    "load_shakespeare_checkpoint",
    "CHECKPOINT_PATH",
    "train_val_split",
    "random_windows",
    "window_batches",
]

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

# name -> how to write a date; `m` is the month's name, `w` the weekday's.
DATE_STYLES = {
    "weekday": lambda d, m, w: f"{w}, {d.day} {m} {d.year}",  # Wednesday, 3 March 2021
    "us_ordinal": lambda d, m, w: f"{m} {ordinal(d.day)}, {d.year}",  # March 3rd, 2021
    "short": lambda d, m, w: f"{d.day} {m[:3]} {d.year}",  # 3 Mar 2021
    "spoken": lambda d, m, w: f"the {ordinal(d.day)} of {m} {d.year}",  # the 3rd of March 2021
    "us_short": lambda d, m, w: f"{m[:3]} {d.day}, {d.year}",  # Mar 3, 2021
    "dashed": lambda d, m, w: f"{d.day:02d}-{m[:3]}-{d.year}",  # 03-Mar-2021
}

FIRST_YEAR, LAST_YEAR = 1700, 2299


def ordinal(day: int) -> str:
    """1 -> '1st', 2 -> '2nd', 3 -> '3rd', 11 -> '11th', 22 -> '22nd'."""
    check_positive_int(day, "day")
    if 11 <= day % 100 <= 13:
        return f"{day}th"
    return f"{day}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th') }"


def format_date(date: datetime.date, style: str) -> str:
    """The date written in one of `DATE_STYLES`, e.g. format_date(date(2021, 3, 3), 'spoken')
    -> 'the 3rd of March 2021'."""
    check_date(date)
    if style not in DATE_STYLES:
        raise ValueError(f"style must be one of {', '.join(DATE_STYLES)}, got {style!r}")
    return DATE_STYLES[style](date, MONTHS[date.month - 1], WEEKDAYS[date.weekday()])


def iso_date(date: datetime.date) -> str:
    """ISO 8601, YYYY-MM-DD: the target of the translation."""
    return check_date(date).isoformat()


@dataclass(frozen=True)
class DateSplits:
    """Three disjoint lists of dates: no date of `test` is in `train` or `validation`."""

    train: list[datetime.date]
    validation: list[datetime.date]
    test: list[datetime.date]


def date_splits(
    seed: int = 0,
    num_validation: int = 1000,
    num_test: int = 1000,
    first_year: int = FIRST_YEAR,
    last_year: int = LAST_YEAR,
) -> DateSplits:
    """Every date from 1 January `first_year` to 31 December `last_year`, shuffled with `seed`
    and cut into validation, test and train (the rest). The splits never share a date."""
    check_positive_int(num_validation, "num_validation")
    check_positive_int(num_test, "num_test")
    check_positive_int(first_year, "first_year")
    check_positive_int(last_year, "last_year")
    if last_year < first_year or last_year > 9999:
        raise ValueError(f"need first_year <= last_year <= 9999, got {first_year}..{last_year}")
    start = datetime.date(first_year, 1, 1)
    count = (datetime.date(last_year, 12, 31) - start).days + 1
    if num_validation + num_test >= count:
        raise ValueError(
            f"{first_year}..{last_year} has only {count} dates, fewer than "
            f"num_validation + num_test + 1 = {num_validation + num_test + 1}"
        )
    dates = [start + datetime.timedelta(days=i) for i in range(count)]
    random.Random(seed).shuffle(dates)
    validation = dates[:num_validation]
    test = dates[num_validation : num_validation + num_test]
    return DateSplits(train=dates[num_validation + num_test :], validation=validation, test=test)


def date_pairs(
    dates: Sequence[datetime.date], seed: int = 0, styles: Sequence[str] | None = None
) -> list[tuple[str, str]]:
    """One (human-written, ISO) pair per date, each in a style drawn with `seed`."""
    styles = list(DATE_STYLES) if styles is None else list(styles)
    for style in styles:
        if style not in DATE_STYLES:
            raise ValueError(f"unknown style {style!r}; styles are {', '.join(DATE_STYLES)}")
    if not styles:
        raise ValueError("styles is empty; give at least one of " + ", ".join(DATE_STYLES))
    rng = random.Random(seed)
    return [(format_date(d, rng.choice(styles)), iso_date(d)) for d in dates]


def date_tokenizer() -> CharTokenizer:
    """One character tokenizer for both sides and both tasks: <pad>=0, <bos>=1, <eos>=2, then
    the characters of every style, digits and '-' (the same ids on every machine)."""
    text = " ".join(MONTHS + WEEKDAYS) + " the of st nd rd th 0123456789 ,-"
    return CharTokenizer.from_text(text)


def encode_pairs(
    pairs: Sequence[tuple[str, str]], tokenizer: CharTokenizer
) -> tuple[Tensor, Tensor]:
    """Pairs -> (src (batch, n_src), tgt (batch, n_tgt)) long, padded with pad_id.

    The source is the characters alone; the target ends with <eos> (the decoder must learn to
    stop). The decoder's input, <bos> + target[:-1], is made by `train.shift_right`.
    """
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise TypeError(
            f"pairs must be a list of (source, target) pairs of strings, got {type(pairs).__name__}"
        )
    if not pairs:
        raise ValueError("pairs is empty; give at least one (source, target) pair")
    for i, pair in enumerate(pairs):
        if (
            not isinstance(pair, (tuple, list))
            or len(pair) != 2
            or not all(isinstance(text, str) for text in pair)
        ):
            one = (
                isinstance(pairs, tuple)
                and len(pairs) == 2
                and all(isinstance(t, str) for t in pairs)
            )
            one = " (pairs looks like one pair: write [(source, target)])" if one else ""
            raise TypeError(
                f"pairs[{i}] must be a (source, target) pair of two strings, got {pair!r}{one}"
            )
    sources, targets = zip(*pairs, strict=True)
    src, _ = tokenizer.encode_batch(list(sources))
    tgt, _ = tokenizer.encode_batch(list(targets), add_eos=True)
    return src, tgt


def date_batches(
    dates: Sequence[datetime.date],
    tokenizer: CharTokenizer,
    batch_size: int,
    seed: int = 0,
    styles: Sequence[str] | None = None,
    bucket: int = 1,
) -> Iterator[tuple[Tensor, Tensor]]:
    """Endless (src, tgt) batches: `batch_size` dates drawn from `dates`, each in a random style.

    A date may come back in another style later; only the dates of other splits never appear.
    With `bucket` > 1, `bucket` batches' worth of pairs are drawn at once, sorted by source
    length and cut into batches of similar lengths (yielded in random order): less padding,
    so less wasted computation on the pads.
    """
    check_positive_int(batch_size, "batch_size")
    check_positive_int(bucket, "bucket")
    if not dates:
        raise ValueError("dates is empty")
    rng = random.Random(seed)
    while True:
        chosen = [dates[rng.randrange(len(dates))] for _ in range(batch_size * bucket)]
        pairs = date_pairs(chosen, seed=rng.randrange(2**31), styles=styles)
        if bucket > 1:
            pairs.sort(key=lambda pair: len(pair[0]))
        groups = [pairs[i : i + batch_size] for i in range(0, len(pairs), batch_size)]
        rng.shuffle(groups)
        for group in groups:
            yield encode_pairs(group, tokenizer)


def reversal_pairs(
    count: int, length: int = 10, seed: int = 0, reverse: bool = True
) -> list[tuple[str, str]]:
    """`count` random digit strings of `length` and their reversal (or copy, reverse=False)."""
    check_positive_int(count, "count")
    check_positive_int(length, "length")
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        digits = "".join(rng.choice("0123456789") for _ in range(length))
        pairs.append((digits, digits[::-1] if reverse else digits))
    return pairs


def reversal_batches(
    tokenizer: CharTokenizer, batch_size: int, length: int = 10, seed: int = 0, reverse: bool = True
) -> Iterator[tuple[Tensor, Tensor]]:
    """Endless (src, tgt) batches of the warm-up task."""
    check_positive_int(batch_size, "batch_size")
    rng = random.Random(seed)
    while True:
        pairs = reversal_pairs(batch_size, length, seed=rng.randrange(2**31), reverse=reverse)
        yield encode_pairs(pairs, tokenizer)


# --------------------------------------------------------------------------------------------
# Lesson 09: the Shakespeare corpus and windows of a long text
# --------------------------------------------------------------------------------------------

_CORPUS = "shakespeare.txt.gz"


def load_shakespeare() -> str:
    """The lesson's corpus as one string (about 1.1 MB, 72 distinct characters)."""
    data = (resources.files("course_lib") / "data" / _CORPUS).read_bytes()
    return gzip.decompress(data).decode("utf-8")


CHECKPOINT_PATH = Path(__file__).resolve().parent / "data" / "gpt_shakespeare.pt"


def load_shakespeare_checkpoint(path: str | Path | None = None) -> dict:
    """Lesson 09's longer-trained GPT as data: {"config", "state_dict", "vocabulary",
    "provenance"}. The weights have course_lib.gpt.GPT's names; any model with those names
    loads them (exercise 09's capstone does). `course_lib.gpt.load_shakespeare_gpt` builds
    course_lib's GPT from it."""
    path = CHECKPOINT_PATH if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint at {path}; the course ships it in course_lib/data "
            "(python tools/train_checkpoint.py writes it again)"
        )
    return torch.load(path, map_location="cpu", weights_only=True)


def train_val_split(ids: Tensor, val_fraction: float = 0.1) -> tuple[Tensor, Tensor]:
    """ids (n,) -> (train (n - n_val,), val (n_val,)) with n_val = round(n * val_fraction).

    The split is by position: validation is the END of the text, never a random sample of
    windows that would overlap the training text.
    """
    check_tensor(ids, "ids", ndim=1, shape_hint="(n,)")
    if (
        not isinstance(val_fraction, float)  # a bool or an int is refused
        or not 0.0 < val_fraction < 1.0
    ):
        raise ValueError(f"val_fraction must be a float in (0, 1), got {val_fraction!r}")
    n_val = round(len(ids) * val_fraction)
    if n_val < 2 or len(ids) - n_val < 2:
        raise ValueError(
            f"ids has {len(ids)} tokens: too few to split into two parts with at "
            "least two tokens each"
        )
    return ids[: len(ids) - n_val], ids[len(ids) - n_val :]


def random_windows(
    ids: Tensor, block_size: int, batch_size: int, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """ids (n,) -> (x, y), both long (batch_size, block_size), from random start positions.

    y[b, i] = ids[start_b + i + 1] is the character that follows x[b, i] = ids[start_b + i]:
    one window gives block_size predictions, each with its own amount of context.
    """
    check_tensor(ids, "ids", ndim=1, shape_hint="(n,)", dtype=(torch.int64, torch.int32))
    check_positive_int(block_size, "block_size")
    check_positive_int(batch_size, "batch_size")
    if len(ids) < block_size + 1:
        raise ValueError(
            f"ids has {len(ids)} tokens, fewer than block_size + 1 = "
            f"{block_size + 1}: no window fits"
        )
    # Draw on the generator's own device (a CUDA generator cannot draw CPU numbers, nor the
    # reverse), then move the start positions to where the text is.
    draw_on = generator.device if generator is not None else torch.device("cpu")
    starts = torch.randint(
        len(ids) - block_size, (batch_size,), generator=generator, device=draw_on
    ).to(ids.device)  # (batch,)
    offsets = torch.arange(block_size + 1, device=ids.device)  # (block_size + 1,)
    windows = ids[starts[:, None] + offsets].long()  # (batch, block_size + 1)
    return windows[:, :-1], windows[:, 1:]  # x, y: (batch, block_size)


def window_batches(
    ids: Tensor, block_size: int, batch_size: int, generator: torch.Generator | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """An endless stream of `random_windows` batches (for `course_lib.train.train`)."""
    check_tensor(ids, "ids", ndim=1, shape_hint="(n,)", dtype=(torch.int64, torch.int32))
    check_positive_int(block_size, "block_size")
    check_positive_int(batch_size, "batch_size")

    def stream() -> Iterator[tuple[Tensor, Tensor]]:
        while True:
            yield random_windows(ids, block_size, batch_size, generator)

    return stream()
