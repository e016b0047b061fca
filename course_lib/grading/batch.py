"""Batch grading: one command grades one notebook or folders of submitted notebooks.

    python -m course_lib.grading PATH [PATH ...] --out DIR [--timeout SECONDS]

Every submission is graded by a worker process of its own, which runs the notebook in a fresh
kernel with a time limit, a memory limit and a cap on captured output, then sends one cell per
task that runs the learner's object on hidden inputs (drawn from a seed the learner never sees)
and saves the raw outcomes. The worker, not the kernel, compares them with the references.
A submission that raises, loops, exits, kills its kernel or floods its output still gets a row,
with what it earned and the reason; the others are unaffected.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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
        # The kernel imports the same course_lib as the grader, installed or not.
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
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
    """Grade one notebook (runs in the worker process)."""
    import nbformat
    import torch

    from . import core

    result: dict[str, Any] = {"score": 0.0, "max_score": 0.0, "error": None, "tasks": {}}
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # noqa: BLE001
        result["error"] = f"not a readable notebook: {type(e).__name__}: {str(e)[:200]}"
        return result
    exercise = exercise_of(nb, path)
    tasks = core.tasks_for(exercise) if exercise else []
    if not tasks:
        result["error"] = (
            "could not tell which exercise set this notebook is (no "
            "metadata.course.exercise, no check('exNN...') call, no NN_ file name)"
        )
        return result
    result["max_score"] = sum(t.points for t in tasks)
    problems: list[str] = []
    deadline = time.monotonic() + timeout
    cell_limit = cell_timeout if cell_timeout else default_cell_timeout(timeout)

    def seconds_left() -> float:
        return min(cell_limit, deadline - time.monotonic())

    with tempfile.TemporaryDirectory(prefix="course-grading-") as tmp:
        workdir = Path(tmp)
        (workdir / "run").mkdir()
        case_files: dict[str, Path] = {}
        cases: dict[str, list] = {}
        for task in tasks:
            cases[task.id] = task.cases(torch.Generator().manual_seed(_task_seed(seed, task.id)))
            case_files[task.id] = workdir / f"{task.id}.cases.pt"
            torch.save(cases[task.id], case_files[task.id])

        code_cells = [c for c in nb.cells if c.cell_type == "code"]
        kernel = _Kernel(nb, workdir / "run", memory_mb, max_output_kb * 1024, pid_file)
        done: list[int] = []  # cells that ran to the end (they are replayed after a restart)

        def restart() -> bool:
            kernel.stop()
            if time.monotonic() > deadline:
                return False
            kernel.start()
            for j in done:
                if kernel.run(code_cells[j], j, seconds_left()) is not None:
                    return False
            return True

        try:
            kernel.start()
            alive = True
            for i, cell in enumerate(code_cells):
                left = deadline - time.monotonic()
                if left <= 0:
                    problems.append(
                        f"the time limit of {timeout:.0f} s ran out before cell {i + 1}"
                    )
                    break
                status = kernel.run(cell, i, seconds_left())
                if status is None:
                    done.append(i)
                    err = _first_error(cell)
                    if err and len(problems) < 5:
                        problems.append(f"code cell {i + 1} raised {err}")
                    continue
                what = {
                    "timeout": f"did not finish within its limit of {cell_limit:.0f} s",
                    "dead": "stopped the Python kernel (exit, crash or out of memory)",
                }
                problems.append(f"code cell {i + 1} {what.get(status, 'failed')}; it was skipped")
                if not restart():
                    alive = False
                    problems.append("could not restart the kernel within the time limit")
                    break
            if kernel.client is not None and getattr(kernel.client, "flooded", None):
                cells = ", ".join(str(i + 1) for i in sorted(kernel.client.flooded))
                problems.append(
                    f"output beyond {max_output_kb} KB per cell was dropped (cells {cells})"
                )

            for task in tasks:
                out_file = workdir / f"{task.id}.out.pt"
                run: dict | None = None
                note = None
                if alive and time.monotonic() < deadline:
                    harness_cell = nbformat.v4.new_code_cell(
                        _harness_source(task.id, case_files[task.id], out_file)
                    )
                    status = kernel.run(harness_cell, len(code_cells), seconds_left())
                    if status == "timeout":
                        note = "your code did not finish within the time limit"
                    elif status == "dead":
                        note = "your code stopped the Python kernel"
                    elif not out_file.exists():
                        note = (
                            f"the check could not run ({_first_error(harness_cell) or 'no result'})"
                        )
                    if status is not None and not restart():
                        alive = False
                else:
                    note = "not graded: the notebook ran out of time or its kernel died"
                if out_file.exists():
                    saved = torch.load(out_file, weights_only=True)
                    run = saved.get("run")
                    if run is None:
                        note = f"no `{task.name}` was defined in the notebook"
                if note and run is None:
                    r = core.judge(task, cases[task.id], None, missing=note)
                else:
                    r = core.judge(task, cases[task.id], run)
                result["tasks"][task.id] = r.as_dict()
        except Exception as e:  # noqa: BLE001
            problems.append(f"grading stopped: {type(e).__name__}: {str(e)[:300]}")
        finally:
            kernel.stop()

    for task in tasks:  # tasks never reached still get a row
        result["tasks"].setdefault(
            task.id,
            {
                "score": 0.0,
                "max_score": task.points,
                "feedback": "not graded: " + (problems[-1] if problems else ""),
            },
        )
    result["score"] = round(sum(t["score"] for t in result["tasks"].values()), 4)
    result["error"] = "; ".join(problems) or None
    return result


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
        proc = subprocess.Popen(
            [sys.executable, "-m", "course_lib.grading.batch", "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            text=True,
            env=dict(os.environ),
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
) -> list[dict]:
    """Grade notebooks; write scores.json and scores.csv to `out_dir`; return the rows."""
    submissions = collect(paths)
    if seed is None:
        seed = secrets.randbits(62)
    jobs = max(1, jobs or os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [
            pool.submit(
                _grade_in_worker,
                name,
                path,
                seed,
                timeout,
                memory_mb,
                max_output_kb,
                cell_timeout,
            )
            for name, path in submissions
        ]
        rows = [f.result() for f in futures]
    if out_dir is not None:
        write_scores(rows, out_dir)
    if not quiet:
        print(format_table(rows))
    return rows


def write_scores(rows: list[dict], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scores.json").write_text(json.dumps(rows, indent=2) + "\n")
    task_ids: list[str] = []
    for row in rows:
        task_ids += [t for t in row["tasks"] if t not in task_ids]
    with open(out_dir / "scores.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", "score", "max_score", *task_ids, "error"])
        for row in rows:
            writer.writerow(
                [
                    row["submission"],
                    row["score"],
                    row["max_score"],
                    *(row["tasks"].get(t, {}).get("score", "") for t in task_ids),
                    row["error"] or "",
                ]
            )


def format_table(rows: list[dict]) -> str:
    if not rows:
        return "no notebooks found"
    width = max(10, *(len(r["submission"]) for r in rows))
    lines = [f"{'submission':<{width}}  {'score':>11}  notes", "-" * (width + 40)]
    for r in rows:
        score = f"{r['score']:g} / {r['max_score']:g}"
        note = (r["error"] or "")[:100]
        lines.append(f"{r['submission']:<{width}}  {score:>11}  {note}")
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
    args = parser.parse_args(argv)
    if args.cell_timeout is not None and not 0 < args.cell_timeout <= args.timeout:
        parser.error(
            f"--cell-timeout must be positive and at most --timeout ({args.timeout:g} s), "
            f"got {args.cell_timeout:g}"
        )
    try:
        grade(
            args.paths,
            args.out,
            timeout=args.timeout,
            jobs=args.jobs,
            seed=args.seed,
            memory_mb=args.memory_mb,
            max_output_kb=args.max_output_kb,
            cell_timeout=args.cell_timeout,
        )
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out / 'scores.csv'} and {args.out / 'scores.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
