"""A class's results: one row per learner, a resumable batch, Canvas's and Moodle's gradebooks."""

from __future__ import annotations

import csv
import gc
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unicodedata
import warnings

import nbformat
import pytest
from helpers import ROOT

from course_lib.grading import export, learners


def _row(submission, scores, error=None):
    """A scores.json row: {task id: score} with every task worth 1."""
    tasks = {
        t: {
            "score": s,
            "max_score": 1.0,
            "feedback": "passed all 4 checks." if s == 1 else f"{t} went wrong here",
        }
        for t, s in scores.items()
    }
    return {
        "submission": submission,
        "score": sum(scores.values()),
        "max_score": float(len(scores)),
        "error": error,
        "tasks": tasks,
    }


# ---------------------------------------------------------------- who wrote a notebook


def _notebook(path, metadata=None, first_cell="import torch"):
    nb = nbformat.v4.new_notebook()
    nb.metadata["course"] = {"exercise": "ex00", **(metadata or {})}
    nb.cells.append(nbformat.v4.new_code_cell(first_cell))
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_a_learner_is_named_by_a_folder_then_by_a_field_then_by_the_notebook(tmp_path):
    given = tmp_path / "class"
    in_folder = _notebook(given / "ada" / "week1" / "00_warmup.ipynb")
    # the folder, which the instructor made, wins over a name the learner wrote
    claims = _notebook(given / "ada" / "00_x.ipynb", {"learner": "grace@example.org"})
    named = _notebook(given / "00_w.ipynb", {"learner": "grace@example.org"})
    by_line = _notebook(given / "00_y.ipynb", first_cell='LEARNER = "Alan Turing"\nimport torch')
    loose = _notebook(given / "00_z.ipynb")
    assert learners.learner_of(given, in_folder, "s1") == "ada"
    assert learners.learner_of(given, claims, "s2") == "ada"
    assert learners.learner_of(given, named, "s2") == "grace@example.org"
    assert learners.learner_of(named, named, "s2") == "grace@example.org"  # a file given
    assert learners.learner_of(given, by_line, "s3") == "Alan Turing"
    assert learners.learner_of(given, loose, "class/00_z.ipynb") == "class/00_z.ipynb"
    assert learners.learner_of(loose, loose, "00_z.ipynb") == "00_z.ipynb"  # a file given
    (tmp_path / "broken.ipynb").write_text("{not json")
    assert learners.name_field(tmp_path / "broken.ipynb") is None
    # a Mac names the folder "José" with "e" and an accent; it is the same learner as "José"
    mac = _notebook(given / unicodedata.normalize("NFD", "José") / "00_warmup.ipynb")
    assert learners.learner_of(given, mac, "s4") == unicodedata.normalize("NFC", "José")
    # a quote inside the name is read as Python reads the line: two learners O'... are two
    for i, (line, name) in enumerate(
        [
            ('LEARNER = "Seán O\'Brien"  # me', "Seán O'Brien"),
            ('LEARNER = "Seán O\'Neil"', "Seán O'Neil"),
            ("LEARNER = 'Ana \"Nani\" Lee'", 'Ana "Nani" Lee'),
            ('LEARNER = "Smith, John"', "Smith, John"),
            ("LEARNER = name", None),
        ]
    ):
        quoted = _notebook(given / f"00_q{i}.ipynb", first_cell=f"{line}\nimport torch")
        assert learners.name_field(quoted) == name, line


def test_a_learner_folder_without_a_notebook_still_gets_a_row_and_mac_copies_are_skipped(
    tmp_path,
):
    from course_lib.grading.batch import collect

    given = tmp_path / "class"
    ada = _notebook(given / "ada" / "00_warmup.ipynb")
    (given / "zipper").mkdir()
    (given / "zipper" / "homework.zip").write_bytes(b"PK\x03\x04")
    (given / "nothing").mkdir()
    for junk in ("ada/._00_warmup.ipynb", "__MACOSX/ada/._00_warmup.ipynb", ".hidden/0.ipynb"):
        (given / junk).parent.mkdir(parents=True, exist_ok=True)
        (given / junk).write_bytes(b"\x00\x05\x16\x07")  # a Mac's AppleDouble copy
    assert collect([given]) == [(str(ada), ada)]
    bea = _notebook(given / "bea" / "00_WARMUP.IPYNB")  # saved so on Windows
    (given / "bea" / "notes.IPYNB").mkdir()  # a folder, not a notebook
    assert collect([given]) == [(str(ada), ada), (str(bea), bea)]
    shutil.rmtree(given / "bea")
    (given / "grades").mkdir()  # the grader's --out folder, put among the learners
    (given / "grades" / "scores.json").write_text("[]")
    empty = learners.without_notebooks([given, ada], [ada], given / "grades")
    assert list(empty) == ["nothing", "zipper"]
    (given / "ada" / "mine").mkdir()  # one learner's folder given: its library is no learner
    (given / "ada" / "mine" / "attention.py").write_text("")
    assert learners.without_notebooks([given / "ada"], [ada]) == {}
    records = learners.by_learner(
        [_row(str(ada), {"ex00.a": 1.0}), *empty.values()], ["ada", *empty]
    )
    assert [r["learner"] for r in records] == ["ada", "nothing", "zipper"]
    zipper = records[2]
    assert zipper["score"] == 0 and zipper["sets"]["ex00"]["max_score"] == 1.0
    assert zipper["notes"].startswith(
        f"{given / 'zipper'}: no notebook (.ipynb) in this folder; it holds homework.zip "
        "(unzip an archive into the folder and grade again) | ex00: no notebook"
    )
    assert "in this folder; it is empty" in records[1]["notes"]


def test_an_unreadable_notebook_named_for_a_set_counts_as_that_set_handed_in(tmp_path):
    from course_lib.grading import batch

    broken = tmp_path / "bad" / "00_warmup.ipynb"
    broken.parent.mkdir()
    broken.write_text("")  # an empty file, as a failed upload leaves
    limits = {"timeout": 60.0, "memory_mb": 1024, "max_output_kb": 64, "cell_timeout": None}
    row = batch.grade_one(broken, seed=1, pid_file=tmp_path / "pids", **limits)
    assert row["score"] == 0 and row["max_score"] == 3.0
    assert list(row["tasks"]) == [
        "ex00.batched_matmul",
        "ex00.pairwise_sq_distances",
        "ex00.last_token",
    ]
    assert row["error"].startswith("not a readable notebook: NotJSONError")
    assert all(
        t["feedback"] == "not graded: not a readable notebook (empty, cut short or not JSON)"
        for t in row["tasks"].values()
    )
    notes = learners.by_learner([{"submission": str(broken), **row}], ["bad"])[0]["notes"]
    assert "no notebook of this set was submitted" not in notes  # it was: it cannot be read


def test_one_record_per_learner_with_set_totals_and_notes_on_every_zero():
    rows = [
        _row("ada/00.ipynb", {"ex00.a": 1.0, "ex00.b": 0.0}),
        _row("ada/02.ipynb", {"ex02.c": 0.5}, error="code cell 3 raised NameError: x"),
        _row("bob/00.ipynb", {"ex00.a": 0.0, "ex00.b": 0.0}),
        _row("bob/00_again.ipynb", {"ex00.a": 1.0, "ex00.b": 1.0}),
        {
            "submission": "eve/x.ipynb",
            "score": 0.0,
            "max_score": 0.0,
            "tasks": {},
            "error": "not a readable notebook: JSONDecodeError",
        },
    ]
    records = learners.by_learner(rows, ["ada", "ada", "bob", "bob", "eve"])
    assert [r["learner"] for r in records] == ["ada", "bob", "eve"]
    ada, bob, eve = records
    assert ada["sets"] == {
        "ex00": {"score": 1.0, "max_score": 2.0, "submission": "ada/00.ipynb"},
        "ex02": {"score": 0.5, "max_score": 1.0, "submission": "ada/02.ipynb"},
    }
    assert (ada["score"], ada["max_score"]) == (1.5, 3.0)
    assert ada["notes"] == "ex00.b: ex00.b went wrong here"  # 0.5 is not 0; the error is not
    # two notebooks of a set: the better one counts, and the notes say so
    assert bob["sets"]["ex00"] == {
        "score": 2.0,
        "max_score": 2.0,
        "submission": "bob/00_again.ipynb",
    }
    assert "ex00: 2 notebooks (bob/00.ipynb, bob/00_again.ipynb); the better one" in bob["notes"]
    # a set not handed in scores 0 and says so
    assert bob["tasks"]["ex02.c"]["score"] == 0
    assert "ex02: no notebook of this set was submitted" in bob["notes"]
    assert eve["score"] == 0 and "eve/x.ipynb: not a readable notebook" in eve["notes"]
    assert all(set(r["tasks"]) == {"ex00.a", "ex00.b", "ex02.c"} for r in records)
    with pytest.raises(ValueError, match="one entry each, got 5 and 1"):
        learners.by_learner(rows, ["ada"])
    # a name field typed twice, once in lower case and with two spaces: one learner, noted
    (ada,) = learners.by_learner(rows[:2], ["Ada Lovelace", "ada  lovelace"])
    assert ada["learner"] == "Ada Lovelace" and ada["score"] == 1.5
    assert ada["notes"].startswith("also named 'ada  lovelace' | ex00.b:")


def test_scores_csv_has_a_row_per_learner_a_column_per_task_and_a_total_per_set(tmp_path):
    rows = [
        _row("ada/00.ipynb", {"ex00.a": 1.0, "ex00.b": 0.0}),
        _row("bob/02.ipynb", {"ex02.c": 1.0}),
    ]
    learners.write(learners.by_learner(rows, ["ada", "bob"]), tmp_path)
    with open(tmp_path / "scores.csv", newline="", encoding="utf-8-sig") as f:
        table = list(csv.reader(f))
    assert table[0] == [
        "learner",
        "score",
        "max_score",
        "ex00",
        "ex00.a",
        "ex00.b",
        "ex02",
        "ex02.c",
        "notes",
    ]
    assert table[1][:8] == ["ada", "1.0", "3.0", "1.0", "1.0", "0.0", "0.0", "0.0"]
    assert (
        table[1][8]
        == "ex00.b: ex00.b went wrong here | ex02: no notebook of this set was submitted"
    )
    # Excel reads it right (a byte-order mark for the accents), and runs nothing in it: a
    # learner named like a formula is shown as text
    rows.append(
        {**_row('=HYPERLINK("http://x")/00.ipynb', {}), "error": "not a readable notebook: x"}
    )
    names = ["ada", "bob", '=HYPERLINK("http://x")']
    learners.write(learners.by_learner(rows, names), tmp_path)
    assert (tmp_path / "scores.csv").read_bytes().startswith(b"\xef\xbb\xbflearner,")
    with open(tmp_path / "scores.csv", newline="", encoding="utf-8-sig") as f:
        evil = list(csv.reader(f))[3]
    assert evil[0] == '\'=HYPERLINK("http://x")' and evil[1] == "0.0"
    assert evil[-1].startswith('\'=HYPERLINK("http://x")/00.ipynb: not a readable notebook')
    feedback = json.loads((tmp_path / "learners.json").read_text())[1]["tasks"]["ex02.c"]
    assert feedback == {
        "score": 1.0,
        "max_score": 1.0,
        "feedback": "passed all 4 checks.",
        "submission": "bob/02.ipynb",
    }


# ---------------------------------------------------------------- Canvas and Moodle


def _records():
    rows = [
        _row("ada/00.ipynb", {"ex00.a": 1.0, "ex00.b": 0.0}),
        _row("grace/00.ipynb", {"ex00.a": 1.0, "ex00.b": 1.0}),
        _row("grace/02.ipynb", {"ex02.c": 0.25}),
    ]
    return learners.by_learner(rows, ["ada", "grace@example.org", "grace@example.org"])


def _read(path):
    with open(path, newline="", encoding="utf-8-sig") as f:
        return list(csv.reader(f))


def test_canvas_gradebook_import_has_canvas_columns_and_points_possible(tmp_path):
    learners.write(_records(), tmp_path)
    export.export(tmp_path, canvas=tmp_path / "canvas.csv")
    table = _read(tmp_path / "canvas.csv")
    # Canvas's gradebook export/import columns: the five identity columns, then assignments
    assert table[0] == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
        "Exercise 00",
        "Exercise 02",
    ]
    assert table[1] == ["Points Possible", "", "", "", "", "2.0", "1.0"]
    assert table[2] == ["ada", "", "", "ada", "", "1.0", "0.0"]
    assert table[3][-2:] == ["2.0", "0.25"]
    # a name that starts like a formula stays text when the file is opened in a spreadsheet
    evil = learners.by_learner([_row("x/00.ipynb", {"ex00.a": 1.0})], ["@SUM(1+1)"])
    learners.write(evil, tmp_path)
    export.export(tmp_path, canvas=tmp_path / "canvas.csv")
    assert _read(tmp_path / "canvas.csv")[2][:4] == ["'@SUM(1+1)", "", "", "'@SUM(1+1)"]


def test_moodle_grade_import_has_moodle_columns_and_feedback(tmp_path):
    learners.write(_records(), tmp_path)
    export.export(tmp_path, moodle=tmp_path / "moodle.csv")
    table = _read(tmp_path / "moodle.csv")
    # the user columns of Moodle's plain-text grade export, then a grade and a feedback column
    assert table[0] == [
        "First name", "Last name", "ID number", "Institution", "Department", "Email address",
        "Exercise 00", "Exercise 00 (feedback)", "Exercise 02", "Exercise 02 (feedback)",
    ]  # fmt: skip
    ada, grace = table[1], table[2]
    assert ada[2] == "ada" and ada[5] == "" and ada[6] == "1.0"
    assert ada[7] == "ex00.b: 0/1: ex00.b went wrong here"
    assert grace[2] == "" and grace[5] == "grace@example.org" and grace[8] == "0.25"


def test_gradebook_files_keep_accented_names_in_excel_and_import_in_both_lms(tmp_path):
    # without a byte-order mark, Excel on Windows reads a CSV in the machine's code page: the
    # instructor checking canvas.csv saw "JosÃ©", "Å‚" and "ä¸­", and a file re-saved from
    # there sent those names to the LMS. Both imports take the mark (export._write says how).
    names = ["José Álvarez", "Michał Łukasz", "李中"]
    rows = [_row(f"s{i}/00.ipynb", {"ex00.a": 1.0}) for i in range(3)]
    learners.write(learners.by_learner(rows, names), tmp_path)
    export.export(tmp_path, canvas=tmp_path / "c.csv", moodle=tmp_path / "m.csv")
    for name in ("c.csv", "m.csv"):
        raw = (tmp_path / name).read_bytes()
        assert raw.startswith(b"\xef\xbb\xbf") and raw.count(b"\xef\xbb\xbf") == 1, name
        assert "JosÃ©" in raw[3:].decode("cp1252", errors="replace")  # what the mark prevents
    # Moodle's reader strips the mark, then reads the header and the names
    moodle = list(csv.reader(io.StringIO((tmp_path / "m.csv").read_bytes()[3:].decode())))
    assert moodle[0][:6] == export.MOODLE_IDENTITY and [r[2] for r in moodle[1:]] == names
    # Canvas's importer finds its header by "Student" within the first cell, mark or not
    canvas = list(csv.reader(io.StringIO((tmp_path / "c.csv").read_text(encoding="utf-8"))))
    assert "Student" in canvas[0][0] and canvas[0][1] == "ID"
    assert [r[0] for r in canvas[2:]] == names
    assert _read(tmp_path / "c.csv")[0][0] == "Student"


def test_a_roster_from_the_lms_supplies_the_identity_columns(tmp_path):
    learners.write(_records(), tmp_path)
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section,Exercise 00\n"
        "    Points Possible,,,,,2\n"
        '"Lovelace, Ada",101,S-1,ADA,Section A,\n'
        '"Lin, Mei",102,S-2,mlin,Section A,\n'
    )
    missing = export.export(tmp_path, canvas=tmp_path / "canvas.csv", roster=roster)
    assert missing == ["grace@example.org"]
    assert _read(tmp_path / "canvas.csv")[2][:5] == [
        "Lovelace, Ada",
        "101",
        "S-1",
        "ADA",
        "Section A",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "course_lib.grading.export", str(tmp_path), "--canvas",
         str(tmp_path / "c.csv"), "--roster", str(roster)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0 and "grace@example.org is not in the roster" in proc.stderr
    # and the other way round: a student who handed in nothing is named, not passed over
    assert "note: 1 of the roster's students matched no learner" in proc.stderr
    assert proc.stderr.rstrip().endswith("their gradebook cells are left as they are: Lin, Mei")
    with pytest.raises(FileNotFoundError, match="no learners.json"):
        export.export(tmp_path / "nowhere", canvas=tmp_path / "x.csv")


def test_a_roster_matches_names_as_lms_and_file_systems_write_them(tmp_path):
    import unicodedata

    rows = [_row(f"s{i}/00.ipynb", {"ex00.a": 1.0}) for i in range(3)]
    names = [
        unicodedata.normalize("NFD", "José  Álvarez"),  # a Mac's folder name, a double space
        "seán o'brien",  # Canvas writes "Last, First"
        "Mei Lin_1008_assignsubmission_file_",  # a folder of Moodle's "download submissions"
    ]
    learners.write(learners.by_learner(rows, names), tmp_path)
    canvas = tmp_path / "canvas_roster.csv"
    canvas.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section\n"
        '"Álvarez, José",1,S1,jalvarez,A\n"O\'Brien, Seán",2,S2,sobrien,A\n'
    )
    assert export.export(tmp_path, canvas=tmp_path / "c.csv", roster=canvas) == [names[2]]
    assert [r[3] for r in _read(tmp_path / "c.csv")[2:]] == ["jalvarez", "sobrien", names[2]]
    moodle = tmp_path / "moodle_roster.csv"
    moodle.write_text(
        "First name,Last name,ID number,Institution,Department,Email address\n"
        "Mei,Lin,S3,Uni,CS,mei@uni.example\n"
    )
    assert export.export(tmp_path, moodle=tmp_path / "m.csv", roster=moodle) == names[:2]
    assert _read(tmp_path / "m.csv")[3][:6] == ["Mei", "Lin", "S3", "Uni", "CS", "mei@uni.example"]
    # the same roster once re-saved by Excel: Windows' encoding and `;` between the fields
    moodle.write_bytes(moodle.read_text().replace(",", ";").encode("cp1252"))
    assert export.export(tmp_path, moodle=tmp_path / "m.csv", roster=moodle) == names[:2]
    moodle.write_bytes(moodle.read_text(encoding="cp1252").replace(";", "\t").encode())
    assert export.read_roster(moodle)[0]["Email address"] == "mei@uni.example"
    canvas.write_bytes(canvas.read_text().encode("cp1252"))  # "Álvarez, José" in cp1252
    assert export.read_roster(canvas)[0]["Student"] == "Álvarez, José"
    people = export.read_roster(canvas) + export.read_roster(moodle)
    assert export.without_grades(json.loads((tmp_path / "learners.json").read_text()), people) == []


def test_the_export_command_reads_learners_json_and_the_roster_once(tmp_path, monkeypatch, capsys):
    # it read both again for its note on the roster's students who matched no learner: a
    # wasted read, and a learners.json rewritten in between (a regrade) made the note disagree
    # with the gradebook file just written
    learners.write(_records(), tmp_path)
    roster = tmp_path / "roster.csv"
    roster.write_text('Student,ID,SIS User ID,SIS Login ID,Section\n"Lin, Mei",102,S-2,mlin,A\n')
    reads = []
    read_text, read_bytes = export.Path.read_text, export.Path.read_bytes
    monkeypatch.setattr(
        export.Path,
        "read_text",
        lambda self, *a, **k: reads.append(self.name) or read_text(self, *a, **k),
    )
    monkeypatch.setattr(
        export.Path, "read_bytes", lambda self: reads.append(self.name) or read_bytes(self)
    )
    argv = [str(tmp_path), "--canvas", str(tmp_path / "c.csv"), "--roster", str(roster)]
    assert export.main(argv) == 0
    assert sorted(reads) == ["learners.json", "roster.csv"]
    err = capsys.readouterr().err
    assert "ada is not in the roster" in err and "left as they are: Lin, Mei" in err
    assert export.main([str(tmp_path / "nowhere"), "--canvas", str(tmp_path / "x.csv")]) == 2
    assert "error: no learners.json in" in capsys.readouterr().err


# ---------------------------------------------------------------- a batch killed and resumed


def test_a_killed_batch_run_again_grades_only_what_is_missing(tmp_path):
    folder = tmp_path / "class"
    for i in range(3):
        (folder / f"learner{i}").mkdir(parents=True)
        shutil.copy(ROOT / "solutions" / "00_warmup.ipynb", folder / f"learner{i}")
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "course_lib.grading",
        str(folder),
        "--out",
        str(out),
        "--jobs",
        "1",
    ]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    saved = out / "submissions"
    deadline = time.monotonic() + 240
    while not list(saved.glob("*.json")) and time.monotonic() < deadline:
        assert proc.poll() is None
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)  # killed, as by a machine going down
    proc.wait()
    first = {f.name: f.stat().st_mtime_ns for f in saved.glob("*.json")}
    assert 1 <= len(first) < 3 and not (out / "scores.json").exists()
    seed = json.loads((out / "batch.json").read_text())["seed"]
    # Ctrl-C stops it at once: what was graded is kept, the notebooks queued are not graded,
    # and the message says what to do (before, it went on grading the whole class first)
    proc = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )  # fmt: skip
    while len(list(saved.glob("*.json"))) == len(first) and time.monotonic() < deadline:
        assert proc.poll() is None
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    assert "run the same command again to grade the others" in proc.stderr.read()
    first = {f.name: f.stat().st_mtime_ns for f in saved.glob("*.json")}
    assert len(first) == 2 and not (out / "scores.json").exists()
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    done = len(first)
    assert (
        f"{done} of 3 submissions were graded by an earlier run (same notebook, same options, "
        "same course code); "
        f"grading the other {3 - done}" in again.stdout
    )
    assert {f.name: f.stat().st_mtime_ns for f in saved.glob("*.json") if f.name in first} == first
    assert len(list(saved.glob("*.json"))) == 3 and not list(saved.glob(".*"))
    assert json.loads((out / "batch.json").read_text())["seed"] == seed  # the same hidden inputs
    rows = json.loads((out / "scores.json").read_text())
    assert [r["score"] for r in rows] == [3.0, 3.0, 3.0]
    assert [r["learner"] for r in json.loads((out / "learners.json").read_text())] == [
        "learner0", "learner1", "learner2",
    ]  # fmt: skip
    # and once more: nothing left to grade
    third = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "3 of 3 submissions were graded by an earlier run" in third.stdout
    assert "grading the other 0" in third.stdout


def test_a_cell_stopped_by_the_notebooks_time_limit_is_not_said_to_exceed_its_own(tmp_path):
    from course_lib.grading import batch

    nb = nbformat.read(ROOT / "solutions" / "00_warmup.ipynb", as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell("import time\ntime.sleep(600)"))
    nbformat.write(nb, tmp_path / "00_warmup.ipynb")
    # --timeout 25 leaves the cell less than its own limit (a quarter of it, at least 30 s)
    limits = {"timeout": 25.0, "memory_mb": 4096, "max_output_kb": 64, "cell_timeout": None}
    row = batch.grade_one(tmp_path / "00_warmup.ipynb", seed=1, pid_file=tmp_path / "p", **limits)
    assert row["error"].startswith(
        "code cell 1 did not finish before the notebook's time limit of 25 s ran out"
    ), row["error"]


def test_a_saved_result_is_not_reused_once_the_grading_code_changed(tmp_path, monkeypatch):
    from course_lib.grading import batch

    notebook = _notebook(tmp_path / "class" / "ada" / "00_warmup.ipynb")
    graded = []

    def worker(name, path, **options):  # a stand-in for the worker: no kernel, at once
        graded.append(name)
        return {"submission": name, **_row(name, {"ex00.a": len(graded) - 1.0})}

    monkeypatch.setattr(batch, "_grade_in_worker", worker)
    for _ in range(2):  # the same code: the second run reuses the first's result
        batch.grade([notebook.parent.parent], tmp_path / "out", seed=3, quiet=True)
    assert len(graded) == 1
    # a task's checks fixed since (the course updated): its notebooks are graded again
    monkeypatch.setattr(batch, "_grader_digest", lambda: "the course, updated", raising=False)
    rows = batch.grade([notebook.parent.parent], tmp_path / "out", seed=3, quiet=True)
    assert len(graded) == 2 and rows[0]["score"] == 1.0


def test_the_throughput_benchmark_prints_its_figures():
    # plumbing only, one learner and one set; the figures in the README come from a full run
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "grading_throughput.py"), "--copies", "1",
         "--sets", "ex00", "--no-ray"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["submissions"] == 1 and set(result["seconds_per_submission"]) == {"ex00"}
    assert result["jobs1_per_minute"] > 0 and result["class_of_300_8_cores_minutes"] > 0
    assert "Ray, 2 nodes of 1 CPU: skipped (--no-ray)" in done.stdout


def test_a_kernel_that_dies_before_it_answers_is_started_again(tmp_path, monkeypatch):
    """The first kernel is killed before it answers, as one whose port another process took
    (the CI run where a Ray node went down): the learner still gets the row a quiet machine
    writes, and no error."""
    from course_lib.grading import batch

    real, started = batch._capped_client_class, []

    def killing(kills):  # a client class whose first `kills` kernels die as they start
        class Killing(real()):
            def start_new_kernel(self, **kwargs):
                super().start_new_kernel(**kwargs)
                started.append(self.km.provisioner.pid)
                if len(started) <= kills:
                    self.km.provisioner.process.kill()

        return lambda: Killing

    limits = {"timeout": 240.0, "memory_mb": 4096, "max_output_kb": 1024, "cell_timeout": None}
    path = ROOT / "solutions" / "00_warmup.ipynb"
    monkeypatch.setattr(batch, "_capped_client_class", killing(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        row = batch.grade_one(path, seed=11, pid_file=tmp_path / "pids", **limits)
        gc.collect()
    # whether the kernel still lives after a cell is asked, not a coroutine left unawaited
    assert not [w for w in caught if "never awaited" in str(w.message)], caught
    assert len(started) == 2, started
    assert row["error"] is None, row["error"]
    assert row["score"] == row["max_score"] == 3.0, row
    # with every start killed, the row says why instead of crashing
    started.clear()
    monkeypatch.setattr(batch, "_capped_client_class", killing(batch._KERNEL_STARTS))
    row = batch.grade_one(path, seed=11, pid_file=tmp_path / "pids", **limits)
    assert len(started) == batch._KERNEL_STARTS
    assert row["score"] == 0.0 and "Kernel died before replying" in row["error"], row
    assert all("not graded" in t["feedback"] for t in row["tasks"].values()), row


def test_a_notebook_of_code_cells_only_is_graded(tmp_path):
    # hunt m10: nbclient stores a cell it ran at the index it is given among all the cells; the
    # grader gave each task's harness cell the number of code cells, past the end of a notebook
    # without markdown cells (a learner who deleted them, a notebook made from a script): every
    # task then scored 0, "not graded: grading stopped: IndexError: list assignment index out
    # of range", for a right solution
    from course_lib.grading import batch

    nb = nbformat.read(ROOT / "solutions" / "00_warmup.ipynb", as_version=4)
    nb.cells = [c for c in nb.cells if c.cell_type == "code"]
    nbformat.write(nb, tmp_path / "00_warmup.ipynb")
    limits = {"timeout": 300.0, "memory_mb": 4096, "max_output_kb": 64, "cell_timeout": None}
    row = batch.grade_one(tmp_path / "00_warmup.ipynb", seed=1, pid_file=tmp_path / "p", **limits)
    assert row["error"] is None and row["score"] == row["max_score"] > 0, row
