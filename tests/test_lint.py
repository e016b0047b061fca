"""ruff is clean on the package, the tests, the tools, the benchmarks and the notebooks."""

import shutil
import subprocess
import sys
from pathlib import Path

from helpers import ROOT

FOLDERS = ["course_lib", "tests", "tools", "benchmarks", "notebooks", "solutions", "exercises"]


def _ruff() -> str:
    beside_python = Path(sys.executable).parent / "ruff"  # a virtual environment's own ruff
    ruff = shutil.which("ruff") or (str(beside_python) if beside_python.exists() else None)
    assert ruff, "ruff is part of the [test] extra; install it with pip install -e '.[test]'"
    return ruff


def test_ruff_format_is_clean():
    """The Python files and the notebooks' code cells are `ruff format`-clean (one layout, no
    formatting noise in diffs). Exercises are written from the solutions by
    `python tools/notebooks.py exercises`: format the solution, then write the exercise again."""
    folders = [f for f in FOLDERS if (ROOT / f).is_dir()]
    assert {"course_lib", "notebooks", "solutions", "exercises"} <= set(folders)
    proc = subprocess.run(
        [_ruff(), "format", "--check", *folders], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


def test_ruff_check_is_clean():
    ruff = _ruff()
    folders = [f for f in FOLDERS if (ROOT / f).is_dir()]
    assert "course_lib" in folders and "notebooks" in folders
    proc = subprocess.run([ruff, "check", *folders], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
