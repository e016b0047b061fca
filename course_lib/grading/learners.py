"""A class's result per learner: who wrote each notebook, and one row per learner.

A learner is named, in this order of precedence, by

1. a folder per learner: the first folder under the folder given to the grader
   (`submissions/ada/02_self_attention.ipynb` is Ada's). It comes first because the instructor
   (or the LMS's download) makes the folders, while a learner writes the name field;
2. a name field in the notebook: `metadata.course.learner`, or a code line `LEARNER = "name"`
   (read as text, never run), for notebooks collected in one folder;
3. otherwise the notebook itself (its submission name): one learner per notebook.

`by_learner` turns the per-submission rows of scores.json into one record per learner (names
that differ only in case or spacing, "Ada Lovelace" and "ada  lovelace", are one): a score
per task and a total per exercise set (a set the learner did not submit scores 0), the feedback
of every task, and notes that say why each task scored 0. When a learner handed in two notebooks
of one set, the better one counts and the notes say so.
"""

from __future__ import annotations

import ast
import csv
import json
import re
import unicodedata
from pathlib import Path
from typing import Any

_LEARNER_LINE = re.compile(r"^[ \t]*LEARNER[ \t]*=.*$", re.MULTILINE)
NOTE_CHARS = 160  # of each task's reason in the notes column


def name_field(path: Path) -> str | None:
    """The learner named inside the notebook (metadata or a `LEARNER = "..."` line), or None."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(nb, dict):
        return None
    metadata = nb.get("metadata")
    course = metadata.get("course", {}) if isinstance(metadata, dict) else {}
    if isinstance(course, dict) and isinstance(course.get("learner"), str) and course["learner"]:
        return course["learner"].strip() or None
    for cell in nb.get("cells", []) if isinstance(nb.get("cells"), list) else []:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            text = "".join(source) if isinstance(source, list) else str(source)
            for line in _LEARNER_LINE.findall(text):
                name = _string_of(line)
                if name:
                    return name
    return None


def _string_of(line: str) -> str | None:
    """The string a line `LEARNER = "..."` assigns, read as Python reads it (never run), so that
    a quote inside the name (`"Seán O'Brien"`) does not cut it short; None for anything else."""
    try:
        value = ast.parse(line.strip()).body[0].value
    except (SyntaxError, IndexError, AttributeError):
        return None
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value.strip() or None
    return None


def learner_of(given: Path, path: Path, submission: str) -> str:
    """Who wrote `path`, found under the file or folder `given` (see the module's docstring), in
    one Unicode form: a Mac writes "é" in a file name as "e" and an accent, Linux and Windows as
    one character, and both are the same learner."""
    name = None
    if given.is_dir():
        parts = path.relative_to(given).parts
        if len(parts) > 1:
            name = parts[0]
    return unicodedata.normalize("NFC", name or name_field(path) or submission)


def without_notebooks(
    given: list[Path], notebooks: list[Path], out_dir: Path | None = None
) -> dict[str, dict]:
    """A row for each learner's folder (a folder under a folder given) that holds none of the
    `notebooks`: a zip, a .py, nothing. Its learner still gets a record, which says what the
    folder holds, rather than vanishing from scores.csv. Neither the grader's `out_dir` nor a
    `mine/` folder (a learner's library, when one learner's folder is given) is a learner."""
    rows, holders = {}, {folder for nb in notebooks for folder in nb.parents}
    for folder in [f for g in given if g.is_dir() for f in sorted(g.iterdir()) if f.is_dir()]:
        if folder in holders or folder.name.startswith(".") or folder.name == "__MACOSX":
            continue
        if folder.name == "mine":  # a learner's library, beside the notebooks of a folder given
            continue
        if out_dir is not None and folder.resolve() == Path(out_dir).resolve():
            continue
        files = sorted(str(f.relative_to(folder)) for f in folder.rglob("*") if f.is_file())
        held = "it holds " + ", ".join(files[:5]) + (", ..." if len(files) > 5 else "")
        rows[unicodedata.normalize("NFC", folder.name)] = {
            "submission": str(folder),
            "score": 0.0,
            "max_score": 0.0,
            "error": f"no notebook (.ipynb) in this folder; {held if files else 'it is empty'} "
            "(unzip an archive into the folder and grade again)",
            "tasks": {},
        }
    return rows


def _exercise(task_id: str) -> str:
    return task_id.split(".")[0]


def _reason(feedback: str) -> str:
    """The first part of a task's feedback: why it scored 0, short enough for a spreadsheet."""
    text = " ".join(str(feedback).split())
    if text.startswith("not implemented yet"):
        return "not implemented yet"
    return text if len(text) <= NOTE_CHARS else text[: NOTE_CHARS - 1].rstrip() + "…"


def zero_task(max_score: float, feedback: str) -> dict:
    """A task's entry in a row when it earned nothing, with why."""
    return {"score": 0.0, "max_score": max_score, "feedback": feedback}


def best_row(rows: list[dict], exercise: str) -> tuple[list[dict], dict | None]:
    """(the rows graded on tasks of `exercise`, the better of them: the first on a tie)."""
    candidates = [r for r in rows if any(_exercise(t) == exercise for t in r["tasks"])]
    best = max(
        candidates,
        key=lambda r: sum(v["score"] for t, v in r["tasks"].items() if _exercise(t) == exercise),
        default=None,
    )
    return candidates, best


def same_learner(name: str) -> str:
    """A learner's name as names are compared: one case, single spaces."""
    return " ".join(name.split()).casefold()


def add_notes(records: list[dict], notes: dict[str, list[str]]) -> None:
    """Append `notes` ({learner: [note, ...]}, names as `same_learner` compares them) to the
    records' notes."""
    for r in records:
        more = notes.get(same_learner(r["learner"]), [])
        r["notes"] = " | ".join(filter(None, [r["notes"], *more]))


def by_learner(rows: list[dict], learners: list[str]) -> list[dict]:
    """One record per learner, in the order learners first appear (`learners[i]` wrote rows[i]).

    A record: {"learner", "score", "max_score", "sets": {set: {"score", "max_score",
    "submission"}}, "tasks": {task id: {"score", "max_score", "feedback", "submission"}},
    "notes"}.
    """
    if len(rows) != len(learners):
        raise ValueError(
            f"rows and learners must have one entry each, got {len(rows)} and {len(learners)}"
        )
    task_max: dict[str, float] = {}  # every task any submission was graded on, in order
    for row in rows:
        for task_id, t in row["tasks"].items():
            task_max.setdefault(task_id, t["max_score"])
    sets = sorted({_exercise(t) for t in task_max})
    mine: dict[str, list[dict]] = {}
    spellings: dict[str, list[str]] = {}  # names that differ only in case or spaces: one learner
    for row, learner in zip(rows, learners, strict=True):
        key = same_learner(learner)
        mine.setdefault(key, []).append(row)
        if learner not in spellings.setdefault(key, []):
            spellings[key].append(learner)
    return [_record(spellings[key], own, sets, task_max) for key, own in mine.items()]


def _record(names: list[str], rows: list[dict], sets: list[str], task_max: dict) -> dict:
    learner = names[0]
    notes = [f"also named {', '.join(repr(n) for n in names[1:])}"] if len(names) > 1 else []
    notes += [
        f"{r['submission']}: {_reason(r['error'])}"
        for r in rows
        if not r["tasks"] and r.get("error")
    ]
    record: dict[str, Any] = {"learner": learner, "score": 0.0, "max_score": 0.0, "sets": {}}
    tasks: dict[str, dict] = {}
    for exercise in sets:
        ids = [t for t in task_max if _exercise(t) == exercise]
        candidates, row = best_row(rows, exercise)
        if row is None:
            for t in ids:
                lost = zero_task(task_max[t], f"no notebook of {exercise} was submitted")
                tasks[t] = {**lost, "submission": None}
            notes.append(f"{exercise}: no notebook of this set was submitted")
        else:
            if len(candidates) > 1:
                names = ", ".join(r["submission"] for r in candidates)
                notes.append(
                    f"{exercise}: {len(candidates)} notebooks ({names}); the better one, "
                    f"{row['submission']}, counts"
                )
            for t in ids:
                task = row["tasks"].get(t) or zero_task(
                    task_max[t], "not graded: the notebook has no such task"
                )
                tasks[t] = {**task, "submission": row["submission"]}
                if task["score"] == 0:
                    notes.append(f"{t}: {_reason(task['feedback'])}")
            if row.get("error") and any(tasks[t]["score"] == 0 for t in ids):
                notes.append(f"{row['submission']}: {_reason(row['error'])}")
        record["sets"][exercise] = {
            "score": round(sum(tasks[t]["score"] for t in ids), 4),
            "max_score": sum(task_max[t] for t in ids),
            "submission": row and row["submission"],
        }
    record["score"] = round(sum(s["score"] for s in record["sets"].values()), 4)
    record["max_score"] = round(sum(s["max_score"] for s in record["sets"].values()), 4)
    return {**record, "tasks": tasks, "notes": " | ".join(notes)}


def csv_header(records: list[dict]) -> list[str]:
    """learner, score, max_score, then per set its total and its tasks, then notes."""
    columns = ["learner", "score", "max_score"]
    if records:
        for exercise in records[0]["sets"]:
            columns.append(exercise)
            columns += [t for t in records[0]["tasks"] if _exercise(t) == exercise]
    return [*columns, "notes"]


def spreadsheet_safe(value: Any) -> Any:
    """A text cell a spreadsheet shows as text: one that starts like a formula (`=`, `+`, `-`,
    `@`, a tab or a carriage return: a learner's name can) gets a leading `'`, so that Excel or
    LibreOffice never runs it. Numbers are left as they are."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def write(records: list[dict], out_dir: Path) -> None:
    """learners.json (everything, feedback included) and scores.csv (one row per learner).

    scores.csv is UTF-8 with a byte-order mark, which Excel needs to read accented names right,
    and its text cells are `spreadsheet_safe`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "learners.json").write_text(json.dumps(records, indent=2) + "\n")
    header = csv_header(records)
    with open(out_dir / "scores.csv", "w", newline="", encoding="utf-8-sig") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for r in records:
            scores = {k: v["score"] for part in ("sets", "tasks") for k, v in r[part].items()}
            writer.writerow([spreadsheet_safe(scores[c] if c in scores else r[c]) for c in header])
