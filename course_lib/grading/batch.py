"""Batch grading: one command grades one notebook or folders of submitted notebooks.

    python -m course_lib.grading PATH [PATH ...] --out DIR [--timeout SECONDS] [--ray ADDRESS]

Every submission is graded by a worker process of its own, which runs the notebook in a fresh
kernel with a time limit, a memory limit and a cap on captured output, then sends one cell per
task that runs the learner's object on hidden inputs (drawn from a seed the learner never sees)
and saves the raw outcomes. The worker, not the kernel, compares them with the references.
A submission that raises, loops, exits, kills its kernel or floods its output still gets a row,
with what it earned and the reason; the others are unaffected.

DIR gets `scores.json` (one row per submission, the contract of EXERCISES.md), `scores.csv` and
`learners.json` (one row per learner: see `learners.py`), and `submissions/`, one file per graded
submission, written as soon as it is graded: a batch that was stopped and is run again with the
same DIR grades only the submissions that have no file there yet (`resume.py`).
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
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .core import SCORE_NOTE
from .resume import Store, batch_seed

DEFAULT_TIMEOUT = 300.0  # seconds per submission
DEFAULT_MEMORY_MB = 4096  # address space of a learner's kernel beyond what it starts with
DEFAULT_MAX_OUTPUT_KB = 1024  # captured output per cell
_GRACE = 60.0  # extra seconds the parent allows a worker for kernel start and judging


# --------------------------------------------------------------------------------------------
# Finding submissions and their exercise set
# --------------------------------------------------------------------------------------------


def collect(paths: list[Path]) -> list[tuple[str, Path]]:
    """(display name, path) of every notebook under the given files and folders."""
    found: list[tuple[str, Path]] = []
    for p in paths:
        if p.is_dir():
            for nb in sorted(p.rglob("*.ipynb")):
                if ".ipynb_checkpoints" not in nb.parts:
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


class _Kernel:
    """Runs cells of one notebook in a kernel it can restart after a crash or a time-out."""

    def __init__(self, nb, workdir: Path, memory_mb: int, max_output_chars: int, pid_file: Path):
        self.nb, self.workdir, self.memory_mb = nb, workdir, memory_mb
        self.max_output_chars, self.pid_file = max_output_chars, pid_file
        self.client = None

    def start(self) -> None:
        client = _capped_client_class()(
            self.nb,
            timeout=60,
            kernel_name="python3",
            allow_errors=True,
            record_timing=False,
            store_widget_state=False,
            resources={"metadata": {"path": str(self.workdir)}},
        )
        client.max_output_chars = self.max_output_chars
        client.km = client.create_kernel_manager()
        env = dict(
            os.environ,
            COURSE_DEVICE="cpu",
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            PYTHONHASHSEED="0",
            COURSE_BATCH_GRADING="1",  # long demonstrations (training runs) skip themselves
        )
        env.pop("COURSE_MINE", None)  # the learner's library is the one copied beside the notebook
        # The kernel imports the same course_lib as the grader, installed or not.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
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

    def run(self, cell, index: int, seconds: float) -> str | None:
        """Execute one cell; None if it finished, else 'timeout' or 'dead'."""
        from nbclient.exceptions import CellTimeoutError, DeadKernelError

        self.client.timeout = max(1, int(seconds))
        try:
            self.client.execute_cell(cell, index)
        except CellTimeoutError:
            return "timeout"
        except DeadKernelError:
            return "dead"
        except RuntimeError as e:  # e.g. the kernel's channels closed because it exited
            return "dead" if "kernel" in str(e).lower() else "error"
        if not self.client.kc.is_alive():
            return "dead"
        return None


def _first_error(cell) -> str | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return f"{out.get('ename')}: {str(out.get('evalue'))[:300]}"
    return None


def default_cell_timeout(timeout: float) -> float:
    """How long one cell may run: a quarter of the submission's budget, at least 30 s.

    One looping cell then leaves time for what comes after it (a restart, the other cells,
    the checks).
    """
    return max(30.0, timeout / 4)


def grade_one(
    path: Path,
    seed: int,
    timeout: float,
    memory_mb: int,
    max_output_kb: int,
    pid_file: Path,
    cell_timeout: float | None = None,
) -> dict:
    """Grade one notebook (runs in the worker process) and return its row of scores.json.

    The steps, in order: read the notebook and find its exercise set (`_prepare`); draw the
    hidden cases (`_draw_cases`); run the notebook's cells in a sandboxed kernel
    (`_Submission.run_notebook`); run each task's harness cell there to collect the raw outcomes
    (`_Submission.outcomes_of`); judge them in this process (`_judge_task`); build the row
    (`_build_row`). Whatever goes wrong, the row still has every task.
    """
    row: dict[str, Any] = {"score": 0.0, "max_score": 0.0, "error": None, "tasks": {}}
    nb, tasks, error = _prepare(path)
    if error is not None:
        row["error"] = error
        return row
    row["max_score"] = sum(t.points for t in tasks)
    deadline = time.monotonic() + timeout
    problems: list[str] = []
    results: dict[str, Any] = {}  # task id -> TaskResult, in the order the tasks were judged
    with tempfile.TemporaryDirectory(prefix="course-grading-") as tmp:
        workdir = Path(tmp)
        cases, case_files = _draw_cases(tasks, seed, workdir)
        _copy_library(path, workdir / "run")
        submission = _Submission(
            nb,
            workdir / "run",
            memory_mb=memory_mb,
            max_output_kb=max_output_kb,
            pid_file=pid_file,
            deadline=deadline,
            timeout=timeout,
            cell_timeout=cell_timeout,
            problems=problems,
        )
        try:
            submission.run_notebook()
            for task in tasks:
                run, note = submission.outcomes_of(task, case_files[task.id])
                results[task.id] = _judge_task(task, cases[task.id], run, note, results)
        except Exception as e:  # noqa: BLE001
            problems.append(f"grading stopped: {type(e).__name__}: {str(e)[:300]}")
        finally:
            submission.stop()
    return _build_row(row, tasks, results, problems)


def _copy_library(path: Path, rundir: Path) -> None:
    """The learner's own library (mine/, beside the notebook) goes with the notebook: later
    exercises import the pieces a learner wrote in earlier ones (course_lib.mine)."""
    library = path.parent / "mine"
    rundir.mkdir(parents=True, exist_ok=True)
    if library.is_dir():
        shutil.copytree(
            library, rundir / "mine", ignore=shutil.ignore_patterns("__pycache__", ".*")
        )


def _prepare(path: Path) -> tuple[Any, list, str | None]:
    """The notebook and the tasks of its exercise set, or the reason it cannot be graded."""
    import nbformat

    from . import core

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # noqa: BLE001
        return None, [], f"not a readable notebook: {type(e).__name__}: {str(e)[:200]}"
    exercise = exercise_of(nb, path)
    tasks = core.tasks_for(exercise) if exercise else []
    if not tasks:
        return (
            nb,
            [],
            (
                "could not tell which exercise set this notebook is (no "
                "metadata.course.exercise, no check('exNN...') call, no NN_ file name)"
            ),
        )
    return nb, tasks, None


def _draw_cases(tasks: list, seed: int, workdir: Path) -> tuple[dict, dict]:
    """Each task's hidden cases (a seed of its own) and the files the harness reads them from."""
    import torch

    cases: dict[str, list] = {}
    case_files: dict[str, Path] = {}
    for task in tasks:
        cases[task.id] = task.cases(torch.Generator().manual_seed(_task_seed(seed, task.id)))
        case_files[task.id] = workdir / f"{task.id}.cases.pt"
        torch.save(cases[task.id], case_files[task.id])
    return cases, case_files


class _Submission:
    """One notebook in its sandboxed kernel, within its time limits.

    `run_notebook` runs the code cells in order; a cell that times out or kills the kernel is
    skipped, and the kernel restarted with the cells that finished replayed. `outcomes_of` then
    runs one task's harness cell and reads back what it saved. What went wrong is appended to
    `problems`, in words for the row's `error`.
    """

    def __init__(
        self,
        nb,
        rundir: Path,
        *,
        memory_mb: int,
        max_output_kb: int,
        pid_file: Path,
        deadline: float,
        timeout: float,
        cell_timeout: float | None,
        problems: list[str],
    ):
        rundir.mkdir(exist_ok=True)
        self.code_cells = [c for c in nb.cells if c.cell_type == "code"]
        self.kernel = _Kernel(nb, rundir, memory_mb, max_output_kb * 1024, pid_file)
        self.deadline, self.timeout, self.max_output_kb = deadline, timeout, max_output_kb
        self.cell_limit = cell_timeout if cell_timeout else default_cell_timeout(timeout)
        self.problems = problems
        self.done: list[int] = []  # cells that ran to the end (they are replayed after a restart)
        self.alive = False

    def seconds_left(self) -> float:
        """What the next cell may take: the cell limit, or less when the deadline is closer."""
        return min(self.cell_limit, self.deadline - time.monotonic())

    def restart(self) -> bool:
        """A fresh kernel with the finished cells replayed; False when that is not possible."""
        self.kernel.stop()
        if time.monotonic() > self.deadline:
            return False
        self.kernel.start()
        for j in self.done:
            if self.kernel.run(self.code_cells[j], j, self.seconds_left()) is not None:
                return False
        return True

    def run_notebook(self) -> None:
        """Start the kernel and run every code cell, noting errors, time-outs and crashes."""
        self.kernel.start()
        self.alive = True
        for i, cell in enumerate(self.code_cells):
            if self.deadline - time.monotonic() <= 0:
                self.problems.append(
                    f"the time limit of {self.timeout:.0f} s ran out before cell {i + 1}"
                )
                break
            status = self.kernel.run(cell, i, self.seconds_left())
            if status is None:
                self.done.append(i)
                err = _first_error(cell)
                if err and len(self.problems) < 5:
                    self.problems.append(f"code cell {i + 1} raised {err}")
                continue
            what = {
                "timeout": f"did not finish within its limit of {self.cell_limit:.0f} s",
                "dead": "stopped the Python kernel (exit, crash or out of memory)",
            }
            self.problems.append(f"code cell {i + 1} {what.get(status, 'failed')}; it was skipped")
            if not self.restart():
                self.alive = False
                self.problems.append("could not restart the kernel within the time limit")
                break
        flooded = getattr(self.kernel.client, "flooded", None) if self.kernel.client else None
        if flooded:
            cells = ", ".join(str(i + 1) for i in sorted(flooded))
            self.problems.append(
                f"output beyond {self.max_output_kb} KB per cell was dropped (cells {cells})"
            )

    def outcomes_of(self, task, case_file: Path) -> tuple[dict | None, str | None]:
        """Run the task's harness cell in the kernel: (its raw outcomes or None, why none)."""
        import nbformat
        import torch

        out_file = case_file.with_name(f"{task.id}.out.pt")
        run: dict | None = None
        note = None
        if self.alive and time.monotonic() < self.deadline:
            harness_cell = nbformat.v4.new_code_cell(_harness_source(task.id, case_file, out_file))
            status = self.kernel.run(harness_cell, len(self.code_cells), self.seconds_left())
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

    def stop(self) -> None:
        self.kernel.stop()


def _judge_task(task, cases: list, run: dict | None, note: str | None, earlier: dict):
    """Compare a task's outcomes with the reference (in this process, never in the kernel).

    `earlier` holds the results of the tasks judged before, by id: when this task calls the
    learner's version of one of them (`depends_on`) and that one failed, the feedback says so.
    """
    from . import core

    if note and run is None:
        return core.judge(task, cases, None, missing=note)
    exercise = task.id.split(".")[0]
    return core.judge(task, cases, run, earlier=lambda name: earlier.get(f"{exercise}.{name}"))


def _build_row(row: dict, tasks: list, results: dict, problems: list[str]) -> dict:
    """The row of scores.json: every task (those never reached at zero), the total, the error."""
    for task_id, result in results.items():
        row["tasks"][task_id] = result.as_dict()
    for task in tasks:  # tasks never reached still get a row
        row["tasks"].setdefault(
            task.id,
            {
                "score": 0.0,
                "max_score": task.points,
                "feedback": "not graded: " + (problems[-1] if problems else ""),
            },
        )
    row["score"] = round(sum(t["score"] for t in row["tasks"].values()), 4)
    row["error"] = "; ".join(problems) or None
    return row


def _harness_source(task_id: str, cases: Path, out: Path) -> str:
    from .harness import cell_source

    return cell_source(task_id, str(cases), str(out))


def _worker_main() -> None:
    config = json.loads(sys.stdin.read())
    seed = int(config["seed"])
    result = grade_one(
        Path(config["path"]),
        seed,
        float(config["timeout"]),
        int(config["memory_mb"]),
        int(config["max_output_kb"]),
        Path(config["pid_file"]),
        config.get("cell_timeout"),
    )
    Path(config["result"]).write_text(json.dumps(result))


# --------------------------------------------------------------------------------------------
# The parent: many submissions in parallel, a table at the end
# --------------------------------------------------------------------------------------------


_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


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


def _grade_in_worker(
    name: str,
    path: Path,
    seed: int,
    timeout: float,
    memory_mb: int,
    max_output_kb: int,
    cell_timeout: float | None = None,
) -> dict:
    with tempfile.TemporaryDirectory(prefix="course-grader-") as tmp:
        result_file, pid_file = Path(tmp) / "result.json", Path(tmp) / "kernel.pids"
        config = {
            "path": str(path.resolve()),
            "seed": seed,
            "timeout": timeout,
            "memory_mb": memory_mb,
            "max_output_kb": max_output_kb,
            "cell_timeout": cell_timeout,
            "result": str(result_file),
            "pid_file": str(pid_file),
        }
        env = dict(os.environ)  # the worker imports this very course_lib, installed or not
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        proc = subprocess.Popen(
            [sys.executable, "-m", "course_lib.grading.batch", "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            text=True,
            env=env,
            preexec_fn=die_with_parent,
        )
        try:
            _, stderr = proc.communicate(json.dumps(config), timeout=timeout + _GRACE)
        except subprocess.TimeoutExpired:
            _kill_all(proc, pid_file)
            proc.communicate()
            stderr = ""
            error = f"grading did not finish within {timeout + _GRACE:.0f} s and was stopped"
        else:
            error = None
        _kill_all(proc, pid_file)  # no kernel outlives its submission
        if result_file.exists():
            result = json.loads(result_file.read_text())
        else:
            tail = (stderr or "").strip().splitlines()[-1:] or [""]
            result = {
                "score": 0.0,
                "max_score": 0.0,
                "tasks": {},
                "error": error or f"the grader's worker failed: {tail[0][:300]}",
            }
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
    from . import learners as learners_mod

    say = (lambda *a: None) if quiet else print
    given = _given(paths)
    submissions = [(name, path) for _, name, path in given]
    names = [learners_mod.learner_of(folder, path, name) for folder, name, path in given]
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
    rows: list[dict | None] = [None] * len(submissions)
    store = Store(out_dir, options) if out_dir is not None else None
    keys = [store.key(name, path) if store else "" for name, path in submissions]
    if store is not None:
        for i, key in enumerate(keys):
            rows[i] = store.load(key)
        done = sum(r is not None for r in rows)
        if done:
            say(
                f"resuming in {out_dir}: {done} of {len(rows)} submissions were graded by an "
                f"earlier run (same notebook, same options); grading the other {len(rows) - done}"
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
        jobs = max(1, jobs or os.cpu_count() or 1)

        def one(i: int) -> None:
            start = time.monotonic()
            row = _grade_in_worker(*submissions[i], **options)
            finished(i, row, time.monotonic() - start)

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for future in [pool.submit(one, i) for i in todo]:
                future.result()
    graded = [r for r in rows if r is not None]
    if out_dir is not None:
        who = [name for name, row in zip(names, rows, strict=True) if row is not None]
        write_scores(graded, out_dir, learners=who)
    if not quiet:
        print(format_table(graded))
    return graded


def _given(paths: list[Path]) -> list[tuple[Path, str, Path]]:
    """(the file or folder given, display name, path) of every notebook, in `collect`'s order."""
    return [(p, name, path) for p in paths for name, path in collect([p])]


def write_scores(rows: list[dict], out_dir: Path, learners: list[str] | None = None) -> None:
    """scores.json (per submission), and scores.csv and learners.json (per learner).

    Without `learners`, every submission is a learner of its own.
    """
    from . import learners as learners_mod

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scores.json").write_text(json.dumps(rows, indent=2) + "\n")
    if learners is None:
        learners = [row["submission"] for row in rows]
    learners_mod.write(learners_mod.by_learner(rows, learners), out_dir)


def format_table(rows: list[dict]) -> str:
    if not rows:
        return "no notebooks found"
    width = max(10, *(len(r["submission"]) for r in rows))
    lines = [f"{'submission':<{width}}  {'score':>11}  notes", "-" * (width + 40)]
    for r in rows:
        score = f"{r['score']:g} / {r['max_score']:g}"
        note = (r["error"] or "")[:100]
        lines.append(f"{r['submission']:<{width}}  {score:>11}  {note}")
    lines.append(SCORE_NOTE)
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
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds per submission (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--cell-timeout",
        type=float,
        default=None,
        help="seconds one cell may run before it is stopped and skipped "
        "(default: a quarter of --timeout, at least 30)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="submissions graded at once (default: number of cores)",
    )
    parser.add_argument(
        "--memory-mb",
        type=int,
        default=DEFAULT_MEMORY_MB,
        help=f"memory a kernel may allocate, MB (default {DEFAULT_MEMORY_MB})",
    )
    parser.add_argument(
        "--max-output-kb",
        type=int,
        default=DEFAULT_MAX_OUTPUT_KB,
        help=f"output kept per cell, KB (default {DEFAULT_MAX_OUTPUT_KB})",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed for the hidden inputs (default: a fresh secret one)",
    )
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
    print(
        f"wrote {out / 'scores.csv'} (one row per learner), {out / 'learners.json'} and "
        f"{out / 'scores.json'} (one row per submission)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
