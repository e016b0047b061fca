"""A class's grades for an LMS gradebook: Canvas's and Moodle's CSV import formats.

    python -m course_lib.grading.export grades/ --canvas canvas.csv --moodle moodle.csv
        [--roster gradebook_export.csv]

Reads `grades/learners.json` (written by `python -m course_lib.grading ... --out grades/`) and
writes one gradebook column per exercise set (its total), one row per learner.

- Canvas (Grades > Import): the columns of Canvas's own gradebook export, which its import
  reads back: `Student`, `ID`, `SIS User ID`, `SIS Login ID`, `Section`, then one column per
  assignment; the second row, `Points Possible`, gives each new assignment its maximum.
- Moodle (Grade administration > Import > CSV file): the columns of Moodle's plain-text grade
  export: `First name`, `Last name`, `ID number`, `Institution`, `Department`,
  `Email address`, then one column per grade item and, next to it, its feedback (here: why each
  task of the set lost points). On import, map "Email address" to useremail (or "ID number" to
  useridnumber) and each column to its grade item.

With `--roster`, a gradebook exported from the LMS, each learner is matched (case-insensitive)
to its row by login, SIS id, email, id number or name (Canvas's "Last, First" too), and the
identity columns are copied from it; a learner the roster lacks is listed on stderr and
exported with what is known. Without a roster, the learner's name from the grader (a folder per
learner, or a name field) is the login (Canvas) and the email address or ID number (Moodle: an
email when it contains "@"). A text cell that starts like a formula is written
`spreadsheet_safe` (a leading `'`). Both files are UTF-8 with a byte-order mark (`_write`).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
import unicodedata
from pathlib import Path

from .learners import spreadsheet_safe

CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_ROW = "Points Possible"
MOODLE_IDENTITY = [
    "First name",
    "Last name",
    "ID number",
    "Institution",
    "Department",
    "Email address",
]


def assignment_name(exercise: str) -> str:
    """The gradebook column of an exercise set: "Exercise 02"."""
    return f"Exercise {exercise.removeprefix('ex')}"


def read_roster(path: Path) -> list[dict[str, str]]:
    """The rows of a gradebook exported from Canvas or Moodle (a CSV with a header row), also
    once re-saved by a spreadsheet: in Windows' own encoding, or with `;` or tabs between the
    fields (Moodle's export offers both; Excel writes `;` where the decimal mark is a comma)."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:  # Excel's "CSV" on Windows, not its "CSV UTF-8"
        text = raw.decode("cp1252", errors="replace")
    header = text.split("\n", 1)[0]
    delimiter = max(",;\t", key=header.count)
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows = [{k.strip(): (v or "").strip() for k, v in row.items() if k} for row in reader]
    return [r for r in rows if "points possible" not in " ".join(r.values()).lower()]


def _key(name: str) -> str:
    """A name as it is compared: one Unicode form (a Mac writes "é" in folder names as "e" and
    an accent), one case, single spaces, and a Moodle download folder's suffix dropped
    ("Ada Lovelace_1001_assignsubmission_file_" is Ada Lovelace)."""
    name = re.sub(r"_\d+_assignsubmission_\w*$", "", unicodedata.normalize("NFC", name))
    return " ".join(name.split()).casefold()


def _match(learner: str, roster: list[dict[str, str]], fields: list[str]) -> dict[str, str] | None:
    key = _key(learner)
    for row in roster:
        names = [row.get(f, "") for f in fields]
        names.append(f"{row.get('First name', '')} {row.get('Last name', '')}")
        last, comma, first = row.get("Student", "").partition(",")  # Canvas: "Last, First"
        names.append(f"{first} {last}" if comma else "")
        if key in {_key(n) for n in names if n.strip()}:
            return row
    return None


def _identities(records, roster, fields, columns, unknown) -> tuple[list[list], list[str]]:
    """Each record's identity columns, from its row of the roster (matched by `fields`) or, for
    a learner the roster lacks or without a roster, `unknown(learner)`; and the learners the
    roster lacks."""
    identities, missing = [], []
    for r in records:
        found = _match(r["learner"], roster, fields) if roster else None
        if roster and found is None:
            missing.append(r["learner"])
        identities.append([found.get(c, "") for c in columns] if found else unknown(r["learner"]))
    return identities, missing


CANVAS_FIELDS = ["SIS Login ID", "SIS User ID", "ID", "Student"]  # what a learner matches
MOODLE_FIELDS = ["Email address", "ID number", "Username"]


def without_grades(records: list[dict], roster: list[dict[str, str]]) -> list[str]:
    """The students of the roster that no learner matched (who handed in nothing, or under a
    name the roster does not know), by name: their gradebook cells are left as they are."""
    matched = [_match(r["learner"], roster, CANVAS_FIELDS + MOODLE_FIELDS) for r in records]
    return [
        row.get("Student")
        or f"{row.get('First name', '')} {row.get('Last name', '')}".strip()
        or row.get("Email address", "?")
        for row in roster
        if not any(row is m for m in matched)
    ]


def canvas_rows(records: list[dict], roster: list[dict[str, str]] | None = None):
    """(header, rows, learners not in the roster) of Canvas's gradebook import CSV."""
    sets = list(records[0]["sets"]) if records else []
    header = [*CANVAS_IDENTITY, *(assignment_name(s) for s in sets)]
    fields = CANVAS_FIELDS
    identities, missing = _identities(
        records, roster, fields, CANVAS_IDENTITY, lambda name: [name, "", "", name, ""]
    )
    rows = [
        [*who, *(r["sets"][s]["score"] for s in sets)]
        for who, r in zip(identities, records, strict=True)
    ]
    if records:
        points = [records[0]["sets"][s]["max_score"] for s in sets]
        rows.insert(0, [CANVAS_POINTS_ROW, "", "", "", "", *points])
    return header, rows, missing


def _set_feedback(record: dict, exercise: str) -> str:
    lost = [
        f"{task}: {t['score']:g}/{t['max_score']:g}: {t['feedback']}"
        for task, t in record["tasks"].items()
        if task.startswith(exercise + ".") and t["score"] < t["max_score"]
    ]
    return " | ".join(" ".join(x.split()) for x in lost)


def moodle_rows(records: list[dict], roster: list[dict[str, str]] | None = None):
    """(header, rows, learners not in the roster) of Moodle's grade import CSV."""
    sets = list(records[0]["sets"]) if records else []
    header = list(MOODLE_IDENTITY)
    for s in sets:
        header += [assignment_name(s), f"{assignment_name(s)} (feedback)"]

    def unknown(name: str) -> list[str]:  # an email when it has "@", else the ID number
        return ["", "", "", "", "", name] if "@" in name else ["", "", name, "", "", ""]

    fields = MOODLE_FIELDS
    identities, missing = _identities(records, roster, fields, MOODLE_IDENTITY, unknown)
    rows = [
        [*who, *(x for s in sets for x in (r["sets"][s]["score"], _set_feedback(r, s)))]
        for who, r in zip(identities, records, strict=True)
    ]
    return header, rows, missing


def _write(path: Path, header: list, rows: list) -> None:
    """UTF-8 with a byte-order mark, as scores.csv: without one, Excel on Windows reads the file
    in the machine's code page ("José" shows as "JosÃ©", "中" as "ä¸­"), and a file re-saved
    from there reaches the LMS with those names. Both imports take the mark: Moodle's CSV
    reader removes it before reading the header, and Canvas's gradebook export writes one itself
    (a feature option of the user's), which its import reads back: it finds the header row by
    "Student" within the first cell."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8-sig") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows([spreadsheet_safe(x) for x in row] for row in rows)


def load(grades: Path) -> list[dict]:
    """The records of `grades`/learners.json (one per learner, as the grader wrote them)."""
    source = Path(grades) / "learners.json"
    if not source.exists():
        raise FileNotFoundError(
            f"no learners.json in {grades}: run `python -m course_lib.grading ... --out {grades}` "
            "first"
        )
    return json.loads(source.read_text())


def write(
    records: list[dict],
    canvas: Path | None = None,
    moodle: Path | None = None,
    people: list[dict[str, str]] | None = None,
) -> list[str]:
    """Write the requested gradebook files from `records`, matched to the roster's rows
    `people`; return the learners the roster lacks (empty without a roster)."""
    missing: list[str] = []
    for path, make in ((canvas, canvas_rows), (moodle, moodle_rows)):
        if path is not None:
            header, rows, lacking = make(records, people)
            _write(Path(path), header, rows)
            missing += [m for m in lacking if m not in missing]
    return missing


def export(
    grades: Path,
    canvas: Path | None = None,
    moodle: Path | None = None,
    roster: Path | None = None,
) -> list[str]:
    """Write the requested gradebook files from `grades`/learners.json; return the learners the
    roster lacks (empty without a roster)."""
    return write(load(grades), canvas, moodle, read_roster(roster) if roster else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.grading.export",
        description="Write a graded class's totals per exercise set as Canvas's or Moodle's "
        "gradebook import CSV.",
    )
    parser.add_argument("grades", type=Path, help="the grader's --out folder (has learners.json)")
    parser.add_argument("--canvas", type=Path, help="write Canvas's gradebook import CSV here")
    parser.add_argument("--moodle", type=Path, help="write Moodle's grade import CSV here")
    parser.add_argument(
        "--roster", type=Path, help="a gradebook exported from the LMS, to match learners to it"
    )
    args = parser.parse_args(argv)
    if args.canvas is None and args.moodle is None:
        parser.error("give --canvas FILE, --moodle FILE or both")
    try:  # each file is read once: what is written and what is said come from one reading
        records = load(args.grades)
        people = read_roster(args.roster) if args.roster is not None else None
        missing = write(records, args.canvas, args.moodle, people)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name in missing:
        print(f"warning: {name} is not in the roster; exported under that name", file=sys.stderr)
    if people is not None:
        absent = without_grades(records, people)
        if absent:
            print(
                f"note: {len(absent)} of the roster's students matched no learner (they handed in "
                "nothing, or under a name the roster does not show); their gradebook cells are "
                f"left as they are: {'; '.join(absent)}",
                file=sys.stderr,
            )
    for path in (args.canvas, args.moodle):
        if path is not None:
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
