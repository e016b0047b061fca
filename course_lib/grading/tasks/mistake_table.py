"""`mistakes_of`: a task's table of named mistakes and its one wrong implementation (see
`core.Task`) as the `(wrong implementation, hint)` pairs `Task.mistakes()` returns. `wrong` is
a function with a keyword-only `mistake` argument, or a class with a `mistake` attribute (an
nn.Module the check builds like the learner's); "" means no mistake. Not an exercise module,
so importing it registers nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["mistakes_of"]


def mistakes_of(wrong: Callable, table: dict[str, str]) -> list[tuple[Any, str]]:
    """[(wrong with one named mistake, its hint)] for every row of `table`, in order."""
    rows = []
    for name, hint in table.items():
        label = f"{wrong.__name__}_{name}"
        if isinstance(wrong, type):
            one: Any = type(label, (wrong,), {"mistake": name})
        else:
            one = functools.partial(wrong, mistake=name)
            one.__name__ = label
        rows.append((one, hint))
    return rows
