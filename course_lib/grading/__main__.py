"""`python -m course_lib.grading PATH [PATH ...] --out DIR [--timeout SECONDS]`."""

import sys

from .batch import main

sys.exit(main())
