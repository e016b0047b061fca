"""Grading on a Ray cluster (`--ray ADDRESS`), with a node killed while it grades.

Ray is an optional extra (`pip install -e ".[test,ray]"`): without it this test skips, and says
so; `.ci/run` installs the extra in a virtual environment of its own and runs this file there,
where a missing Ray is a failure (COURSE_REQUIRE_RAY=1). The cluster is started here, on this
machine: a head node and a worker node, one CPU each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from helpers import ROOT

if os.environ.get("COURSE_REQUIRE_RAY") == "1":  # .ci/run's venv with the extra: never skip
    import ray  # noqa: F401
else:
    ray = pytest.importorskip("ray", reason="Ray is not installed (the optional [ray] extra)")


def _class(folder, learners):
    """A folder per learner: a solution, or an untouched exercise, of set 00."""
    for learner, source in learners.items():
        (folder / learner).mkdir(parents=True)
        shutil.copy(ROOT / source / "00_warmup.ipynb", folder / learner / "00_warmup.ipynb")
    return folder


def _grade(paths, out, *extra, wait=True):
    command = [sys.executable, "-m", "course_lib.grading", *map(str, paths), "--out", str(out)]
    proc = subprocess.Popen(
        [*command, "--seed", "11", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    return proc.communicate(timeout=300) + (proc.returncode,) if wait else proc


def test_a_class_graded_on_ray_with_a_node_killed_mid_run_loses_nothing(tmp_path):
    import psutil  # a dependency of Ray
    from ray.cluster_utils import Cluster

    learners = {f"learner{i}": "solutions" if i % 2 == 0 else "exercises" for i in range(4)}
    folder = _class(tmp_path / "class", learners)
    local = _class(tmp_path / "local", {"learner0": "solutions", "learner1": "exercises"})
    memory = 80 * 1024**2
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": memory, "include_dashboard": False},
    )
    try:
        worker = cluster.add_node(num_cpus=1, object_store_memory=memory)
        cluster.wait_for_nodes()
        raylet = psutil.Process(worker.all_processes["raylet"][0].process.pid)

        def grading_on_the_worker():  # the grader's worker processes under the worker node
            return [
                p
                for p in raylet.children(recursive=True)
                if "course_lib.grading.batch" in " ".join(p.cmdline())
            ]

        out = tmp_path / "out"
        proc = _grade([folder], out, "--ray", cluster.address, wait=False)
        # the local run to compare with, meanwhile (same seed, two of the notebooks)
        _, local_err, local_rc = _grade([local], tmp_path / "local_out", "--jobs", "1")
        assert local_rc == 0, local_err[-2000:]
        # kill the worker node in the middle of the batch: a notebook is graded, and the worker
        # node is grading one
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            try:
                busy = grading_on_the_worker()
            except psutil.Error:
                busy = []
            if busy and list((out / "submissions").glob("*.json")):
                break
            time.sleep(0.1)
        assert busy, "the worker node never graded while another notebook was done"
        cluster.remove_node(worker, allow_graceful=False)
        _, alive = psutil.wait_procs(busy, timeout=20)
        assert not alive, "a grading process outlived its node"
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
    finally:
        cluster.shutdown()
    rows = json.loads((out / "scores.json").read_text())
    names = [r["submission"] for r in rows]
    assert sorted(names) == sorted(str(folder / n / "00_warmup.ipynb") for n in learners), names
    assert len(list((out / "submissions").glob("*.json"))) == len(learners)  # none twice
    assert "on the Ray cluster" in stdout and "Ray could not grade" not in stdout
    local_rows = {
        r["submission"].split(os.sep)[-2]: r
        for r in json.loads((tmp_path / "local_out" / "scores.json").read_text())
    }
    for row in rows:
        learner = row["submission"].split(os.sep)[-2]
        same = local_rows["learner0" if learners[learner] == "solutions" else "learner1"]
        assert {k: v for k, v in row.items() if k != "submission"} == {
            k: v for k, v in same.items() if k != "submission"
        }, (row, same)
    per_learner = json.loads((out / "learners.json").read_text())
    assert [r["learner"] for r in per_learner] == sorted(learners)
    assert [r["score"] for r in per_learner] == [3.0 if i % 2 == 0 else 0.0 for i in range(4)]
