"""ruff is clean on the package, the tests, the tools, the benchmarks and the notebooks."""

import shutil
import subprocess

from helpers import ROOT

FOLDERS = ["course_lib", "tests", "tools", "benchmarks", "notebooks", "solutions", "exercises"]


def test_ruff_check_is_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is part of the [test] extra; install it with pip install -e '.[test]'"
    folders = [f for f in FOLDERS if (ROOT / f).is_dir()]
    assert "course_lib" in folders and "notebooks" in folders
    proc = subprocess.run([ruff, "check", *folders], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
