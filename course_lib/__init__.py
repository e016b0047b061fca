"""course_lib: the finished code of *Transformers from Scratch*.

Each module is the finished form of what one lesson builds; later lessons import it instead of
copying it. Start with `course_lib.runtime` (seeding, device, plot style).
"""

__version__ = "0.1.0"

# The one place that names the course's repository. The setup cell of every notebook, the
# "Open in Colab" links and the Binder badge are stamped from these by `tools/notebooks.py`.
REPOSITORY = "transformers-from-scratch/course"
BRANCH = "main"
REPOSITORY_URL = f"https://github.com/{REPOSITORY}"
