"""Batch grading: one command grades one notebook or folders of submitted notebooks.

    python -m course_lib.grading PATH [PATH ...] --out DIR [--timeout SECONDS] [--ray ADDRESS]

Every submission is graded by a worker process of its own, which runs the notebook in a fresh
kernel with a time limit, a memory limit and a cap on captured output, then sends one cell per
task that runs the learner's object on hidden inputs (drawn from a seed the learner never sees)
and saves the raw outcomes. The worker, not the kernel, compares them with the references.
A submission that raises, loops, exits, kills its kernel or floods its output still gets a row,
with what it earned and the reason; the others are unaffected.

DIR gets `scores.json` (one row per submission, the contract of EXERCISES.md), `scores.csv` and
`learners.json` (one row per learner: see `learners.py`; their notes also name the learners whose
code is the same, `similarity.py`), and `submissions/`, one file per graded submission, written
as soon as it is graded: a batch that was stopped and is run again with the same DIR grades only
the submissions that have no file there yet (`resume.py`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import core, learners, similarity
from .resume import Store, batch_seed

DEFAULT_TIMEOUT = 300.0  # seconds per submission
DEFAULT_MEMORY_MB = 4096  # address space of a learner's kernel beyond what it starts with
DEFAULT_MAX_OUTPUT_KB = 1024  # captured output per cell
_GRACE = 60.0  # extra seconds the parent allows a worker for kernel start and judging
_RUNNING: dict[int, tuple[subprocess.Popen, Path]] = {}  # worker pid -> (worker, its kernels)
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def collect(paths: list[Path]) -> list[tuple[str, Path]]:
    """(display name, path) of every notebook under the given files and folders."""
    found: list[tuple[str, Path]] = []
    for p in paths:
        if p.is_dir():
            for nb in sorted(p.rglob("*")):
                # .ipynb in any case (.IPYNB from Windows), not hidden files or folders
                # (.ipynb_checkpoints, a Mac's ._ copies) nor the __MACOSX folder of a Mac's zip
                parts = nb.relative_to(p).parts
                if nb.suffix.lower() != ".ipynb" or not nb.is_file():
                    continue
                if not any(part.startswith(".") or part == "__MACOSX" for part in parts):
                    found.append((str(p / nb.relative_to(p)), nb))
        elif p.exists():
            found.append((str(p), p))
        else:
            raise FileNotFoundError(f"no such file or folder: {p}")
    return found


def exercise_of(nb: Any, path: Path) -> str | None:
    """ex02 for a notebook of exercise set 02: from its metadata, its check calls, or its name."""
    course = nb.get("metadata", {}).get("course", {})
    if isinstance(course, dict) and re.fullmatch(r"ex\d\d", str(course.get("exercise", ""))):
        return course["exercise"]
    for cell in nb.get("cells", []):
        m = re.search(r"check\(\s*[\"'](ex\d\d)\.", "".join(cell.get("source", "")))
        if m:
            return m.group(1)
    m = re.match(r"(\d\d)_", path.name)
    return f"ex{m.group(1)}" if m else None


def _environment(**extra: str) -> dict[str, str]:
    """This process's environment with `extra`, importing the same course_lib as the grader
    (installed or not)."""
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
    return env


# --------------------------------------------------------------------------------------------
# The worker: one submission, one kernel
# --------------------------------------------------------------------------------------------


def _task_seed(seed: int, task_id: str) -> int:
    digest = hashlib.sha256(f"{seed}:{task_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _capped_client_class():
    from nbclient import NotebookClient

    class CappedClient(NotebookClient):
        """A NotebookClient that keeps at most `max_output_chars` of output per cell."""

        max_output_chars = DEFAULT_MAX_OUTPUT_KB * 1024
        flooded: set[int]

        def output(self, outs, msg, display_id, cell_index):
            sizes = self.__dict__.setdefault("_sizes", {})
            size = len(json.dumps(msg.get("content", {}), default=str))
            sizes[cell_index] = sizes.get(cell_index, 0) + size
            if sizes[cell_index] > self.max_output_chars:
                self.__dict__.setdefault("flooded", set()).add(cell_index)
                return None
            return super().output(outs, msg, display_id, cell_index)

    return CappedClient


def _first_error(cell) -> str | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return f"{out.get('ename')}: {str(out.get('evalue'))[:300]}"
    return None


def grade_one(path: Path, seed: int, pid_file: Path, **limits: Any) -> dict:
    """Grade one notebook (runs in the worker process) and return its row of scores.json.

    Reads the notebook and finds its exercise set, draws the hidden cases, runs the notebook in
    a sandboxed kernel (`_Submission`, within `limits`: timeout, memory_mb, max_output_kb,
    cell_timeout), runs each task's harness cell there and judges the outcomes in this process.
    Whatever goes wrong, the row still has every task.
    """
    import nbformat
    import torch

    row: dict[str, Any] = {"score": 0.0, "max_score": 0.0, "error": None, "tasks": {}}
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # noqa: BLE001
        row["error"] = f"not a readable notebook: {type(e).__name__}: {str(e)[:200]}"
        exercise = exercise_of({}, path)  # its name may say which set it was handed in for
        for task in core.tasks_for(exercise) if exercise else []:
            row["tasks"][task.id] = learners.zero_task(
                task.points, "not graded: not a readable notebook (empty, cut short or not JSON)"
            )
        row["max_score"] = sum(t["max_score"] for t in row["tasks"].values())
        return row
    exercise = exercise_of(nb, path)
    tasks = core.tasks_for(exercise) if exercise else []
    if not tasks:
        row["error"] = (
            "could not tell which exercise set this notebook is (no "
            "metadata.course.exercise, no check('exNN...') call, no NN_ file name)"
        )
        return row
    row["max_score"] = sum(t.points for t in tasks)
    deadline = time.monotonic() + limits["timeout"]
    results: dict[str, Any] = {}  # task id -> TaskResult, in the order the tasks were judged
    with tempfile.TemporaryDirectory(prefix="course-grading-") as tmp:
        cases = {}  # each task's hidden cases, from a seed of its own, saved for the harness
        for task in tasks:
            cases[task.id] = task.cases(torch.Generator().manual_seed(_task_seed(seed, task.id)))
            torch.save(cases[task.id], Path(tmp) / f"{task.id}.cases.pt")
        rundir = Path(tmp) / "run"
        rundir.mkdir()
        if (path.parent / "mine").is_dir():  # the learner's own library, which later
            # exercises import (course_lib.mine), goes with the notebook
            ignore = shutil.ignore_patterns("__pycache__", ".*")
            shutil.copytree(path.parent / "mine", rundir / "mine", ignore=ignore)
        submission = _Submission(nb, rundir, pid_file, deadline, **limits)
        try:
            submission.run_notebook()
            for task in tasks:
                run, note = submission.outcomes_of(task, Path(tmp) / f"{task.id}.cases.pt")
                results[task.id] = _judge_task(task, cases[task.id], run, note, results)
        except Exception as e:  # noqa: BLE001
            submission.problems.append(f"grading stopped: {type(e).__name__}: {str(e)[:300]}")
        finally:
            submission.stop()
    problems = submission.problems
    for task in tasks:  # tasks never reached still get a row
        result = results.get(task.id)
        reason = "not graded: " + (problems[-1] if problems else "")
        row["tasks"][task.id] = (
            result.as_dict() if result else learners.zero_task(task.points, reason)
        )
    row["score"] = round(sum(t["score"] for t in row["tasks"].values()), 4)
    row["error"] = "; ".join(problems) or None
    return row


_KERNEL_STARTS = 3  # tries to start a kernel that dies before it answers


class _Submission:
    """One notebook in its sandboxed kernel, within its time limits.

    `run_notebook` runs the code cells in order; a cell that times out or kills the kernel is
    skipped, and the kernel restarted with the cells that finished replayed. `outcomes_of` then
    runs one task's harness cell and reads back what it saved. What went wrong is appended to
    `problems`, in words for the row's `error`.
    """

    def __init__(
        self, nb, rundir, pid_file, deadline, *, timeout, memory_mb, max_output_kb, cell_timeout
    ):
        self.nb, self.rundir, self.pid_file, self.deadline = nb, rundir, pid_file, deadline
        self.library = (rundir / "mine").is_dir()  # handed in beside the notebook (course_lib.mine)
        self.code_cells = [c for c in nb.cells if c.cell_type == "code"]
        # where each sits among all the cells: nbclient stores a cell it ran at that index
        self.positions = [k for k, c in enumerate(nb.cells) if c.cell_type == "code"]
        self.timeout, self.memory_mb, self.max_output_kb = timeout, memory_mb, max_output_kb
        # one looping cell leaves time for what comes after it (a restart, the other cells)
        self.cell_limit = cell_timeout or max(30.0, timeout / 4)
        self.problems: list[str] = []
        self.done: list[int] = []  # cells that ran to the end (they are replayed after a restart)
        self.alive = False
        self.client = None

    def start(self) -> None:
        """A fresh kernel and its client. A kernel that dies before it answers is started
        again, up to `_KERNEL_STARTS` times: no learner code has run in it yet, so the cause is
        the machine's. The usual one is a port race (jupyter_client#154): the ports are chosen
        and released, and another process (a busy machine, a Ray node starting its workers)
        takes one before the kernel binds it."""
        for attempt in range(1, _KERNEL_STARTS + 1):
            try:
                self._start_once()
                return
            except RuntimeError as e:  # nbclient has already cleaned up the dead kernel
                if "died" not in str(e) or attempt == _KERNEL_STARTS:
                    raise
                if time.monotonic() + attempt > self.deadline:
                    raise
                time.sleep(attempt)

    def _start_once(self) -> None:
        client = _capped_client_class()(
            self.nb,
            timeout=60,
            # a kernel on a loaded machine (a class graded in parallel, CI) can take more than
            # nbclient's 60 s to answer; it may use what is left of the submission's time
            startup_timeout=max(60, int(self.deadline - time.monotonic())),
            kernel_name="python3",
            allow_errors=True,
            record_timing=False,
            store_widget_state=False,
            resources={"metadata": {"path": str(self.rundir)}},
        )
        client.max_output_chars = self.max_output_kb * 1024
        client.km = client.create_kernel_manager()
        env = _environment(
            COURSE_DEVICE="cpu",
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            PYTHONHASHSEED="0",
            COURSE_BATCH_GRADING="1",  # long demonstrations (training runs) skip themselves
        )
        env.pop("COURSE_MINE", None)  # the learner's library is the one copied beside the notebook
        env["COURSE_MINE_HANDED_IN"] = "1" if self.library else "0"  # mine() says which
        limit = self.memory_mb

        def limit_memory() -> None:  # runs in the kernel process, before Python starts
            import resource

            if limit > 0:
                soft = limit * 1024 * 1024 + 2 * 1024**3  # + room for torch's own mappings
                resource.setrlimit(resource.RLIMIT_AS, (soft, soft))

        client.start_new_kernel(env=env, preexec_fn=limit_memory)
        client.start_new_kernel_client()
        self.client = client
        pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
        if pid:
            with open(self.pid_file, "a") as f:
                f.write(f"{pid}\n")

    def stop(self) -> None:
        if self.client is not None:
            try:
                self.client._cleanup_kernel()
            except Exception:  # noqa: BLE001  (a dead kernel may fail to clean up; that is fine)
                pass
            self.client = None

    def run(self, cell, index: int) -> str | None:
        """Execute one cell within the cell limit, or less when the deadline is closer; None if
        it finished, else 'timeout', 'dead' or 'error'."""
        from nbclient.exceptions import CellTimeoutError, DeadKernelError
        from nbclient.util import ensure_async, run_sync

        self.client.timeout = max(1, int(min(self.cell_limit, self.deadline - time.monotonic())))
        harness = index >= len(self.code_cells)  # a task's harness cell, after the notebook's
        if harness:
            self.nb.cells.append(cell)
        try:
            self.client.execute_cell(
                cell, len(self.nb.cells) - 1 if harness else self.positions[index]
            )
        except CellTimeoutError:
            return "timeout"
        except DeadKernelError:
            return "dead"
        except RuntimeError as e:  # e.g. the kernel's channels closed because it exited
            return "dead" if "kernel" in str(e).lower() else "error"
        finally:
            if harness:
                self.nb.cells.pop()
        # the client is asynchronous: is_alive() is a coroutine, which alone is always true
        alive = run_sync(ensure_async)(self.client.kc.is_alive())
        return None if alive else "dead"

    def restart(self) -> bool:
        """A fresh kernel with the finished cells replayed; False when that is not possible."""
        self.stop()
        if time.monotonic() > self.deadline:
            return False
        self.start()
        return all(self.run(self.code_cells[j], j) is None for j in self.done)

    def run_notebook(self) -> None:
        """Start the kernel and run every code cell, noting errors, time-outs and crashes."""
        self.start()
        self.alive = True
        for i, cell in enumerate(self.code_cells):
            if self.deadline - time.monotonic() <= 0:
                self.problems.append(
                    f"the time limit of {self.timeout:.0f} s ran out before cell {i + 1}"
                )
                break
            status = self.run(cell, i)
            if status is None:
                self.done.append(i)
                err = _first_error(cell)
                if err and len(self.problems) < 5:
                    self.problems.append(f"code cell {i + 1} raised {err}")
                continue
            stopped_by = (  # the cell's own limit, or what was left of the notebook's
                f"within its limit of {self.cell_limit:.0f} s"
                if self.client.timeout >= int(self.cell_limit)
                else f"before the notebook's time limit of {self.timeout:.0f} s ran out"
            )
            what = {
                "timeout": f"did not finish {stopped_by}",
                "dead": "stopped the Python kernel (exit, crash or out of memory)",
            }
            self.problems.append(f"code cell {i + 1} {what.get(status, 'failed')}; it was skipped")
            if not self.restart():
                self.alive = False
                self.problems.append("could not restart the kernel within the time limit")
                break
        flooded = getattr(self.client, "flooded", None)
        if flooded:
            cells = ", ".join(  # numbered as code cells, as the other problems are
                str(self.positions.index(k) + 1) for k in sorted(flooded) if k in self.positions
            )
            self.problems.append(
                f"output beyond {self.max_output_kb} KB per cell was dropped (cells {cells})"
            )

    def outcomes_of(self, task, case_file: Path) -> tuple[dict | None, str | None]:
        """Run the task's harness cell in the kernel: (its raw outcomes or None, why none)."""
        import nbformat
        import torch

        from .harness import cell_source

        out_file = case_file.with_name(f"{task.id}.out.pt")
        run: dict | None = None
        note = None
        if self.alive and time.monotonic() < self.deadline:
            source = cell_source(task.id, str(case_file), str(out_file))
            harness_cell = nbformat.v4.new_code_cell(source)
            status = self.run(harness_cell, len(self.code_cells))
            if status == "timeout":
                note = "your code did not finish within the time limit"
            elif status == "dead":
                note = "your code stopped the Python kernel"
            elif not out_file.exists():
                note = f"the check could not run ({_first_error(harness_cell) or 'no result'})"
            if status is not None and not self.restart():
                self.alive = False
        else:
            note = "not graded: the notebook ran out of time or its kernel died"
        if out_file.exists():
            run = torch.load(out_file, weights_only=True).get("run")
            if run is None:
                note = f"no `{task.name}` was defined in the notebook"
        return run, note


def _judge_task(task, cases: list, run: dict | None, note: str | None, earlier: dict):
    """Compare a task's outcomes with the reference (in this process, never in the kernel).

    `earlier` holds the results of the tasks judged before, by id: when this task calls the
    learner's version of one of them (`depends_on`) and that one failed, the feedback says so.
    """
    if note and run is None:
        return core.judge(task, cases, None, missing=note)
    exercise = task.id.split(".")[0]
    return core.judge(task, cases, run, earlier=lambda name: earlier.get(f"{exercise}.{name}"))


def _worker_main() -> None:
    config = json.loads(sys.stdin.read())
    result = Path(config.pop("result"))
    path, pid_file = Path(config.pop("path")), Path(config.pop("pid_file"))
    result.write_text(json.dumps(grade_one(path, pid_file=pid_file, **config)))


# --------------------------------------------------------------------------------------------
# The parent: many submissions in parallel, a table at the end
# --------------------------------------------------------------------------------------------


def die_with_parent() -> None:
    """In a child process, before it runs: ask Linux to kill it when its parent dies.

    A grader that is killed (`kill -9`, a Ray node that goes down) then leaves no worker running
    on (a kernel already ends with its worker: ipykernel polls its parent). The child must be
    started from a thread that waits for it, as `_grade_in_worker` does. Elsewhere than on
    Linux it does nothing.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def _kill_all(proc: subprocess.Popen, pid_file: Path) -> None:
    pids = [proc.pid]
    if pid_file.exists():
        pids += [int(p) for p in pid_file.read_text().split() if p.strip().isdigit()]
    for pid in pids:
        for kill in (lambda p: os.killpg(p, signal.SIGKILL), lambda p: os.kill(p, signal.SIGKILL)):
            try:
                kill(pid)
            except (ProcessLookupError, PermissionError, OSError):
                pass


def _grade_in_worker(name: str, path: Path, **options: Any) -> dict:
    """Grade one notebook in a worker process of its own (`grade_one`, with `options`: seed,
    timeout, memory_mb, max_output_kb, cell_timeout), killed with its kernels when it is done
    or takes longer than the timeout allows."""
    timeout = options["timeout"]
    with tempfile.TemporaryDirectory(prefix="course-grader-") as tmp:
        result_file, pid_file = Path(tmp) / "result.json", Path(tmp) / "kernel.pids"
        config = {"path": str(path.resolve()), **options}
        config.update(result=str(result_file), pid_file=str(pid_file))
        proc = subprocess.Popen(
            [sys.executable, "-m", "course_lib.grading.batch", "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            text=True,
            env=_environment(),  # the worker imports this very course_lib, installed or not
            preexec_fn=die_with_parent,
        )
        _RUNNING[proc.pid] = (proc, pid_file)  # for `_stop_workers` when the batch is stopped
        try:
            _, stderr = proc.communicate(json.dumps(config), timeout=timeout + _GRACE)
            error = None
        except subprocess.TimeoutExpired:
            _kill_all(proc, pid_file)
            proc.communicate()
            stderr = ""
            error = f"grading did not finish within {timeout + _GRACE:.0f} s and was stopped"
        finally:
            _RUNNING.pop(proc.pid, None)
        _kill_all(proc, pid_file)  # no kernel outlives its submission
        if result_file.exists():
            result = json.loads(result_file.read_text())
        else:
            tail = (stderr or "").strip().splitlines()[-1:] or [""]
            error = error or f"the grader's worker failed: {tail[0][:300]}"
            result = {"score": 0.0, "max_score": 0.0, "tasks": {}, "error": error}
    return {"submission": name, **result}


def grade(
    paths: list[Path],
    out_dir: Path | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    jobs: int | None = None,
    seed: int | None = None,
    memory_mb: int = DEFAULT_MEMORY_MB,
    max_output_kb: int = DEFAULT_MAX_OUTPUT_KB,
    cell_timeout: float | None = None,
    quiet: bool = False,
    ray: str | None = None,
) -> list[dict]:
    """Grade notebooks; write the results to `out_dir`; return the rows of scores.json.

    With `out_dir`, every submission is saved there as soon as it is graded, and one saved by an
    earlier run with the same notebook and options is not graded again (`resume.py`). With
    `ray` (an address, or "auto"), each notebook is graded by a Ray task (`distributed.py`).
    """
    say = (lambda *a: None) if quiet else print
    given = [(p, name, path) for p in paths for name, path in collect([p])]
    submissions = [(name, path) for _, name, path in given]
    names = [learners.learner_of(folder, path, name) for folder, name, path in given]
    if out_dir is not None:
        seed = batch_seed(out_dir, seed, lambda: secrets.randbits(62))
    elif seed is None:
        seed = secrets.randbits(62)
    options = {
        "seed": seed,
        "timeout": timeout,
        "memory_mb": memory_mb,
        "max_output_kb": max_output_kb,
        "cell_timeout": cell_timeout,
    }
    # a saved result is reused only when the grader is the same code too (a fixed check regrades)
    store = None if out_dir is None else Store(out_dir, {**options, "grader": _grader_digest()})
    keys = [store.key(name, path) if store else "" for name, path in submissions]
    rows: list[dict | None] = [store.load(key) if store else None for key in keys]
    done = sum(r is not None for r in rows)
    if done:
        say(
            f"resuming in {out_dir}: {done} of {len(rows)} submissions were graded by an "
            f"earlier run (same notebook, same options, same course code); grading the other "
            f"{len(rows) - done}"
        )
    todo = [i for i, row in enumerate(rows) if row is None]

    def finished(i: int, row: dict, seconds: float, keep: bool = True) -> None:
        rows[i] = row
        if store is not None and keep:
            store.save(keys[i], row, learner=names[i], seconds=round(seconds, 3))

    if ray:
        from .distributed import grade_on_ray

        grade_on_ray(ray, [(i, *submissions[i]) for i in todo], options, finished, say)
    else:
        stopped = threading.Event()

        def one(i: int) -> None:
            if stopped.is_set():
                return
            start = time.monotonic()
            row = _grade_in_worker(*submissions[i], **options)
            if not stopped.is_set():  # a worker killed by Ctrl-C has no grade to keep
                finished(i, row, time.monotonic() - start)

        pool = ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1))
        try:
            for future in [pool.submit(one, i) for i in todo]:
                future.result()
        except KeyboardInterrupt:  # Ctrl-C: stop now, not after the queued notebooks
            stopped.set()
            pool.shutdown(wait=False, cancel_futures=True)
            for proc, pid_file in list(_RUNNING.values()):
                _kill_all(proc, pid_file)
            raise
        pool.shutdown()
    graded = [r for r in rows if r is not None]
    who = [name for name, row in zip(names, rows, strict=True) if row is not None]
    empty = learners.without_notebooks(paths, [path for _, _, path in given], out_dir)
    records = learners.by_learner(graded + list(empty.values()), who + list(empty))
    learners.add_notes(records, _similar(records, names, given, say))
    if out_dir is not None:  # scores.json (per submission), scores.csv and learners.json
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "scores.json").write_text(json.dumps(graded, indent=2) + "\n")
        learners.write(records, out_dir)
    if not quiet:
        print(format_table(records))
    return graded


def _similar(records, names, given, say) -> dict[str, list[str]]:
    """The instructor's notes on code two learners share that the course does not explain
    (`similarity.py`), by learner as `learners.same_learner` names them."""
    shown = {learners.same_learner(r["learner"]): r["learner"] for r in records}
    notebooks: dict[str, list[Path]] = {}
    for name, (_, _, path) in zip(names, given, strict=True):
        who = shown.get(learners.same_learner(name))  # None: a notebook left ungraded
        if who is not None:
            notebooks.setdefault(who, []).append(path)
    if len(notebooks) < 2:
        return {}
    if similarity.course_code() is None:
        say("learners' code was not compared: the course's solutions/ and exercises/ are not here")
        return {}
    said = similarity.notes(notebooks)
    return {learners.same_learner(who): notes for who, notes in said.items()}


def _grader_digest() -> str:
    """A hash of the course's code (the tasks, their references, this grader)."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]  # course_lib/
    for f in sorted(package.rglob("*.py")):
        digest.update(
            hashlib.sha256(str(f.relative_to(package)).encode() + f.read_bytes()).digest()
        )
    return digest.hexdigest()[:16]


def format_table(records: list[dict]) -> str:
    """The class at a glance: a line per learner (`learners.by_learner`), their score and the
    start of their notes (why a task scored 0); scores.csv has the notes in full."""
    if not records:
        return "no notebooks found"
    width = max(7, *(len(r["learner"]) for r in records))
    lines = [f"{'learner':<{width}}  {'score':>11}  why a task scored 0", "-" * (width + 60)]
    for r in records:
        score = f"{r['score']:g} / {r['max_score']:g}"
        note = r["notes"] if len(r["notes"]) <= 120 else r["notes"][:119].rstrip() + "…"
        lines.append(f"{r['learner']:<{width}}  {score:>11}  {note}")
    lines.append(core.SCORE_NOTE)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:] == ["--worker"]:
        _worker_main()
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.grading",
        description="Grade exercise notebooks; write scores.csv and scores.json.",
    )
    parser.add_argument("paths", nargs="+", type=Path, help="notebooks or folders of notebooks")
    parser.add_argument("--out", type=Path, required=True, help="folder for scores.csv/.json")
    for flag, kind, default, text in (
        ("--timeout", float, DEFAULT_TIMEOUT, "seconds per submission"),
        (
            "--cell-timeout",
            float,
            None,
            "seconds one cell may run before it is stopped and skipped "
            "(default: a quarter of --timeout, at least 30)",
        ),
        ("--jobs", int, None, "submissions graded at once (default: number of cores)"),
        ("--memory-mb", int, DEFAULT_MEMORY_MB, "memory a kernel may allocate, MB"),
        ("--max-output-kb", int, DEFAULT_MAX_OUTPUT_KB, "output kept per cell, KB"),
        ("--seed", int, None, "seed for the hidden inputs (default: a fresh secret one)"),
    ):
        text += f" (default {default:g})" if default else ""
        parser.add_argument(flag, type=kind, default=default, help=text)
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="grade on a Ray cluster (its address, or 'auto' for the one this machine is in): "
        "each notebook in a Ray task of its own; needs the [ray] extra",
    )
    args = parser.parse_args(argv)
    if args.cell_timeout is not None and not 0 < args.cell_timeout <= args.timeout:
        parser.error(
            f"--cell-timeout must be positive and at most --timeout ({args.timeout:g} s), "
            f"got {args.cell_timeout:g}"
        )
    options = vars(args)  # every other option is a keyword of grade(), under the same name
    paths, out = options.pop("paths"), options.pop("out")
    try:
        grade(paths, out, **options)
    except (FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"\nstopped: the notebooks graded so far are saved in {out / 'submissions'}; run the "
            "same command again to grade the others (scores.csv is written when all are done)",
            file=sys.stderr,
        )
        return 130
    print(
        f"wrote {out / 'scores.csv'} (one row per learner), {out / 'learners.json'} and "
        f"{out / 'scores.json'} (one row per submission)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
