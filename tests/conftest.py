"""Shared test configuration."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Notebooks under tests/fixtures are inputs for the grader's tests (broken or hostile
# submissions), not notebooks for nbval to run.
collect_ignore_glob = ["fixtures/*", "offline/*"]

# The committed outputs were computed on the CPU; run the notebooks there too, so the suite
# passes unchanged on a machine with a GPU (kernels started by nbval inherit this).
os.environ.setdefault("COURSE_DEVICE", "cpu")

# One CPU thread everywhere, as the notebooks use (course_lib.runtime.set_threads says why):
# the suite's processes then never wait on a thread the system has paused, so a busy machine
# makes the suite slower, not stuck, and two test workers share the two cores cleanly.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
os.environ["COURSE_THREADS"] = "1"
import torch  # noqa: E402

torch.set_num_threads(1)

# Offline, enforced: every Python process the suite starts (nbval's kernels, the grader's
# workers and kernels, the Jupyter server of the browser test) imports tests/offline's
# sitecustomize first, which refuses any connection that would leave this machine.
# tests/test_offline.py shows a download failing under it. Installing packages is not a
# notebook's business: code that must (building the Colab stand-in) sets COURSE_OFFLINE_GUARD=0.
OFFLINE_GUARD = ROOT / "tests" / "offline"
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(OFFLINE_GUARD)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)
os.environ.setdefault("COURSE_OFFLINE_GUARD", "1")
