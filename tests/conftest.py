"""Shared test configuration."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Notebooks under tests/fixtures are inputs for the grader's tests (broken or hostile
# submissions), not notebooks for nbval to run.
collect_ignore_glob = ["fixtures/*"]

# The committed outputs were computed on the CPU; run the notebooks there too, so the suite
# passes unchanged on a machine with a GPU (kernels started by nbval inherit this).
import os  # noqa: E402

os.environ.setdefault("COURSE_DEVICE", "cpu")
