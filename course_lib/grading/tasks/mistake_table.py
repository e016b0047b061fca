"""A task's mistakes as data: a table of named mistakes with their hints, and one wrong
implementation, written once, that takes the mistake's name.

`mistakes_of(wrong, TABLE)` turns the table into the `(wrong implementation, hint)` pairs a
`Task.mistakes()` returns, in the table's order (the first mistake whose result matches the
learner's gives the hint). `wrong` is a function with a keyword-only `mistake` argument, or a
class with a `mistake` attribute (an nn.Module the check builds like the learner's); "" means
no mistake, the right answer. Not an exercise module, so importing it registers nothing.
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
