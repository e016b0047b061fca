"""A Gradescope autograder for any exercise sets of the course.

Build the zip to upload as an assignment's autograder (here: exercise sets 02 and 03):

    python -m course_lib.grading.gradescope build ex02 ex03 --zip autograder.zip

Gradescope's documented layout (gradescope-autograders.readthedocs.io, "Autograder
Specifications"): the zip's root holds `setup.sh`, run once as root when the image is built,
and `run_autograder`, run for every submission with the working directory `/autograder`; the
zip is extracted to `/autograder/source`, the learner's files are in `/autograder/submission`,
and `run_autograder` must write `/autograder/results/results.json`. Ours:

- `setup.sh` makes a virtual environment in /autograder/venv with PyTorch 2.13.0's CPU build
  and the course, from the copy of `course_lib` inside the zip (the grader that built the zip);
- `run_autograder` runs `python -m course_lib.grading.gradescope run`, which grades every
  notebook in the submission with the batch grader (its own kernel, time, memory and output
  limits, hidden inputs from a fresh secret seed) and writes one test per task of the chosen
  sets: name, score, max_score, status, output (the task's feedback), visibility. A task of a
  set the learner did not hand in scores 0 and says so. `AUTOGRADER_ROOT` (default
  /autograder) and `AUTOGRADER_PYTHON` let it run outside Gradescope's container, as the tests do.
"""

from __future__ import annotations

import argparse
import json
import shutil
import stat
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from . import core
from .learners import best_row, zero_task

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")  # Gradescope's values
TORCH = "torch==2.13.0"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
CONFIG = "autograder.json"  # inside the zip, next to the course

SETUP_SH = f"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image.
set -euo pipefail
apt-get install -y -qq python3 python3-venv python3-pip >/dev/null
python3 -m venv /autograder/venv
# PyTorch's CPU build, pinned: a few hundred MB instead of the CUDA build's gigabytes.
/autograder/venv/bin/pip install --quiet {TORCH} --index-url {TORCH_INDEX}
/autograder/venv/bin/pip install --quiet /autograder/source/course
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission; it writes results/results.json.
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
cd "$ROOT" && exec "$PYTHON" -m course_lib.grading.gradescope run --root "$ROOT"
"""


def _check_sets(exercises: list[str]) -> list[str]:
    known = sorted({t.id.split(".")[0] for t in core.all_tasks()})
    wrong = [e for e in exercises if e not in known]
    if not exercises or wrong:
        raise ValueError(
            f"exercises must be one or more of {', '.join(known)}; got {', '.join(wrong) or 'none'}"
        )
    return list(dict.fromkeys(exercises))


def build(
    exercises: list[str],
    zip_path: Path,
    *,
    visibility: str = "visible",
    timeout: float = 300.0,
    seed: int | None = None,
) -> Path:
    """Write the autograder zip for `exercises` (e.g. ["ex02", "ex03"]) to `zip_path`."""
    exercises = _check_sets(exercises)
    if visibility not in VISIBILITIES:
        raise ValueError(f"visibility must be one of {', '.join(VISIBILITIES)}, got {visibility!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    config = {"exercises": exercises, "visibility": visibility, "timeout": timeout, "seed": seed}
    package = Path(__file__).resolve().parents[1]  # course_lib/
    root = package.parent
    zip_path = Path(zip_path)
    zip_path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER)):
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 | stat.S_IFREG) << 16
            z.writestr(info, text)
        z.writestr(CONFIG, json.dumps(config, indent=2) + "\n")
        for f in sorted(package.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                z.write(f, f"course/{f.relative_to(root)}")
        z.write(root / "pyproject.toml", "course/pyproject.toml")
        z.writestr("course/README.md", "The course's code, installed by setup.sh.\n")
    return zip_path


# --------------------------------------------------------------------------------------------
# Inside Gradescope's container
# --------------------------------------------------------------------------------------------


def results(rows: list[dict], exercises: list[str], visibility: str, seconds: float) -> dict:
    """Gradescope's results.json for one submission's graded notebooks (scores.json rows)."""
    tests, notes = [], []
    for exercise in exercises:
        rows_of_set, best = best_row(rows, exercise)
        if len(rows_of_set) > 1:
            notes.append(
                f"{exercise}: {len(rows_of_set)} notebooks were handed in; "
                f"the better one, {best['submission']}, counts."
            )
        for task in core.tasks_for(exercise):
            if best is None:
                graded = zero_task(
                    task.points, f"no notebook of {exercise} was found in the submission"
                )
            else:
                graded = best["tasks"].get(task.id) or zero_task(task.points, "not graded")
            passed = graded["score"] >= graded["max_score"]
            tests.append(
                {
                    "name": task.id,
                    "score": graded["score"],
                    "max_score": graded["max_score"],
                    "status": "passed" if passed else "failed",
                    "output": graded["feedback"],
                    "visibility": visibility,
                }
            )
        if best is not None and best.get("error"):
            notes.append(f"{best['submission']}: {best['error']}")
    notes += [f"{r['submission']}: {r['error']}" for r in rows if not r["tasks"] and r.get("error")]
    summary = f"graded: {', '.join(exercises)}. {core.SCORE_NOTE}"
    return {
        "score": round(sum(t["score"] for t in tests), 4),
        "execution_time": round(seconds),
        "output": "\n".join([*notes, summary]),
        "visibility": visibility,
        "tests": tests,
    }


def run(root: Path) -> dict:
    """Grade `root`/submission and write `root`/results/results.json; return what it wrote."""
    from .batch import grade

    start = time.monotonic()
    config = json.loads((root / "source" / CONFIG).read_text())
    with tempfile.TemporaryDirectory(prefix="course-gradescope-") as tmp:
        shown = Path(tmp) / "submission"  # the names the learner sees are relative to it
        shutil.copytree(root / "submission", shown)
        rows = grade(
            [shown],
            None,
            timeout=float(config["timeout"]),
            jobs=1,
            seed=config.get("seed"),
            quiet=True,
        )
    for row in rows:
        row["submission"] = str(Path(row["submission"]).relative_to(shown))
    result = results(rows, config["exercises"], config["visibility"], time.monotonic() - start)
    (root / "results").mkdir(parents=True, exist_ok=True)
    (root / "results" / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"score": result["score"], "tests": len(result["tests"])}))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.grading.gradescope",
        description="Build a Gradescope autograder for exercise sets, or run it (in Gradescope).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the autograder zip to upload to Gradescope")
    b.add_argument("exercises", nargs="+", help="exercise sets, e.g. ex02 ex03")
    b.add_argument("--zip", type=Path, default=Path("autograder.zip"), help="where to write it")
    b.add_argument(
        "--visibility",
        default="visible",
        choices=VISIBILITIES,
        help="when learners see each task's feedback (default: visible)",
    )
    b.add_argument("--timeout", type=float, default=300.0, help="seconds per notebook")
    r = sub.add_parser("run", help="grade /autograder/submission (what run_autograder does)")
    r.add_argument("--root", type=Path, default=Path("/autograder"))
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            path = build(args.exercises, args.zip, visibility=args.visibility, timeout=args.timeout)
        except ValueError as e:
            parser.error(str(e))
        size = path.stat().st_size / 1e6
        print(f"wrote {path} ({size:.1f} MB): upload it as the assignment's autograder")
        return 0
    run(args.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
