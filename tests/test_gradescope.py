"""The Gradescope autograder: built as a zip, run in a copy of Gradescope's folder layout.

Gradescope's documented layout ("Autograder Specifications"): the zip's root holds `setup.sh`
and `run_autograder`; the zip is extracted to /autograder/source, `run_autograder` is copied to
/autograder/run_autograder and run from /autograder for each submission, whose files are in
/autograder/submission; it writes /autograder/results/results.json. Here that root is a
temporary folder (AUTOGRADER_ROOT), and the course is imported from the zip's own copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from helpers import ROOT
from test_grading_hostile import HOSTILE, _variant

from course_lib.grading import gradescope, tasks_for
from course_lib.grading.batch import grade

# results.json as documented: top-level keys, keys of one test, and the values of visibility
TOP_LEVEL = {
    "score": (int, float),
    "execution_time": (int, float),
    "output": str,
    "output_format": str,
    "test_output_format": str,
    "test_name_format": str,
    "visibility": str,
    "stdout_visibility": str,
    "extra_data": dict,
    "tests": list,
    "leaderboard": list,
}
TEST_KEYS = {
    "score": (int, float),
    "max_score": (int, float),
    "status": str,
    "name": str,
    "name_format": str,
    "number": str,
    "output": str,
    "output_format": str,
    "tags": list,
    "visibility": str,
    "extra_data": dict,
}
STATUSES = {"passed", "failed"}


def validate(results: dict) -> None:
    """Fails unless `results` uses only Gradescope's documented fields, with their types."""
    for key, value in results.items():
        assert key in TOP_LEVEL, f"results.json has an undocumented field {key!r}"
        assert isinstance(value, TOP_LEVEL[key]), (key, value)
    assert "score" in results or all("score" in t for t in results["tests"])
    for test in results["tests"]:
        for key, value in test.items():
            assert key in TEST_KEYS, f"a test has an undocumented field {key!r}"
            assert isinstance(value, TEST_KEYS[key]), (key, value)
        assert {"name", "score", "max_score", "output", "visibility"} <= set(test), test
        assert test["visibility"] in gradescope.VISIBILITIES
        assert test.get("status", "passed") in STATUSES
        assert 0 <= test["score"] <= test["max_score"]
    assert results.get("visibility", "visible") in gradescope.VISIBILITIES


def test_the_zip_holds_what_gradescope_needs_at_its_root(tmp_path):
    path = gradescope.build(["ex00", "ex02"], tmp_path / "autograder.zip")
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        setup = z.read("setup.sh").decode()
        run = z.read("run_autograder").decode()
        config = json.loads(z.read("autograder.json"))
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    assert {"setup.sh", "run_autograder", "course/pyproject.toml"} <= names
    assert "course/course_lib/grading/tasks/ex02/__init__.py" in names
    assert not any("__pycache__" in n for n in names)
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111
    assert run.startswith("#!/usr/bin/env bash") and "results" in run
    # PyTorch's CPU build, pinned, then the course from the zip
    assert "pip install --quiet torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in (
        setup
    )
    assert "pip install --quiet /autograder/source/course" in setup
    assert config["exercises"] == ["ex00", "ex02"] and config["visibility"] == "visible"


@pytest.mark.parametrize(
    "exercises, visibility, words",
    [
        (["ex99"], "visible", "exercises must be one or more of ex00"),
        ([], "visible", "got none"),
        (["ex00"], "sometimes", "visibility must be one of hidden"),
    ],
)
def test_a_wrong_set_or_visibility_is_refused(tmp_path, exercises, visibility, words):
    with pytest.raises(ValueError, match=words):
        gradescope.build(exercises, tmp_path / "a.zip", visibility=visibility)


def _layout(tmp_path, zip_path, name, notebook):
    """A copy of Gradescope's /autograder with one submission in it."""
    root = tmp_path / name
    (root / "source").mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    (root / "results").mkdir()
    if notebook is not None:
        shutil.copy(notebook, root / "submission" / "00_warmup.ipynb")
    return root


def test_run_autograder_scores_equal_the_local_graders(tmp_path):
    seed = 5  # the zip may fix the seed; here so that both graders draw the same inputs
    zip_path = gradescope.build(["ex00"], tmp_path / "autograder.zip", seed=seed, timeout=120)
    hostile = _variant(tmp_path, "cheats", HOSTILE["cheats"][0])
    notebooks = {
        "solution": ROOT / "solutions" / "00_warmup.ipynb",
        "exercise": ROOT / "exercises" / "00_warmup.ipynb",
        "hostile": hostile,
        "nothing": None,
    }
    roots = {name: _layout(tmp_path, zip_path, name, nb) for name, nb in notebooks.items()}
    runs = {}
    for name, root in roots.items():  # all at once, each in its own layout
        env = dict(
            os.environ,
            AUTOGRADER_ROOT=str(root),
            AUTOGRADER_PYTHON=sys.executable,
            PYTHONPATH=str(root / "source" / "course"),  # the course as the zip holds it
        )
        runs[name] = subprocess.Popen(
            ["bash", str(root / "run_autograder")],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    local = grade(
        [p for p in notebooks.values() if p is not None], None, seed=seed, timeout=120, quiet=True
    )
    for name, proc in runs.items():
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, (name, stderr[-2000:])
    results = {
        name: json.loads((root / "results" / "results.json").read_text())
        for name, root in roots.items()
    }
    task_ids = [t.id for t in tasks_for("ex00")]
    for name, row in zip(["solution", "exercise", "hostile"], local, strict=True):
        got = results[name]
        validate(got)
        assert [t["name"] for t in got["tests"]] == task_ids
        assert got["score"] == row["score"], (name, got, row)
        for test in got["tests"]:
            want = row["tasks"][test["name"]]
            assert (test["score"], test["max_score"], test["output"]) == (
                want["score"],
                want["max_score"],
                want["feedback"],
            )
    assert results["solution"]["score"] == 3 and results["exercise"]["score"] == 0
    assert results["hostile"]["score"] == HOSTILE["cheats"][1]
    validate(results["nothing"])
    assert results["nothing"]["score"] == 0
    assert all("no notebook of ex00" in t["output"] for t in results["nothing"]["tests"])
