"""The committed notebooks are honest: one clean run each, stamped, exercises in sync."""

from __future__ import annotations

import re

import pytest
from helpers import (
    EXERCISES,
    LESSONS,
    MACHINE_PATH,
    ROOT,
    SOLUTIONS,
    code_cells,
    outputs_text,
    read,
    rel,
)

from course_lib.grading import tasks_for
from tools.notebooks import BEGIN, END, SETUP_SOURCE, badge_source, make_exercise

EXECUTED = LESSONS + SOLUTIONS
ALL = EXECUTED + EXERCISES


def test_there_are_notebooks():
    assert LESSONS and SOLUTIONS and EXERCISES


@pytest.mark.parametrize("path", EXECUTED, ids=rel)
def test_committed_from_one_clean_top_to_bottom_run(path):
    nb = read(path)
    cells = [c for c in code_cells(nb) if c.source.strip()]
    counts = [c.execution_count for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{rel(path)} was not saved from one fresh run (execution counts {counts}); "
        "re-run it with: python tools/notebooks.py execute " + rel(path)
    )
    errors = [o.get("ename") for c in cells for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{rel(path)} has error outputs: {errors}"
    assert any(c.outputs for c in cells), f"{rel(path)} has no outputs at all"


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_starts_with_the_stamped_badge_and_setup_cell(path):
    nb = read(path)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source == badge_source(rel(path)), (
        f"{rel(path)}: first cell is not the Colab badge; run: python tools/notebooks.py stamp"
    )
    assert nb.cells[1].cell_type == "code" and nb.cells[1].source == SETUP_SOURCE, (
        f"{rel(path)}: second cell is not the standard setup cell; "
        "run: python tools/notebooks.py stamp"
    )
    assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_outputs_hold_no_machine_paths(path):
    found = MACHINE_PATH.search(outputs_text(read(path)))
    assert not found, f"{rel(path)} prints a path of this machine: {found.group(0)}..."


def test_every_solution_has_its_exercise_and_back():
    assert {p.name for p in SOLUTIONS} == {p.name for p in EXERCISES}


@pytest.mark.parametrize("path", SOLUTIONS, ids=rel)
def test_exercise_is_generated_from_its_solution(path):
    expected = make_exercise(read(path), f"exercises/{path.name}")
    actual = read(ROOT / "exercises" / path.name)
    strip = lambda nb: [(c.cell_type, c.source) for c in nb.cells]  # noqa: E731
    assert strip(actual) == strip(expected), (
        f"exercises/{path.name} drifted from solutions/{path.name}; regenerate it with: "
        f"python tools/notebooks.py exercises solutions/{path.name}"
    )
    assert actual.metadata.get("course") == expected.metadata.get("course")


@pytest.mark.parametrize("path", EXERCISES, ids=rel)
def test_exercise_has_no_solution_and_no_outputs(path):
    nb = read(path)
    text = "\n".join(c.source for c in nb.cells)
    assert BEGIN not in text and END not in text
    assert all(not c.outputs and c.execution_count is None for c in code_cells(nb))


@pytest.mark.parametrize("path", SOLUTIONS, ids=rel)
def test_solution_has_each_task_in_its_own_cell_with_a_check(path):
    exercise = "ex" + path.name[:2]
    tasks = tasks_for(exercise)
    assert tasks, f"no graded tasks are registered for {exercise}"
    sources = [c.source for c in code_cells(read(path))]
    for task in tasks:
        defining = [s for s in sources if re.search(rf"^(def|class) {task.name}\b", s, re.M)]
        assert len(defining) == 1, f"{task.id}: expected one cell that defines {task.name}"
        assert BEGIN in defining[0], f"{task.id}: its cell has no {BEGIN} block"
        assert any(f'check("{task.id}", {task.name})' in s for s in sources), (
            f"{task.id}: no check cell"
        )


@pytest.mark.parametrize("path", LESSONS, ids=rel)
def test_lesson_has_the_agreed_structure(path):
    text = "\n".join(c.source for c in read(path).cells if c.cell_type == "markdown")
    for heading in (
        "You will learn",
        "Prerequisites",
        "Runs in",
        "## Summary",
        "## Check your understanding",
        "## Exercise",
    ):
        assert heading in text, f"{rel(path)} has no '{heading}'"
    assert re.search(r"^# Lesson \d\d: ", text, re.M), f"{rel(path)} has no '# Lesson NN: ' title"


NBVAL_MARKERS = {
    "NBVAL_IGNORE_OUTPUT", "NBVAL_CHECK_OUTPUT", "NBVAL_RAISES_EXCEPTION", "NBVAL_SKIP"
}


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_nbval_markers_stand_alone_on_their_line(path):
    # nbval honours a marker only when the comment is exactly the marker: "# NBVAL_SKIP (why)"
    # is silently ignored. The reason goes on the next line.
    for index, cell in enumerate(read(path).cells):
        for line in cell.source.splitlines():
            if "NBVAL_" in line and line.strip().startswith("#"):
                marker = line.strip().lstrip("#").strip()
                assert marker in NBVAL_MARKERS, (
                    f"{rel(path)} cell {index}: {line.strip()!r} is not a marker nbval reads; "
                    "put the marker alone on its line and the reason on the next"
                )
