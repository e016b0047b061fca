"""Your own library: the code you write in the exercises, kept in files you can open.

A task cell whose first line is ::

    # save in mine/attention.py

is saved, every time it runs without an error, into the file ``mine/attention.py`` beside the
notebook: the part that cell wrote before is replaced, the parts of other cells stay. (Importing
this module switches the saving on; every exercise notebook does it in its first cell.)

Later exercises use your pieces instead of the course's::

    MultiHeadAttention = mine("ex03.MultiHeadAttention")

finds ``MultiHeadAttention`` in ``mine/``, runs its task's check, and returns it. When it is
missing, or does not pass its check yet, it says which exercise to finish and returns the
course's version instead, marked as *borrowed*: the notebook says so, and so does the score of
a task built from it. ``report()`` lists every piece a notebook used, yours or borrowed, and
``own_code_only()`` proves it: inside it, course_lib's model modules cannot be imported.

The folder is ``mine/`` in the notebook's working directory, or the one the environment
variable ``COURSE_MINE`` names (on Colab, a folder on your Google Drive keeps it between
sessions: see the README).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import re
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MARKER = re.compile(r"^#\s*save in mine/([A-Za-z_]\w*)\.py\s*$")

# course_lib's model modules: the capstone's GPT is built without them (`own_code_only`).
# Data, tokenizers, plots and progress bars stay available.
MODEL_MODULES = (
    "attention",
    "blocks",
    "cost",
    "cross_attention",
    "decoding",
    "efficient_attention",
    "embeddings",
    "family",
    "from_torch",
    "gpt",
    "gpt2",
    "inspection",
    "kv_cache",
    "llama",
    "masking",
    "multihead",
    "norms",
    "positional",
    "recipes",
    "sampling",
    "train",
    "translator",
)
_BLOCKED = tuple(f"course_lib.{name}" for name in MODEL_MODULES)

_HEADER = '''"""Your own code from the exercises: the cells marked `# save in mine/{name}.py`.

Edit those cells in their notebook, not this file: running a marked cell rewrites its part
below (between its ">>> cell" and "<<< cell" lines) and keeps the others. Later exercises use
these pieces through `mine("exNN.name")`, which checks them first.
"""
# ruff: noqa
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.mine import mine
'''
_SECTION = re.compile(r"^# >>> cell: (\w+)\n(.*?)^# <<< cell: \1\n", re.M | re.S)


def folder() -> Path:
    """The folder that holds your library: $COURSE_MINE, or mine/ in the working directory."""
    return Path(os.environ.get("COURSE_MINE") or Path.cwd() / "mine")


# --------------------------------------------------------------------------------------------
# Saving marked cells
# --------------------------------------------------------------------------------------------


def marked_module(source: str) -> str | None:
    """The module a cell asks to be saved in (its first non-blank line), or None."""
    for line in source.splitlines():
        if line.strip():
            match = MARKER.match(line.strip())
            return match.group(1) if match else None
    return None


def defined_names(source: str) -> list[str]:
    """The names a cell defines at its top level: functions, classes and assignments."""
    names: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names.append(leaf.id)
    return names


def sections(text: str) -> dict[str, str]:
    """{cell key: its code} of a saved module, in file order."""
    return {m.group(1): m.group(2) for m in _SECTION.finditer(text)}


def save_cell(source: str, where: str | Path | None = None) -> Path | None:
    """Save a marked cell into its module in your library; returns the file, or None when the
    cell is not marked or is not valid Python (nothing is written then)."""
    name = marked_module(source)
    if name is None:
        return None
    try:
        names = [n for n in defined_names(source) if not n.startswith("_")]
    except SyntaxError:
        return None
    if not names:
        return None
    try:
        defs = [
            node.name
            for node in ast.parse(source).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ]
    except SyntaxError:  # pragma: no cover  (parsed above)
        defs = []
    # the task's function or class is defined last (helpers come first); a cell that only
    # takes pieces from other files (X = mine(...)) is their "pieces" part
    key = defs[-1] if defs else "pieces"
    base = Path(where) if where is not None else folder()
    base.mkdir(parents=True, exist_ok=True)
    init = base / "__init__.py"
    if not init.exists():
        _write(init, '"""Your own library, written by the exercises\' marked cells."""\n')
    path = base / f"{name}.py"
    parts = sections(path.read_text()) if path.exists() else {}
    parts[key] = source.rstrip("\n") + "\n"
    body = "".join(f"\n\n# >>> cell: {k}\n{code}# <<< cell: {k}\n" for k, code in parts.items())
    _write(path, _HEADER.format(name=name) + body)
    return path


def _write(path: Path, text: str) -> None:
    """Write atomically: a notebook importing the file never reads half of it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _after_cell(result: Any) -> None:
    """IPython's post_run_cell hook: save the cell if it is marked and ran without an error."""
    info = getattr(result, "info", None)
    source = getattr(info, "raw_cell", None) or ""
    if not source or not getattr(result, "success", False) or marked_module(source) is None:
        return
    try:
        save_cell(source)
    except OSError as e:  # a read-only folder: say so, never break the notebook
        print(f"⚠️  could not save this cell in {folder()}: {e}")


def _hook_into_ipython() -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    callbacks = shell.events.callbacks.get("post_run_cell", [])
    if not any(getattr(cb, "__name__", "") == "_after_cell" for cb in callbacks):
        shell.events.register("post_run_cell", _after_cell)


# --------------------------------------------------------------------------------------------
# Using your pieces
# --------------------------------------------------------------------------------------------

_LEDGER: dict[str, dict[str, str]] = {}  # task id -> {"whose": "yours"|"borrowed", "why": ...}
_MODULES: dict[Path, tuple[tuple[int, int], types.ModuleType]] = {}
_CHECKED: dict[tuple[str, Path, tuple[int, int]], tuple[bool, str]] = {}
_depth = 0


def _load(path: Path) -> types.ModuleType:
    """Import one module of your library (again only when its file changed)."""
    stat = path.stat()
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _MODULES.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    name = f"mine.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(name)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
        raise
    _MODULES[path] = (stamp, module)
    return module


def _defines(path: Path, name: str) -> bool:
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return False
    return any(
        getattr(node, "name", None) == name
        or (
            isinstance(node, ast.Assign)
            and not _uses_mine(node.value)  # `X = mine("exNN.X")` borrows X, it is no home of X
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        )
        for node in tree.body
    )


# where the exercises save a piece, when it is not the module of its course_lib reference
_USUAL_FILE = {
    "ex05.masked_attention": "masking",
    "ex07.LayerNorm": "blocks",
    "ex09.generate": "sampling",
    "ex09.train": "train",
    "ex09.evaluate": "train",
    "ex09.gpt2_to_mine": "gpt2",
}


def _uses_mine(value: ast.expr) -> bool:
    """Whether an assigned value is a call `mine(...)`: a piece taken from another file."""
    return isinstance(value, ast.Call) and getattr(value.func, "id", None) == "mine"


def _where(task: Any) -> Path:
    """The file of your library that holds a task's piece (its usual one if none does)."""
    base = folder()
    module = _USUAL_FILE.get(task.id) or task.reference.split(".")[-2]
    usual = base / f"{module}.py"
    if usual.exists() and _defines(usual, task.name):
        return usual
    if base.is_dir():
        for path in sorted(base.glob("*.py")):
            if path.name != "__init__.py" and _defines(path, task.name):
                return path
    return usual


def _exercise(task_id: str) -> str:
    return f"exercise {task_id[2:4]}"


def mine(task_id: str) -> Any:
    """Your version of a graded piece, from your library, if it passes its check; otherwise
    the course's version, marked as borrowed. Prints which one it is.

    `task_id` is the task's id as its check cell names it, e.g. "ex03.MultiHeadAttention".
    """
    global _depth
    from .grading import check_result, get_task
    from .grading.core import TaskResult, resolve

    try:
        task = get_task(task_id)
    except KeyError as e:
        raise ValueError(
            f"mine() expects a task id such as 'ex03.MultiHeadAttention', got {task_id!r}"
        ) from e
    path = _where(task)
    shown = f"mine/{path.name}"
    own, why = None, ""
    if not path.exists() or not _defines(path, task.name):
        why = f"not written yet in {shown}"
    else:
        _depth += 1
        try:
            own = getattr(_load(path), task.name)
        except Exception as e:  # noqa: BLE001  (a learner's module may raise anything)
            why = f"{shown} raises {type(e).__name__} when imported: {str(e)[:200]}"
        finally:
            _depth -= 1
    if own is not None:
        stat = path.stat()
        key = (task_id, path, (stat.st_mtime_ns, stat.st_size))
        if key not in _CHECKED:
            result = check_result(task_id, own)
            if isinstance(result, TaskResult) and result.status == "passed":
                _CHECKED[key] = (True, "")
            elif isinstance(result, TaskResult) and result.status == "not implemented":
                _CHECKED[key] = (False, f"not written yet in {shown}")
            elif isinstance(result, TaskResult):
                _CHECKED[key] = (
                    False,
                    f"the version in {shown} does not pass its check yet ({result.status}, "
                    f"{result.passed} of {result.total} cases; its check cell gives the hint)",
                )
            else:
                _CHECKED[key] = (False, f"the version in {shown} does not pass its check yet")
        passed, why = _CHECKED[key]
        if passed:
            _LEDGER[task_id] = {"whose": "yours", "file": shown, "why": ""}
            if _depth == 0:
                print(f"✅ {task_id}: yours, from {shown}")
            return own
    _LEDGER[task_id] = {"whose": "borrowed", "file": shown, "why": why}
    if _depth == 0:
        print(
            f"⚠️  {task_id}: {why}. Finish it in {_exercise(task_id)} (run its cell and its "
            "check), then run this cell again. Until then the course's version stands in, "
            "borrowed."
        )
    return resolve(task.reference)


def ledger() -> dict[str, dict[str, str]]:
    """Every piece `mine()` has given out in this session: {task id: {"whose", "file", "why"}}."""
    return {k: dict(v) for k, v in _LEDGER.items()}


def borrowed() -> list[str]:
    """The task ids whose course version stands in for yours."""
    return sorted(k for k, v in _LEDGER.items() if v["whose"] == "borrowed")


def report() -> None:
    """Print the pieces this session used: yours or borrowed, and from which file."""
    if not _LEDGER:
        print("No piece of your library used yet.")
        return
    width = max(len(k) for k in _LEDGER)
    for task_id in sorted(_LEDGER):
        entry = _LEDGER[task_id]
        mark = "✅ yours   " if entry["whose"] == "yours" else "⚠️  borrowed"
        print(f"{task_id:<{width}}  {mark}  {entry['file']}")
    n = len(borrowed())
    tail = f", {n} borrowed." if n else "."
    print(f"{len(_LEDGER) - n} of {len(_LEDGER)} pieces are yours{tail}")


# --------------------------------------------------------------------------------------------
# Proving it: course_lib's model modules out of reach
# --------------------------------------------------------------------------------------------


def _blocked(fullname: str) -> bool:
    return any(fullname == b or fullname.startswith(b + ".") for b in _BLOCKED)


def _importer_is_course() -> bool:
    """Whether the code asking for an import is course_lib's own (a borrowed piece, or a data
    helper importing lazily) rather than yours."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<frozen") and filename != __file__:
            name = frame.f_globals.get("__name__", "")
            return name.startswith("course_lib.") and name != __name__
        frame = frame.f_back
    return False


class _Blocker:
    """A meta-path finder that refuses course_lib's model modules to everyone but course_lib."""

    def find_spec(self, fullname, path=None, target=None):
        if _blocked(fullname) and not _importer_is_course():
            raise ImportError(
                f"{fullname} is one of course_lib's model modules, out of reach inside "
                "own_code_only(): build this from your own pieces (mine(...)) instead"
            )
        return None


def course_model_objects(namespace: dict) -> list[str]:
    """The names in `namespace` bound to a function or class of course_lib's model modules."""
    found = []
    for name, value in namespace.items():
        module = getattr(value, "__module__", None) or ""
        if not name.startswith("_") and callable(value) and _blocked(module):
            found.append(f"{name} ({module})")
    return sorted(found)


@contextlib.contextmanager
def own_code_only(namespace: dict | None = None) -> Iterator[None]:
    """Inside this block course_lib's model modules cannot be imported by your code, and none is
    loaded: what runs is your library and the notebook's own code (plus any borrowed piece,
    named). On entry it prints what it found in `namespace` (by default the caller's globals)."""
    if namespace is None:
        namespace = sys._getframe(2).f_globals
    names = course_model_objects(namespace)
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("mine."):
            names += [f"{n} in {module.__name__}" for n in course_model_objects(vars(module))]
    gone = sorted(set(borrowed()) | set(names))
    yours = sum(1 for v in _LEDGER.values() if v["whose"] == "yours")
    print(
        "own_code_only: course_lib's model modules are out of reach; "
        + (f"borrowed: {', '.join(gone)}" if gone else f"borrowed: nothing ({yours} pieces yours)")
    )
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if _blocked(k)}
    package = sys.modules["course_lib"]  # `from course_lib import gpt` reads its attributes
    attributes = {n: vars(package).pop(n) for n in MODEL_MODULES if n in vars(package)}
    blocker = _Blocker()
    sys.meta_path.insert(0, blocker)
    try:
        yield
    finally:
        sys.meta_path.remove(blocker)
        for k in [k for k in sys.modules if _blocked(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
        for n in MODEL_MODULES:
            vars(package).pop(n, None)
        vars(package).update(attributes)


_hook_into_ipython()
