"""Shared test configuration."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Notebooks under tests/fixtures are inputs for the grader's tests (broken or hostile
# submissions), not notebooks for nbval to run.
collect_ignore_glob = ["fixtures/*"]
