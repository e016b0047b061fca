"""Grading past one machine: each notebook in a Ray task of its own (`--ray ADDRESS`).

Ray (https://docs.ray.io) is an optional extra (`pip install "course_lib[ray]"`), never needed
by learners. Every node of the cluster needs the course installed, as on the grader's machine.
A task gets the notebook's bytes (the nodes share no files), writes them to a temporary folder
of the node and grades them exactly as the local grader does (`batch._grade_in_worker`: a
worker process, a fresh kernel, the same time, memory and output limits), so the row is the one
a local run with the same seed writes. Each task asks Ray for one CPU.

A node that dies while it grades (a lost machine, a killed worker) takes its running tasks with
it: Ray runs each of them again elsewhere (`RETRIES` times at most), and the grader keeps the
one result Ray returns per task, so no submission is lost or counted twice. A submission that
still fails gets a row that says why and is not saved, so that running the same command again
grades it (see `resume.py`).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

RETRIES = 3  # runs of a task after a node died under it


def _grade_remote(name: str, filename: str, notebook: bytes, options: dict) -> tuple[dict, float]:
    """Runs on a Ray worker: grade one notebook, sent as bytes; (its row, seconds taken)."""
    from course_lib.grading.batch import _grade_in_worker

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="course-ray-") as tmp:
        path = Path(tmp) / filename  # the name matters: NN_*.ipynb tells the exercise set
        path.write_bytes(notebook)
        row = _grade_in_worker(name, path, **options)
    return row, time.monotonic() - start


def _connect(address: str):
    try:
        import ray
    except ImportError:
        raise RuntimeError(
            '--ray needs Ray, an optional extra of the course: pip install "course_lib[ray]" '
            "(on this machine and on every node of the cluster)"
        ) from None
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    return ray


def grade_on_ray(
    address: str,
    submissions: list[tuple[int, str, Path]],
    options: dict,
    finished: Callable[..., None],
    say: Callable[..., None] = print,
) -> None:
    """Grade (index, name, path) submissions on the Ray cluster at `address` ("auto": the one
    this machine belongs to); call `finished(index, row, seconds)` as each result arrives."""
    ray = _connect(address)
    remote = ray.remote(num_cpus=1, max_retries=RETRIES, retry_exceptions=False)(_grade_remote)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    say(f"grading {len(submissions)} notebooks on the Ray cluster at {address} ({cpus} CPUs)")
    pending = {
        remote.remote(name, Path(path).name, Path(path).read_bytes(), options): (i, name)
        for i, name, path in submissions
    }
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            i, name = pending.pop(ref)
            try:
                row, seconds = ray.get(ref)
            except Exception as e:  # noqa: BLE001  (a task that failed after its retries)
                message = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                say(f"{name}: Ray could not grade it ({message}); run the command again")
                error = f"not graded: the Ray cluster failed ({message})"
                row = {"submission": name, "score": 0.0, "max_score": 0.0, "error": error}
                finished(i, {**row, "tasks": {}}, 0.0, keep=False)
                continue
            finished(i, row, seconds)
