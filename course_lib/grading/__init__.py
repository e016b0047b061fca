"""Graded exercises: instant feedback in a notebook, and batch grading of a whole class.

In a notebook::

    from course_lib.grading import check
    check("ex02.softmax", softmax)

From a shell::

    python -m course_lib.grading submissions/ --out grades/ --timeout 300
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .core import (
    Case,
    GradingError,
    Task,
    TaskResult,
    all_tasks,
    course_state,
    get_task,
    judge,
    learner_namespace,
    run_cases,
    tasks_for,
)

__all__ = [
    "batch_grading",
    "check",
    "check_result",
    "Case",
    "Task",
    "TaskResult",
    "GradingError",
    "all_tasks",
    "get_task",
    "tasks_for",
]

# In a notebook the checks use fixed inputs, so the same code always gets the same feedback.
# The batch grader draws fresh hidden inputs from a secret seed on every run.
NOTEBOOK_SEED = 0


def batch_grading() -> bool:
    """True inside the batch grader's kernel: a cell that only demonstrates (e.g. trains the
    learner's model for a minute) can skip itself there, since grading never needs it."""
    return os.environ.get("COURSE_BATCH_GRADING") == "1"


def check(task_id: str, obj: Any = None) -> TaskResult | None:
    """Check a learner's function or class for one task and print the feedback. Never raises.

    Returns None (so a notebook cell ending in `check(...)` shows only the printed feedback);
    use `check_result` for the `TaskResult` itself.
    """
    if batch_grading():  # the batch grader runs every task on its own hidden cases afterwards
        print(f"{task_id}: checked by the batch grader on its hidden cases")
        return None
    result = check_result(task_id, obj)
    print(result.render() if isinstance(result, TaskResult) else result)
    return None


def check_result(task_id: str, obj: Any = None) -> TaskResult | str:
    """Like `check`, but returns the `TaskResult` (or a message string) instead of printing."""
    if isinstance(obj, str) and not isinstance(task_id, str):  # check(fn, "ex02.softmax")
        return f"❌ the task id comes first: check({obj!r}, {getattr(task_id, '__name__', '...')})"
    try:
        task = get_task(task_id)
    except KeyError as e:
        return f"❌ {e.args[0]}"
    try:
        if obj is None:
            return judge(task, [], None, missing=f"pass your `{task.name}` to check()")
        if isinstance(obj, str):  # its name in quotes: "'str' object is not callable" 13 times
            hint = f"pass your `{task.name}` itself to check(), not a name in quotes: " + (
                f"check({task_id!r}, {task.name})"
            )
            return judge(task, [], None, missing=hint)
        with course_state():  # whatever dtype, grad mode or RNG the notebook left
            cases = task.cases(torch.Generator().manual_seed(NOTEBOOK_SEED))
            namespace = learner_namespace(obj)
            run = run_cases(task, obj, cases, namespace)

            def earlier(name: str) -> TaskResult | None:  # the check of the learner's earlier task
                own = namespace.get(name)
                result = (
                    None if own is None else check_result(f"{task.id.split('.')[0]}.{name}", own)
                )
                return result if isinstance(result, TaskResult) else None

            return judge(task, cases, run, earlier=earlier)
    except Exception as e:  # noqa: BLE001  (feedback must never crash a learner's notebook)
        return f"❌ {task_id}: the checker could not run ({type(e).__name__}: {e})"
