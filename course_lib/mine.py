"""Your own library: the code you write in the exercises, kept in files you can open.

A task cell whose first line is ::

    # save in mine/attention.py

is saved, every time it runs without an error, into the file ``mine/attention.py`` beside the
notebook: the part that cell wrote before is replaced, the parts of other cells stay. (Importing
this module switches the saving on; every exercise notebook does it in its first cell, and
marked cells that ran before it, after a kernel restart, are saved then.) A cell that is not
saved says so: one that stopped with an error, or whose marker line has a typo.

Later exercises use your pieces instead of the course's::

    MultiHeadAttention = mine("ex03.MultiHeadAttention")

finds ``MultiHeadAttention`` in ``mine/``, runs its task's check, and returns it. When it is
missing, or does not pass its check yet, it says which exercise to finish and returns the
course's version instead, marked as *borrowed*: the notebook says so, and so does the score of
a task built from it. A piece of yours that uses a borrowed one (exercise 05's masked_attention
on the course's softmax) says that too, and once the earlier piece is fixed, running the cell
again takes the fix. ``report()`` lists every piece a notebook used, yours or borrowed, and
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
# a comment that looks meant as a marker but is not one: `# Save in mine/attention.py`,
# `# save in mine/attention .py`, `# save in mine/attention.py  # mine`, or not the first line
_NEAR_MARKER = re.compile(r"save\b.*\bmine\b|\bmine\s*[/\\]", re.I)

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
    named = os.environ.get("COURSE_MINE")  # "~/course/mine" is the home folder's, not ./~
    return Path(named).expanduser() if named else Path.cwd() / "mine"


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


def near_marker(source: str) -> str | None:
    """The comment line of an unmarked cell that looks meant as its marker, or None."""
    if marked_module(source) is not None:
        return None
    for line in source.splitlines():
        if line.strip().startswith("#") and _NEAR_MARKER.search(line):
            return line.strip()
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


def _public_names(source: str) -> list[str]:
    try:
        return [n for n in defined_names(source) if not n.startswith("_")]
    except SyntaxError:
        return []


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
    for other, code in list(parts.items()):  # this cell's earlier version, saved under another
        # key (its last definition was another then): it would shadow this one, or be shadowed
        if other != key and set(_public_names(code)) <= set(names):
            del parts[other]
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
    if not source:
        return
    if not getattr(result, "success", False):
        name = marked_module(source)
        if name is not None:  # the traceback shows why; say what it means for the library
            print(
                f"⚠️  this cell stopped with an error, so it was not saved: mine/{name}.py keeps "
                "the version of its last run without one. Fix the error and run it again."
            )
        return
    near = near_marker(source)
    if near is not None:
        what = "is not its first line" if MARKER.match(near) else "is not a marker"
        print(
            f"⚠️  this cell was not saved in your library: its line `{near}` {what}. To save "
            "it, make its first line exactly `# save in mine/NAME.py` (NAME as the exercise "
            "gives it), then run it again."
        )
        return
    if marked_module(source) is None:
        return
    try:
        saved = save_cell(source)
    except OSError as e:  # a read-only folder: say so, never break the notebook
        print(f"⚠️  could not save this cell in {folder()}: {e}")
        return
    if saved is None:
        print(
            "⚠️  nothing of this cell was saved in your library: it defines no function, "
            "class or name (names starting with _ are private and not saved)."
        )


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
        save_earlier_cells(shell.user_ns)


def save_earlier_cells(namespace: dict) -> list[Path]:
    """Save the marked cells that ran before saving was switched on: after a kernel restart, a
    fixed cell run before the first cell's imports. They are found by the functions and classes
    they defined in `namespace` (the notebook's), whose cells IPython keeps; returns the files."""
    import linecache

    done, saved = set(), []
    for value in list(namespace.values()):
        if isinstance(value, type):
            code = next((f.__code__ for f in _plain_functions(value)), None)
        else:
            code = getattr(value, "__code__", None)
        filename = getattr(code, "co_filename", None)
        if getattr(value, "__module__", None) != "__main__" or filename in done:
            continue
        done.add(filename)
        source = "".join(linecache.getlines(filename))
        if marked_module(source) is not None:
            with contextlib.suppress(OSError):
                path = save_cell(source)
                if path is not None:
                    saved.append(path)
    if saved:
        files = ", ".join(sorted({f"mine/{p.name}" for p in saved}))
        print(f"💾 saved in your library the marked cells that ran before this one: {files}")
    return saved


def _plain_functions(klass: type) -> list[types.FunctionType]:
    return [f for f in vars(klass).values() if isinstance(f, types.FunctionType)]


# --------------------------------------------------------------------------------------------
# Using your pieces
# --------------------------------------------------------------------------------------------

_LEDGER: dict[str, dict[str, str]] = {}  # task id -> {"whose": "yours"|"borrowed", "why": ...}
# path -> (the version it was imported at, the module, {name of a piece it took with mine():
# the borrowed pieces under it, {task id: why}}). A version is the file's stamp and those of
# the files its mine() calls read, so fixing exercise 02's softmax re-imports the masking.py
# that takes it.
_MODULES: dict[Path, tuple[tuple, types.ModuleType, dict[str, dict[str, str]]]] = {}
_CHECKED: dict[tuple[str, Path, tuple], tuple[bool, str]] = {}
_depth = 0
_importing: list[dict] = []  # one frame per module of the library being imported
_TOLD: set[Path] = set()  # the folders a missing piece's message said mine() looks in


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


def _current(version: tuple) -> bool:
    """Whether a module imported at `version` is still what its files say."""
    return all(_stamp(p) == stamp for p, stamp in version)


def _load(path: Path) -> types.ModuleType:
    """Import one module of your library (again only when its file, or a file one of its
    mine() calls reads, changed)."""
    cached = _MODULES.get(path)
    if cached is not None and _current(cached[0]):
        return cached[1]
    name = f"mine.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(name)
    sys.modules[name] = module
    frame = {"version": {path: _stamp(path)}, "borrowed": {}}
    _importing.append(frame)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
        raise
    finally:
        _importing.pop()
    _MODULES[path] = (tuple(frame["version"].items()), module, frame["borrowed"])
    return module


def _note_import(path: Path, borrowed: dict[str, dict[str, str]]) -> None:
    """Inside a module of the library being imported: it read `path` (and what that module
    read) through mine(), and took a piece, {its name: the borrowed pieces under it}."""
    if not _importing:
        return
    frame = _importing[-1]
    frame["version"].setdefault(path, _stamp(path))
    cached = _MODULES.get(path)
    if cached is not None:
        for p, stamp in cached[0]:
            frame["version"].setdefault(p, stamp)
    frame["borrowed"].update(borrowed)


def _names_used(obj: Any) -> set[str]:
    """The global names a function's or a class's own code reads."""
    from .grading.core import _code_objects

    names: set[str] = set()
    todo = list(_code_objects(obj)) if isinstance(obj, (types.FunctionType, type)) else []
    while todo:
        code = todo.pop()
        names.update(code.co_names)
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names


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


def _exercises(task_ids) -> str:
    """ "exercise 02", or "exercises 02 and 03", for these tasks."""
    numbers = sorted({task_id[2:4] for task_id in task_ids})
    if len(numbers) == 1:
        return f"exercise {numbers[0]}"
    return f"exercises {', '.join(numbers[:-1])} and {numbers[-1]}"


def _raised_at(error: BaseException, path: Path) -> str:
    """Where in a file of your library its import raised: its line, the cell whose part holds
    it, and the error (a NameError: the usual cause, a marked cell using the notebook's names)."""
    line = None
    tb = error.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    text = f": {str(error)[:200]}"
    if line is None:
        return text
    cell = None
    with contextlib.suppress(OSError):
        for number, row in enumerate(path.read_text().splitlines(), 1):
            if number > line:
                break
            if row.startswith("# >>> cell: "):
                cell = row.removeprefix("# >>> cell: ")
    where = f" (line {line}" + (f", in the part saved by the cell of `{cell}`)" if cell else ")")
    if isinstance(error, NameError):
        text += (
            ". A marked cell is saved whole, and its file knows only what it defines and "
            "imports: move a line that tries your code on the notebook's names into a cell of "
            "its own"
        )
    return where + text


def _absent(path: Path, name: str, shown: str) -> str:
    """Why your library holds no `name`: not written yet (in a file that defines other names,
    when it exists), or its file is not valid Python."""
    if not path.exists():
        if os.environ.get("COURSE_MINE_HANDED_IN") == "0":  # the batch grader's
            return "not handed in (no mine/ folder beside the notebook)"
        return f"not written yet in {shown}"
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError as e:
        return (
            f"{shown} is not valid Python (line {e.lineno}: {e.msg}), so none of it can be "
            "used: fix the file, or run its exercise's marked cells again (each rewrites its part)"
        )
    except (OSError, ValueError) as e:
        return f"{shown} cannot be read ({e})"
    names = [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and not node.name.startswith("_")
    ]
    listed = ", ".join(names[:6]) if names else "nothing"
    return (
        f"not written yet in {shown}, which defines no `{name}` (it defines {listed}; the "
        "name the check cell uses counts)"
    )


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
    own, why, under = None, "", {}
    if not path.exists() or not _defines(path, task.name):
        why = _absent(path, task.name, shown)
    else:
        _depth += 1
        try:
            own = getattr(_load(path), task.name)
        except Exception as e:  # noqa: BLE001  (a learner's module may raise anything)
            why = f"{shown} raises {type(e).__name__} when imported{_raised_at(e, path)}"
        finally:
            _depth -= 1
    if own is not None:
        version, _, took = _MODULES[path]
        key = (task_id, path, version)
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
            for name in sorted(_names_used(own) & set(took)):  # yours, on borrowed pieces
                under.update(took[name])
            _LEDGER[task_id] = {"whose": "yours", "file": shown, "why": ""}
            _note_import(path, {task.name: under})
            if _depth == 0 and under:
                ids = ", ".join(sorted(under))
                whys = "; ".join(f"{k}: {v}" for k, v in sorted(under.items()))
                print(
                    f"⚠️  {task_id}: yours, from {shown}, but it uses the course's {ids}, "
                    f"borrowed ({whys}). Finish {_exercises(under)}, then run this cell again."
                )
            elif _depth == 0:
                print(f"✅ {task_id}: yours, from {shown}")
            return own
    _LEDGER[task_id] = {"whose": "borrowed", "file": shown, "why": why}
    _note_import(path, {task.name: {task_id: why}})
    if _depth == 0:
        print(
            f"⚠️  {task_id}: {why}. Finish it in {_exercise(task_id)} (run its cell and its "
            "check), then run this cell again. Until then the course's version stands in, "
            "borrowed."
        )
        base = path.parent.resolve()
        if not path.exists() and base not in _TOLD and not os.environ.get("COURSE_BATCH_GRADING"):
            _TOLD.add(base)  # once a session: where the library was looked for
            print(
                f"   mine() looks for your library in {base}"
                + ("" if base.is_dir() else " (no such folder)")
                + (
                    ", the folder COURSE_MINE names."
                    if os.environ.get("COURSE_MINE")
                    else ", mine/ in this notebook's working folder."
                )
                + " If yours is elsewhere (another folder, your Google Drive), set COURSE_MINE "
                "to its folder before the first task, as the README says."
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
