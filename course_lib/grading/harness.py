"""The only grading code that runs inside a learner's kernel.

The batch grader sends one small cell per task that calls `run_task`. It reloads the grading
package from disk (so a notebook that patched it in memory changes nothing), finds the learner's
object by name, runs it on the hidden inputs and saves the raw outcomes to a file. It decides
nothing: the grader's own process compares the outcomes with the references.
"""

from __future__ import annotations

import sys


def cell_source(task_id: str, cases_path: str, out_path: str) -> str:
    """The code of the cell the grader runs in the learner's kernel for one task."""
    return (
        "def __course_grade():\n"
        "    import importlib, sys\n"
        "    for name in [m for m in sys.modules if m.startswith('course_lib.grading')]:\n"
        "        del sys.modules[name]\n"
        "    harness = importlib.import_module('course_lib.grading.harness')\n"
        f"    harness.run_task(globals(), {task_id!r}, {cases_path!r}, {out_path!r})\n"
        "__course_grade()\n"
        "del __course_grade\n"
    )


def run_task(namespace: dict, task_id: str, cases_path: str, out_path: str) -> None:
    import torch

    from .core import get_task, run_cases

    task = get_task(task_id)
    cases = torch.load(cases_path, weights_only=False)
    obj = namespace.get(task.name)
    if obj is None:
        result = None
    else:
        result = run_cases(task, obj, cases, namespace)
    torch.save({"task": task_id, "run": result}, out_path)
    sys.stdout.flush()
