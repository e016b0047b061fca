"""Helpers shared by the tests."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import nbformat
import torch

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))


def read(path: Path):
    return nbformat.read(path, as_version=4)


def code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def readme_test_command() -> str:
    """The README's one test command: the line of the test block that runs pytest."""
    text = (ROOT / "README.md").read_text()
    lines = [ln.strip() for ln in text.splitlines() if "pytest" in ln and "pip install" in ln]
    assert len(lines) == 1, f"README should have exactly one test command line, found {lines}"
    return lines[0]


def outputs_text(nb) -> str:
    return json.dumps([c.get("outputs", []) for c in code_cells(nb)])


MACHINE_PATH = re.compile(r"(/work/|/tmp/|/root/|/home/\w+/)")


def mistake_params(*task_ids: str) -> list:
    """pytest params (task_id, wrong, hint): every listed mistake of the given tasks."""
    import pytest

    from course_lib.grading import get_task

    return [
        pytest.param(task_id, wrong, hint, id=f"{task_id}-{getattr(wrong, '__name__', 'mistake')}")
        for task_id in task_ids
        for wrong, hint in get_task(task_id).mistakes()
    ]


def task_statement(notebook: str, heading: str) -> str:
    """The markdown cell of solutions/<notebook> that holds `heading` (one task's statement),
    with its line breaks and runs of spaces made single spaces, so phrases match across lines."""
    cells = [
        c.source
        for c in read(ROOT / "solutions" / notebook).cells
        if c.cell_type == "markdown" and heading in c.source
    ]
    assert len(cells) == 1, f"{len(cells)} markdown cells of {notebook} hold {heading!r}"
    return re.sub(r"\s+", " ", cells[0])


def binomial_tail(n: int, p: float, tolerance: float) -> float:
    """P(|X / n - p| > tolerance) for X ~ Binomial(n, p), summed exactly in float64: how often a
    right answer's frequency of n draws leaves a statistical check's tolerance by chance."""
    k = torch.arange(n + 1, dtype=torch.float64)
    log_pmf = (
        math.lgamma(n + 1)
        - torch.lgamma(k + 1)
        - torch.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )
    return float(log_pmf[(k / n - p).abs() > tolerance].exp().sum())
