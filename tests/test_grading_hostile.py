"""Batch grading of hostile and broken submissions: each gets a row, none disturbs the others.

In a file of its own so that, with the suite's parallel workers, it runs beside the other
grading tests instead of after them (it is the suite's longest test).
"""

from __future__ import annotations

import copy
import json

import nbformat
from helpers import ROOT
from test_grading import grade


def _variant(tmp_path, name, edit):
    nb = copy.deepcopy(nbformat.read(ROOT / "solutions" / "00_warmup.ipynb", as_version=4))
    edit(nb)
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def _after(cell_text, source):
    def edit(nb):
        index = next(i for i, c in enumerate(nb.cells) if cell_text in c.source)
        nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))

    return edit


def _replace(name, source):
    def edit(nb):
        cell = next(c for c in nb.cells if c.source.startswith(f"def {name}"))
        cell.source = source

    return edit


HOSTILE = {
    # name: (how the notebook is edited, expected score out of 3, words expected in the error)
    "correct": (lambda nb: None, 3, None),
    "loops_forever": (
        _after("def batched_matmul", "while True:\n    pass"),
        3,
        "did not finish within its limit of 10 s",
    ),
    "calls_sys_exit": (_after("def batched_matmul", "import sys\nsys.exit(3)"), 3, "SystemExit"),
    "kills_its_kernel": (
        _after("def batched_matmul", "import os\nos._exit(1)"),
        3,
        "stopped the Python kernel",
    ),
    "floods_output": (
        _after("def batched_matmul", "for i in range(4000):\n    print('x' * 1000)"),
        3,
        "was dropped",
    ),
    "eats_memory": (
        _after("def batched_matmul", "import torch\nhog = torch.ones(1_500_000_000)"),
        3,
        "memory",
    ),
    "syntax_error": (
        _replace("last_token", "def last_token(x, lengths)\n    return x"),
        2,
        "SyntaxError",
    ),
    "cheats": (
        _after(
            "def last_token",
            (
                "import torch\nimport course_lib.grading.core as core\n"
                "core.compare_values = lambda *a, **k: None\n"
                "core._REGISTRY.clear()\n"
                "torch.allclose = lambda *a, **k: True\n"
                "torch.testing.assert_close = lambda *a, **k: None\n"
                "def check(*a, **k):\n    print('passed')\n"
                "def last_token(x, lengths):\n    return x[:, 0]\n"
            ),
        ),
        2,
        None,
    ),
    "uses_the_reference": (
        _replace(
            "last_token",
            (
                "from course_lib.tensor_basics import last_token as finished\n"
                "def last_token(x, lengths):\n    return finished(x, lengths)"
            ),
        ),
        2,
        None,
    ),
    "loops_inside_a_graded_function": (
        _replace(
            "pairwise_sq_distances",
            "def pairwise_sq_distances(x, y):\n    while True:\n        pass",
        ),
        2,
        "did not finish",
    ),
    "kills_inside_a_graded_function": (
        _replace("last_token", "def last_token(x, lengths):\n    import os\n    os._exit(0)"),
        2,
        "stopped the Python kernel",
    ),
}


def test_hostile_and_broken_submissions_are_graded_and_do_not_disturb_the_others(tmp_path):
    folder = tmp_path / "submissions"
    folder.mkdir()
    for name, (edit, _, _) in HOSTILE.items():
        _variant(folder, name, edit)
    (folder / "not_a_notebook.ipynb").write_text("{this is not json")
    # a Mac's zip leaves ._ copies and a __MACOSX folder, not notebooks: they are not graded;
    # a learner's folder with only a zip still gets a row that says so
    for junk in ("._correct.ipynb", "__MACOSX/._correct.ipynb", "zipped/homework.zip"):
        (folder / junk).parent.mkdir(exist_ok=True)
        (folder / junk).write_bytes(b"\x00\x05\x16\x07")
    # A looping cell is stopped after --cell-timeout (default: a quarter of --timeout, at least
    # 30 s); 10 s proves the same and keeps the suite fast.
    _, rows = grade(
        [folder],
        tmp_path / "out",
        "--timeout",
        "150",
        "--cell-timeout",
        "10",
        "--memory-mb",
        "1024",
        "--max-output-kb",
        "256",
    )
    by_name = {r["submission"].rsplit("/", 1)[-1].removesuffix(".ipynb"): r for r in rows}
    assert set(by_name) == set(HOSTILE) | {"not_a_notebook"}
    for name, (_, score, words) in HOSTILE.items():
        row = by_name[name]
        assert row["score"] == score, (name, row)
        if words:  # said in the row's error, or in the feedback of the task where it happened
            said = (row["error"] or "") + " ".join(t["feedback"] for t in row["tasks"].values())
            assert words in said, (name, row["error"], row["tasks"])
    assert by_name["correct"]["error"] is None
    cheat = by_name["cheats"]["tasks"]["ex00.last_token"]
    assert cheat["score"] == 0 and "First failure" in cheat["feedback"]
    reference = by_name["uses_the_reference"]["tasks"]["ex00.last_token"]
    assert reference["score"] == 0 and "finished version" in reference["feedback"]
    assert "not a readable notebook" in by_name["not_a_notebook"]["error"]
    zipped = json.loads((tmp_path / "out" / "learners.json").read_text())[-1]
    assert zipped["learner"] == "zipped" and "it holds homework.zip" in zipped["notes"]
