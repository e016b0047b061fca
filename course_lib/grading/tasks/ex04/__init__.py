"""ex04, positional encoding: the sinusoidal table, a shift as a rotation, and RoPE.

The four tasks share one source of wrong frequencies, `_frequencies(d, mistake)`: a frequency
formula slightly off is the same slip in the table, the shift matrix and both RoPE layouts.
One module per task, imported (so registered) in the order of the exercise notebook.
"""

import importlib

TASKS = (
    "sinusoidal_positional_encoding",
    "relative_shift_matrix",
    "apply_rope",
    "apply_rope_half",
)

for _module in TASKS:
    importlib.import_module(f"{__name__}.{_module}")

from ._rope import _rope_variant  # noqa: E402  (tests/test_transfer_tasks.py builds slips with it)

__all__ = ["TASKS", "_rope_variant"]
