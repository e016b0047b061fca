"""ruff is clean on the package, the tests, the tools and the notebooks."""

import shutil
import subprocess

from helpers import ROOT


def test_ruff_check_is_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is part of the [test] extra; install it with pip install -e '.[test]'"
    proc = subprocess.run(
        [
            ruff,
            "check",
            "course_lib",
            "tests",
            "tools",
            "benchmarks",
            "notebooks",
            "solutions",
            "exercises",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
