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


IGNORE_TAG = "nbval-ignore-output"
TEST_VOCABULARY = re.compile(r"(?i)\bnbval\b|NBVAL_|\btest suite\b|\bthe tests\b")


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_what_a_learner_reads_has_no_test_suite_vocabulary(path):
    # A cell whose output the suite does not compare (timings, trained numbers) carries the cell
    # tag `nbval-ignore-output`, which a learner does not see, and says why in learner terms
    # in a first comment line. `# NBVAL_IGNORE_OUTPUT` comments and prose about "the tests"
    # are for maintainers, not learners.
    for index, cell in enumerate(read(path).cells):
        found = TEST_VOCABULARY.search(cell.source)
        assert not found, (
            f"{rel(path)} cell {index} says {found.group(0)!r} to the learner; tag the cell "
            f"{IGNORE_TAG!r} instead and explain machine-to-machine differences in plain words"
        )


@pytest.mark.parametrize("path", EXECUTED + EXERCISES, ids=rel)
def test_a_cell_whose_output_is_not_compared_says_why(path):
    for index, cell in enumerate(read(path).cells):
        if IGNORE_TAG in cell.get("metadata", {}).get("tags", []):
            assert cell.cell_type == "code"
            first = cell.source.lstrip().splitlines()[0] if cell.source.strip() else ""
            assert first.startswith("#"), (
                f"{rel(path)} cell {index} is tagged {IGNORE_TAG!r}: start it with a comment "
                "that tells the learner why its output differs between machines"
            )
