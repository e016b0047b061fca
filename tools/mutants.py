"""Mutation testing of the grader: every small wrong variant of a solution must lose points.

    python tools/mutants.py [TASK ...] [--seed N] [--sample N] [--list-equivalent]

A maintainer's tool: it reads `solutions/`, which a learner does not have, so it lives in
`tools/`, not in the `course_lib` package learners install.

TASK is a task id (`ex05.causal_mask`) or an exercise set (`ex05`); none means every registered
task. For each task the command finds, in `solutions/`, the code cell that defines the task's
function or class, takes the learner's lines (between `### BEGIN SOLUTION` and
`### END SOLUTION`), and makes single-point mutants of them with the operators below. Each mutant
is graded in this process, like `check_result` does: first on the notebook's cases (the seed the
check cells use), then on hidden cases from `--hidden-seeds` other seeds (`--seed`, `--seed`+1,
...). A mutant is *killed* when a case fails (a wrong value, a missing or unexpected exception, a
forbidden call, or running past the time limit); otherwise it *survives*. A survivor is either
recorded in `equivalent_mutants.json` (next to this file) with a one-line reason why it behaves
like the solution under the task's contract, or it is an unexplained survivor: a wrong answer
that gets full marks, and the command exits with status 1. "Killed by the notebook check
alone" counts the mutants that a case of the notebook's seed already fails; the others were
caught only by a hidden seed: they would show ✅ in the learner's notebook and lose points in
the batch grader. The summary prints their number per set as `notebook-missed`, and any such
mutant fails the command like an unexplained survivor (the notebook must be as strict as the
grader).

Operators (each applies to one node of the learner's lines; identical mutants are made once):

    arith    a binary or augmented operator swapped: + -> -, *; - -> +; * -> /, +; / -> *, //;
             // -> /, *; % -> //; ** -> *; @ -> *; & <-> |; ^ -> |; << <-> >>
    operand  a binary operation replaced by one of its operands: `a - b` -> `a`, `b`
    swap     the operands of a non-commutative operator swapped (- / // % ** @): `a - b` -> `b - a`
    compare  < -> <=, >=; <= -> <, >; > -> >=, <=; >= -> >, <; == <-> !=; is <-> is not;
             in <-> not in
    boolop   and <-> or
    unary    a unary `not`, `~` or `-` dropped (on anything but a number)
    const    an int or float literal c (a negative literal counts as one) -> c + 1, c - 1, 0, -c,
             2c; True <-> False (`bool`)
    dim      a dimension argument (keywords dim, axis, dim0, dim1, start_dim, end_dim, and the
             positional dims of transpose, unsqueeze, sum, cat, softmax, ... see _DIM_POSITIONS):
             a literal d -> d - 1, d + 1, -1; a name or expression -> -1, 0 (dims are not also
             mutated by `const`)
    kwarg    one keyword argument dropped
    call     a method call replaced by its receiver (`x.transpose(1, 2)` -> `x`), any other call
             by its first positional argument (`math.sqrt(d)` -> `d`, `min(a, b)` -> `a`,
             `self.linear1(x)` -> `x`: calls on torch, F, nn, math and self are functions)
    twin     a function or method replaced by its twin: amax/amin, max/min, sum/mean, tril/triu,
             argmax/argmin, any/all, sin/cos, zeros/ones, zeros_like/ones_like,
             softmax/log_softmax
    stmt     a statement deleted (replaced by `pass`)

(`--operators order,regroup,arg` grades only the named operators.)

Operators that model what learners do rather than single-point slips:

    order    two neighbouring statements of one block swapped, where the order matters (one
             writes a name the other reads or writes): two right steps in the wrong order
    regroup  the same operators grouped otherwise: `a * b // c` -> `a * (b // c)` and back,
             for two operators of one family (* / // % @, or + -)
    arg      the last positional argument of a call to a function of the notebook (one the
             learner wrote, or an earlier task's) dropped: a mask, a temperature or a generator
             not passed on through a call chain (keywords: `kwarg`)

`<` vs `<=` at each comparison (`compare`) and `//` vs `/` (`arith`) are single-point operators
above. A tie broken the other way has no operator: each task builds its tie cases so that no
seed decides them (see `notebook-missed` below).

Nothing inside an f-string is mutated. Each mutant is identified by a stable one-line key,
`before -> after`: the statement that changes (the header, for an `if`/`for`/`while`), before and
after the mutation, as `ast.unparse` writes it (no comments, normalised spacing); a second mutant
of a task with the same key gets ` #2` appended, and so on. That key is what
`equivalent_mutants.json` records.

The namespace: a mutant's cell is run in a namespace made like the notebook's, by running, in
order, the top-level imports, function and class definitions, and assignments of literal values
of every earlier code cell of the solution notebook (the setup cell excepted; earlier solutions
are run as they are, since later tasks may call them). Nothing else runs: no check cells, no
plots, no training. The mutated cell itself contributes only its imports and definitions.
Assignments `X = mine("exNN.X")` (a piece of the learner's library, course_lib.mine) run too,
reading the solutions' library, solutions/mine/.

Sampling: `--sample N` grades at most N mutants per task, those with the smallest
SHA-256 of `"<seed>|<task id>|<key>"`, so a sample is the same on every run with the same seed.
Every mutant is guarded by a time limit (`--timeout`; by default the larger of 0.25 s and 20
times what the solution itself takes on the same cases); one that runs past it is killed.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import copy
import dataclasses
import difflib
import hashlib
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python tools/mutants.py` from a checkout
    sys.path.insert(0, str(ROOT))

from course_lib.grading import NOTEBOOK_SEED  # noqa: E402
from course_lib.grading.core import (  # noqa: E402
    Task,
    _judge_one,
    _outcome_of,
    _Watcher,
    all_tasks,
    get_task,
    watched_calls,
)

EQUIVALENTS_PATH = Path(__file__).resolve().parent / "equivalent_mutants.json"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
SETUP_TAG = "course-setup"
MIN_TIMEOUT = 0.25  # seconds; a looping mutant that grows a list stays under ~100 MB

# --------------------------------------------------------------------------------------------
# Operators
# --------------------------------------------------------------------------------------------

_BINOPS: dict[type, tuple[type, ...]] = {
    ast.Add: (ast.Sub, ast.Mult),
    ast.Sub: (ast.Add,),
    ast.Mult: (ast.Div, ast.Add),
    ast.Div: (ast.Mult, ast.FloorDiv),
    ast.FloorDiv: (ast.Div, ast.Mult),
    ast.Mod: (ast.FloorDiv,),
    ast.Pow: (ast.Mult,),
    ast.MatMult: (ast.Mult,),
    ast.BitAnd: (ast.BitOr,),
    ast.BitOr: (ast.BitAnd,),
    ast.BitXor: (ast.BitOr,),
    ast.LShift: (ast.RShift,),
    ast.RShift: (ast.LShift,),
}
_ORDERED = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult)  # a op b != b op a
_CMPOPS: dict[type, tuple[type, ...]] = {
    ast.Lt: (ast.LtE, ast.GtE),
    ast.LtE: (ast.Lt, ast.Gt),
    ast.Gt: (ast.GtE, ast.LtE),
    ast.GtE: (ast.Gt, ast.Lt),
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
    ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
}
_TWINS_PAIRS = [
    ("amax", "amin"),
    ("max", "min"),
    ("sum", "mean"),
    ("tril", "triu"),
    ("argmax", "argmin"),
    ("any", "all"),
    ("sin", "cos"),
    ("zeros", "ones"),
    ("zeros_like", "ones_like"),
    ("softmax", "log_softmax"),
]
_TWINS = {a: b for a, b in _TWINS_PAIRS} | {b: a for a, b in _TWINS_PAIRS}
_DIM_KEYWORDS = {"dim", "axis", "dim0", "dim1", "start_dim", "end_dim"}
# Positional dimension arguments of tensor methods (`x.sum(-1)`); as torch functions
# (`torch.sum(x, -1)`) the positions shift by one, except for functions of a sequence of tensors.
_DIM_POSITIONS: dict[str, tuple[int, ...]] = {
    **{
        name: (0,)
        for name in (
            "unsqueeze",
            "squeeze",
            "sum",
            "mean",
            "amax",
            "amin",
            "max",
            "min",
            "argmax",
            "argmin",
            "softmax",
            "log_softmax",
            "cumsum",
            "cumprod",
            "gather",
            "scatter",
            "scatter_add",
            "var",
            "std",
            "sort",
            "argsort",
            "any",
            "all",
            "prod",
            "logsumexp",
            "select",
            "narrow",
            "index_select",
            "flip",
            "count_nonzero",
            "nansum",
            "median",
        )
    },
    "transpose": (0, 1),
    "swapaxes": (0, 1),
    "movedim": (0, 1),
    "flatten": (0, 1),
    "topk": (1,),
    "chunk": (1,),
    "split": (1,),
    "repeat_interleave": (1,),
    "roll": (1,),
    "unflatten": (0,),
}
_SEQUENCE_FUNCTIONS = {"cat": (1,), "concat": (1,), "stack": (1,)}
_MODULE_NAMES = {"torch", "F", "nn", "math", "np", "functional"}
_FAMILIES = (
    (ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.MatMult),
    (ast.Add, ast.Sub),
)
_BUILTINS = set(dir(builtins))


@dataclasses.dataclass
class Mutant:
    op: str
    index: int  # position of the mutated node in the walk of the cell's AST
    new: ast.AST  # the node that replaces it
    key: str = ""
    diff: str = ""
    source: str = ""


def _number(node: ast.AST) -> float | int | None:
    """The value of an int or float literal, a negative one included; None otherwise."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = node.operand
        if isinstance(inner, ast.Constant) and type(inner.value) in (int, float):
            return -inner.value
    return None


def _literal(value: float | int) -> ast.expr:
    if value < 0:
        return ast.UnaryOp(ast.USub(), ast.Constant(-value))
    return ast.Constant(value)


def _constant_variants(value: float | int) -> list[float | int]:
    out: list[float | int] = []
    for v in (value + 1, value - 1, type(value)(0), -value, 2 * value):
        if v != value and v not in out:
            out.append(v)
    return out


def _is_module_like(node: ast.AST) -> bool:
    """`torch`, `F`, `torch.nn.functional`, `self`, `super()`: receivers that are not values."""
    if isinstance(node, ast.Name):
        return node.id in _MODULE_NAMES or node.id == "self"
    if isinstance(node, ast.Attribute):
        return _is_module_like(node.value) and not (
            isinstance(node.value, ast.Name) and node.value.id == "self"
        )
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id == "super"
    return False


def _dim_positions(call: ast.Call) -> tuple[int, ...]:
    func = call.func
    if isinstance(func, ast.Attribute):
        name = func.attr
        if _is_module_like(func.value):  # torch.sum(x, -1), torch.cat([a, b], 1)
            if name in _SEQUENCE_FUNCTIONS:
                return _SEQUENCE_FUNCTIONS[name]
            return tuple(p + 1 for p in _DIM_POSITIONS.get(name, ()))
        return _DIM_POSITIONS.get(name, ())
    return ()


def _dim_arguments(call: ast.Call) -> list[tuple[str, int | str]]:
    """The dimension arguments of a call: ("arg", position) or ("kw", name)."""
    found: list[tuple[str, int | str]] = []
    for pos in _dim_positions(call):
        if pos < len(call.args) and not isinstance(call.args[pos], ast.Starred):
            found.append(("arg", pos))
    for kw in call.keywords:
        if kw.arg in _DIM_KEYWORDS:
            found.append(("kw", kw.arg))
    return found


def _dim_variants(node: ast.expr) -> list[ast.expr]:
    value = _number(node)
    if isinstance(value, int):
        return [_literal(v) for v in dict.fromkeys((value - 1, value + 1, -1)) if v != value]
    return [_literal(-1), ast.Constant(0)]


def _family(op: ast.operator) -> int | None:
    return next((i for i, ops in enumerate(_FAMILIES) if isinstance(op, ops)), None)


def _regrouped(node: ast.BinOp) -> Iterator[tuple[str, ast.AST]]:
    """`(a op1 b) op2 c` <-> `a op1 (b op2 c)` for two operators of one family."""
    family = _family(node.op)
    if family is None:
        return
    left, right = node.left, node.right
    if isinstance(left, ast.BinOp) and _family(left.op) == family:  # (a op1 b) op2 c
        inner = ast.BinOp(copy.deepcopy(left.right), node.op.__class__(), copy.deepcopy(right))
        yield "regroup", ast.BinOp(copy.deepcopy(left.left), left.op.__class__(), inner)
    if isinstance(right, ast.BinOp) and _family(right.op) == family:  # a op1 (b op2 c)
        inner = ast.BinOp(copy.deepcopy(left), node.op.__class__(), copy.deepcopy(right.left))
        yield "regroup", ast.BinOp(inner, right.op.__class__(), copy.deepcopy(right.right))


def _writes(stmt: ast.stmt) -> set[str]:
    """What a statement assigns: a name, or an element or attribute by its text (`pe[:, 0::2]`,
    `self.q_proj`), so writes to two different parts of one object are independent."""
    found = set()
    for node in ast.walk(stmt):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
                    found.add(t.id)
                elif isinstance(t, (ast.Subscript, ast.Attribute)) and isinstance(t.ctx, ast.Store):
                    found.add(ast.unparse(t))
    return found


def _reads(stmt: ast.stmt) -> set[str]:
    """The names a statement reads, and the attributes and elements it reads by their text."""
    found = set()
    for node in ast.walk(stmt):
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and isinstance(
            node.ctx, ast.Load
        ):
            found.add(node.id if isinstance(node, ast.Name) else ast.unparse(node))
    return found


def _order_matters(a: ast.stmt, b: ast.stmt) -> bool:
    """True when swapping the neighbouring statements a, b can change what runs: one writes a
    name the other reads or writes, or one of them leaves the block (return, raise, ...)."""
    if any(isinstance(s, (ast.Return, ast.Raise, ast.Break, ast.Continue)) for s in (a, b)):
        return True
    wa, wb, ra, rb = _writes(a), _writes(b), _reads(a), _reads(b)
    return bool(wa & (rb | wb) or wb & ra)


def _mutations(node: ast.AST, dims: set[int]) -> Iterator[tuple[str, ast.AST]]:
    """(operator, replacement node) for one node of the learner's lines."""
    if isinstance(node, ast.BinOp):
        yield from _regrouped(node)
        for op in _BINOPS.get(type(node.op), ()):
            new = copy.deepcopy(node)
            new.op = op()
            yield "arith", new
        yield "operand", copy.deepcopy(node.left)
        yield "operand", copy.deepcopy(node.right)
        if isinstance(node.op, _ORDERED):
            yield (
                "swap",
                ast.BinOp(copy.deepcopy(node.right), node.op.__class__(), copy.deepcopy(node.left)),
            )
    elif isinstance(node, ast.AugAssign):
        for op in _BINOPS.get(type(node.op), ()):
            new = copy.deepcopy(node)
            new.op = op()
            yield "arith", new
    elif isinstance(node, ast.Compare):
        for i, cmp in enumerate(node.ops):
            for op in _CMPOPS.get(type(cmp), ()):
                new = copy.deepcopy(node)
                new.ops[i] = op()
                yield "compare", new
    elif isinstance(node, ast.BoolOp):
        new = copy.deepcopy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "boolop", new
    elif isinstance(node, ast.UnaryOp) and _number(node) is None:
        if isinstance(node.op, (ast.Not, ast.Invert, ast.USub)):
            yield "unary", copy.deepcopy(node.operand)

    value = _number(node)
    if id(node) in dims:
        for new in _dim_variants(node):
            yield "dim", new
    elif value is not None:
        for v in _constant_variants(value):
            yield "const", _literal(v)
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield "bool", ast.Constant(not node.value)

    if isinstance(node, ast.Call):
        for i, kw in enumerate(node.keywords):
            if kw.arg is None:
                continue
            new = copy.deepcopy(node)
            del new.keywords[i]
            yield "kwarg", new
            if kw.arg in _DIM_KEYWORDS:
                # A dim given as a name: mutate the value in place (a literal is its own node).
                if _number(kw.value) is None:
                    for variant in _dim_variants(kw.value):
                        new = copy.deepcopy(node)
                        new.keywords[i].value = variant
                        yield "dim", new
        func = node.func
        if isinstance(func, ast.Attribute) and not _is_module_like(func.value):
            yield "call", copy.deepcopy(func.value)
        elif node.args and not isinstance(node.args[0], ast.Starred):
            yield "call", copy.deepcopy(node.args[0])
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if (
            isinstance(func, ast.Name)
            and name not in _BUILTINS
            and name not in _MODULE_NAMES
            and len(node.args) >= 2
            and not any(isinstance(a, ast.Starred) for a in node.args)
        ):  # the notebook's own function: its last argument not passed on
            new = copy.deepcopy(node)
            del new.args[-1]
            yield "arg", new
        if name in _TWINS:
            new = copy.deepcopy(node)
            if isinstance(func, ast.Attribute):
                new.func.attr = _TWINS[name]
            else:
                new.func.id = _TWINS[name]
            yield "twin", new
        for pos in _dim_positions(node):
            if (
                pos < len(node.args)
                and _number(node.args[pos]) is None
                and not isinstance(node.args[pos], ast.Starred)
            ):
                for variant in _dim_variants(node.args[pos]):
                    new = copy.deepcopy(node)
                    new.args[pos] = variant
                    yield "dim", new

    if isinstance(node, ast.stmt) and not isinstance(node, ast.Pass):
        yield "stmt", ast.Pass()


# --------------------------------------------------------------------------------------------
# Reading the solution notebooks
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class SolutionCell:
    notebook: Path
    index: int  # the cell's position in the notebook
    source: str
    tree: ast.Module
    learner_lines: list[tuple[int, int]]  # 1-based inclusive line ranges between the markers
    earlier: list[tuple[str, str]]  # (name, source) of the earlier code cells


def _marker_ranges(source: str) -> list[tuple[int, int]]:
    ranges, start = [], None
    for number, line in enumerate(source.splitlines(), 1):
        if line.strip() == BEGIN:
            start = number + 1
        elif line.strip() == END and start is not None:
            if number - 1 >= start:
                ranges.append((start, number - 1))
            start = None
    return ranges


def _exercise_of(nb: dict, path: Path) -> str:
    course = nb.get("metadata", {}).get("course", {})
    if isinstance(course, dict) and course.get("exercise"):
        return str(course["exercise"])
    return "ex" + path.name[:2]


def _defined_names(tree: ast.Module) -> set[str]:
    return {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.ClassDef))}


def find_solution(task: Task, root: Path = ROOT) -> SolutionCell:
    """The solution cell that defines `task`'s function or class, with its notebook's prefix."""
    exercise = task.id.split(".")[0]
    notebooks = []
    for path in sorted((root / "solutions").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        if _exercise_of(nb, path) == exercise:
            notebooks.append((path, nb))
    if not notebooks:
        raise LookupError(f"no notebook of exercise set {exercise} in {root / 'solutions'}")
    for path, nb in notebooks:
        earlier: list[tuple[str, str]] = []
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            if SETUP_TAG in cell.get("metadata", {}).get("tags", []):
                continue
            try:
                tree = ast.parse(source)
            except SyntaxError:
                earlier.append((f"<{path.name} cell {i}>", ""))
                continue
            if task.name in _defined_names(tree) and BEGIN in source:
                ranges = _marker_ranges(source)
                if not ranges:
                    raise LookupError(f"{path.name} cell {i} has no lines between the markers")
                return SolutionCell(path, i, source, tree, ranges, earlier)
            earlier.append((f"<{path.name} cell {i}>", source))
    names = ", ".join(p.name for p, _ in notebooks)
    raise LookupError(f"no solution cell defines `{task.name}` in {names}")


def _definitions_only(tree: ast.Module) -> ast.Module:
    """The imports, definitions and literal assignments of a cell: what a namespace needs."""
    keep = []
    for stmt in tree.body:
        if isinstance(
            stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ):
            keep.append(stmt)
        elif isinstance(stmt, ast.Assign) and _takes_from_library(stmt.value):
            keep.append(stmt)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            try:
                ast.literal_eval(stmt.value)
            except ValueError:
                continue
            keep.append(stmt)
    return ast.Module(body=keep, type_ignores=[])


def _takes_from_library(value: ast.expr) -> bool:
    """`mine("exNN.name")`: a piece of the learner's library (course_lib.mine)."""
    return isinstance(value, ast.Call) and getattr(value.func, "id", None) == "mine"


@contextlib.contextmanager
def _solutions_library() -> Iterator[None]:
    """While a cell's definitions run, `mine(...)` reads solutions/mine/ (unless COURSE_MINE
    names another folder) and its "yours, from mine/..." lines stay out of the report."""
    before = os.environ.get("COURSE_MINE")
    if before is None:
        os.environ["COURSE_MINE"] = str(ROOT / "solutions" / "mine")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        if before is None:
            os.environ.pop("COURSE_MINE", None)


def base_namespace(cell: SolutionCell) -> dict:
    namespace: dict = {"__name__": "__mutant__"}
    for name, source in cell.earlier:
        if not source:
            continue
        code = compile(_definitions_only(ast.parse(source)), name, "exec")
        with _solutions_library():
            exec(code, namespace)  # noqa: S102  (the course's own solution notebooks)
    return namespace


# --------------------------------------------------------------------------------------------
# Making the mutants
# --------------------------------------------------------------------------------------------


def _in_learner_lines(node: ast.AST, ranges: list[tuple[int, int]]) -> bool:
    start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
    return start is not None and any(a <= start and end <= b for a, b in ranges)


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _replace(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, new)
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return
    raise ValueError("node not found in its parent")


def _header(stmt: ast.stmt) -> str:
    """One line for a statement: a compound statement by its header only."""
    if isinstance(stmt, (ast.If, ast.While)):
        word = "if" if isinstance(stmt, ast.If) else "while"
        return f"{word} {ast.unparse(stmt.test)}:"
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return f"for {ast.unparse(stmt.target)} in {ast.unparse(stmt.iter)}:"
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return f"with {', '.join(ast.unparse(i) for i in stmt.items)}:"
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"def {stmt.name}({ast.unparse(stmt.args)}):"
    if isinstance(stmt, ast.ClassDef):
        return f"class {stmt.name}:"
    if isinstance(stmt, ast.Try):
        return "try:"
    return ast.unparse(stmt)


def _splice(source: str, node: ast.AST, text: str) -> str:
    """`source` with `node`'s text replaced by `text`, comments and layout elsewhere kept."""
    lines = source.splitlines(keepends=True)
    first, last = node.lineno - 1, node.end_lineno - 1
    head = lines[first].encode()[: node.col_offset].decode()
    tail = lines[last].encode()[node.end_col_offset :].decode()
    return "".join(lines[:first]) + head + text + tail + "".join(lines[last + 1 :])


def make_mutants(cell: SolutionCell) -> list[Mutant]:
    tree = cell.tree
    nodes = list(ast.walk(tree))
    parents = _parents(tree)
    skip: set[int] = set()
    dims: set[int] = set()
    for node in nodes:
        if isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node):
            skip.update(id(n) for n in ast.walk(node.body[0]))
        if _number(node) is not None and isinstance(node, ast.UnaryOp):
            skip.add(id(node.operand))  # -1 is one literal, not a minus and a 1
        if isinstance(node, ast.Call):
            for kind, where in _dim_arguments(node):
                arg = (
                    node.args[where]
                    if kind == "arg"
                    else next(k.value for k in node.keywords if k.arg == where)
                )
                dims.add(id(arg))
    mutants: list[Mutant] = []
    seen: set[tuple[int, str]] = set()
    keys: dict[str, int] = {}
    for index, node in enumerate(nodes):
        if id(node) in skip or not _in_learner_lines(node, cell.learner_lines):
            continue
        if isinstance(node, ast.expr_context) or not hasattr(node, "lineno"):
            continue
        for op, new in _mutations(node, dims):
            ident = (index, ast.dump(new))
            if ast.dump(new) == ast.dump(node) or ident in seen:
                continue
            seen.add(ident)
            mutant = Mutant(op, index, new)
            _describe(cell, nodes, parents, mutant)
            count = keys.get(mutant.key, 0) + 1
            keys[mutant.key] = count
            if count > 1:
                mutant.key += f" #{count}"
            mutants.append(mutant)
    for index, node in enumerate(nodes):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list) or id(node) in skip:
                continue
            for i in range(len(block) - 1):
                a, b = block[i], block[i + 1]
                inside = all(_in_learner_lines(s, cell.learner_lines) for s in (a, b))
                if not inside or not _order_matters(a, b) or id(a) in skip or id(b) in skip:
                    continue
                new = copy.deepcopy(node)
                swapped = getattr(new, field)
                swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
                mutant = Mutant("order", index, new)
                _describe_order(cell, a, b, mutant)
                count = keys.get(mutant.key, 0) + 1
                keys[mutant.key] = count
                if count > 1:
                    mutant.key += f" #{count}"
                mutants.append(mutant)
    return mutants


def _describe_order(cell: SolutionCell, a: ast.stmt, b: ast.stmt, mutant: Mutant) -> None:
    """Key, text and diff of two neighbouring statements swapped: their lines trade places,
    comments and layout kept."""
    mutant.key = f"{_header(a)}; {_header(b)} -> {_header(b)}; {_header(a)}"
    lines = cell.source.splitlines(keepends=True)
    first_a, last_a = a.lineno - 1, a.end_lineno
    first_b, last_b = b.lineno - 1, b.end_lineno
    swapped = (
        lines[:first_a] + lines[first_b:last_b] + lines[last_a:first_b] + lines[first_a:last_a]
    )
    mutant.source = "".join(swapped + lines[last_b:])
    learner = [ln for lo, hi in cell.learner_lines for ln in range(lo - 1, hi)]
    before = [cell.source.splitlines()[i] for i in learner]
    after = [mutant.source.splitlines()[i] for i in learner]
    mutant.diff = "".join(
        line if line.endswith("\n") else line + "\n"
        for line in difflib.unified_diff(before, after, "solution", "mutant", n=1, lineterm="")
    )


def _statement_of(node: ast.AST, parents: dict[int, ast.AST]) -> ast.stmt:
    while not isinstance(node, ast.stmt):
        node = parents[id(node)]
    return node


def _swapped(nodes: list[ast.AST], parents: dict[int, ast.AST], mutant: Mutant):
    """(the original node, put, take): put the mutant into the cell's tree, take it out again."""
    old = nodes[mutant.index]
    parent = parents[id(old)]
    ast.copy_location(mutant.new, old)

    def put():
        _replace(parent, old, mutant.new)

    def take():
        _replace(parent, mutant.new, old)

    return old, put, take


def _describe(
    cell: SolutionCell, nodes: list[ast.AST], parents: dict[int, ast.AST], mutant: Mutant
) -> None:
    old, put, take = _swapped(nodes, parents, mutant)
    if isinstance(old, ast.stmt):  # a statement deleted (or an augmented assignment changed)
        before, after = _header(old), _header(mutant.new)
        if before != ast.unparse(old):
            before += " ..."
        put()
        try:
            mutated = ast.dump(cell.tree)
        finally:
            take()
    else:
        stmt = _statement_of(old, parents)
        before = _header(stmt)
        put()
        try:
            after = _header(stmt)
            mutated = ast.dump(cell.tree)
        finally:
            take()
    mutant.key = f"{before} -> {after}"
    text = ast.unparse(mutant.new)
    candidates = [text, f"({text})"]  # parentheses only where precedence needs them
    if isinstance(old, ast.If) and isinstance(mutant.new, ast.stmt):  # an `elif` deleted:
        candidates.append(f"else:\n{' ' * (old.col_offset + 4)}{text}")  # its branch kept empty
    for candidate in candidates:
        mutant.source = _splice(cell.source, old, candidate)
        try:
            if ast.dump(ast.parse(mutant.source)) == mutated:  # the diff shown is what runs
                break
        except SyntaxError:
            pass
    else:
        raise AssertionError(f"internal error: no text for the mutant {mutant.key!r}")
    a = [ln for lo, hi in cell.learner_lines for ln in cell.source.splitlines()[lo - 1 : hi]]
    b_lines = mutant.source.splitlines()
    shift = len(b_lines) - len(cell.source.splitlines())
    b = [ln for lo, hi in _shifted(cell.learner_lines, old, shift) for ln in b_lines[lo - 1 : hi]]
    mutant.diff = "".join(
        line if line.endswith("\n") else line + "\n"
        for line in difflib.unified_diff(a, b, "solution", "mutant", n=1, lineterm="")
    )


def _shifted(ranges, node, shift):
    out = []
    for lo, hi in ranges:
        if lo <= node.lineno <= hi:
            out.append((lo, hi + shift))
        elif lo > node.lineno:
            out.append((lo + shift, hi + shift))
        else:
            out.append((lo, hi))
    return out


def mutant_namespace(cell: SolutionCell, base: dict, mutant: Mutant | None) -> dict:
    """Run the (mutated) cell's definitions in a copy of the notebook's namespace."""
    tree = cell.tree
    nodes = list(ast.walk(tree))
    parents = _parents(tree)
    if mutant is None:
        module = _definitions_only(tree)
        code = compile(
            ast.fix_missing_locations(module), f"<solution {cell.notebook.name}>", "exec"
        )
    else:
        _, put, take = _swapped(nodes, parents, mutant)
        put()
        try:
            module = _definitions_only(copy.deepcopy(tree))
        finally:
            take()
        code = compile(ast.fix_missing_locations(module), "<mutant>", "exec")
    namespace = dict(base)
    with _solutions_library():
        exec(code, namespace)  # noqa: S102
    return namespace


# --------------------------------------------------------------------------------------------
# Grading a mutant
# --------------------------------------------------------------------------------------------


class _Timeout(BaseException):
    """A BaseException, so that no `except Exception` in a task's or a mutant's code (a second
    call made to test for state kept between calls) swallows it and runs on unguarded."""


class _NoHints:
    """The task as `_judge_one` sees it, with the reference values computed once and no hints
    (a hint only changes the message, and mutants need only pass or fail)."""

    def __init__(self, task: Task, wants: dict[int, Any]):
        self._task, self._wants = task, wants

    def __getattr__(self, name):
        return getattr(self._task, name)

    def expected(self, case):
        return self._wants[id(case)]

    def mistakes(self):
        return []

    def diagnose(self, got, want, case):
        return None


@dataclasses.dataclass
class Suite:
    """The cases of one seed, with the reference's values."""

    seed: int
    cases: list
    wants: dict[int, Any]


def make_suite(task: Task, seed: int) -> Suite:
    from course_lib.grading.core import _plain

    torch.manual_seed(0)
    cases = task.cases(torch.Generator().manual_seed(seed))
    wants = {id(c): None if c.raises else _plain(task.expected(c)) for c in cases}
    return Suite(seed, cases, wants)


def first_failure(task: Task, obj: Any, suite: Suite) -> str | None:
    """None when `obj` passes every case of the suite, else why the first failing case fails."""
    judge = _NoHints(task, suite.wants)
    watcher = _Watcher(watched_calls(task))
    for case in suite.cases:
        run = copy.deepcopy(case)  # a mutant may write into its inputs: the suite's stay intact
        judge._wants[id(run)] = suite.wants[id(case)]
        try:
            with watcher:
                outcome = _outcome_of(lambda run=run: task.call(obj, run))
            if watcher.seen:
                bad = [n for n in watcher.seen if n in task.forbidden or n == task.reference]
                if bad:
                    return f"calls {', '.join(bad)}"
            if outcome.get("status") == "raised" and "_Timeout" in outcome.get("types", []):
                return "ran past the time limit"
            message = _judge_one(judge, run, outcome)
        finally:
            judge._wants.pop(id(run), None)
        if message is not None:
            return f"on {case.description}: {message}"
    return None


class _Alarm:
    """A time limit for the code inside, on the main thread (SIGALRM); elsewhere none."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.active = (
            hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        )

    def _fire(self, signum, frame):
        raise _Timeout(f"ran past {self.seconds:.1f} s")

    def __enter__(self):
        if self.active:
            self._previous = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)
        return False


# --------------------------------------------------------------------------------------------
# Equivalent mutants
# --------------------------------------------------------------------------------------------


def load_equivalents(path: Path = EQUIVALENTS_PATH) -> dict[tuple[str, str], str]:
    """{(task id, key): reason} from the reviewed list."""
    if not path.exists():
        return {}
    entries = json.loads(path.read_text())
    out = {}
    for entry in entries:
        if not entry.get("reason", "").strip():
            raise ValueError(f"{path.name}: the entry {entry} has no reason")
        out[(entry["task"], entry["mutant"])] = entry["reason"]
    return out


# --------------------------------------------------------------------------------------------
# One task
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    task: str
    mutants: int = 0
    killed: int = 0
    killed_by_notebook: int = 0
    equivalent: list[Mutant] = dataclasses.field(default_factory=list)
    survivors: list[Mutant] = dataclasses.field(default_factory=list)
    missed_by_notebook: list[Mutant] = dataclasses.field(default_factory=list)
    equivalent_but_killed: list[str] = dataclasses.field(default_factory=list)
    stale: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None
    sampled_from: int | None = None
    seconds: float = 0.0

    @property
    def score(self) -> float:
        judged = self.mutants - len(self.equivalent)
        return 100.0 * self.killed / judged if judged else 100.0

    @property
    def notebook_missed(self) -> int:
        """Mutants killed only by a hidden seed: ✅ in the notebook, points lost in the grader."""
        return self.killed - self.killed_by_notebook

    @property
    def ok(self) -> bool:
        return self.error is None and not self.survivors and not self.notebook_missed


def _sample(task_id: str, mutants: list[Mutant], n: int | None, seed: int) -> list[Mutant]:
    if n is None or len(mutants) <= n:
        return mutants

    def rank(m: Mutant) -> str:
        return hashlib.sha256(f"{seed}|{task_id}|{m.key}".encode()).hexdigest()

    chosen = set(map(id, sorted(mutants, key=rank)[:n]))
    return [m for m in mutants if id(m) in chosen]


def run_task(
    task: Task,
    *,
    seed: int = 1,
    hidden_seeds: int = 2,
    sample: int | None = None,
    timeout: float | None = None,
    equivalents: dict | None = None,
    root: Path = ROOT,
    operators: set[str] | None = None,
) -> Report:
    report = Report(task.id)
    start = time.perf_counter()
    equivalents = load_equivalents() if equivalents is None else equivalents
    try:
        cell = find_solution(task, root)
        base = base_namespace(cell)
        solution = mutant_namespace(cell, base, None)[task.name]
        seeds = [NOTEBOOK_SEED] + [
            s for s in range(seed, seed + hidden_seeds + 1) if s != NOTEBOOK_SEED
        ][:hidden_seeds]
        suites = [make_suite(task, s) for s in seeds]
        t0 = time.perf_counter()
        for suite in suites:
            torch.manual_seed(0)
            failure = first_failure(task, solution, suite)
            if failure:
                raise RuntimeError(f"the solution itself fails with seed {suite.seed} {failure}")
        limit = timeout or max(MIN_TIMEOUT, 20 * (time.perf_counter() - t0))
        all_mutants = [m for m in make_mutants(cell) if operators is None or m.op in operators]
    except Exception as e:  # noqa: BLE001  (reported, and the command fails)
        report.error = f"{type(e).__name__}: {e}"
        report.seconds = time.perf_counter() - start
        return report
    mutants = _sample(task.id, all_mutants, sample, seed)
    if len(mutants) < len(all_mutants):
        report.sampled_from = len(all_mutants)
    report.mutants = len(mutants)
    for mutant in mutants:
        verdict = _grade_mutant(task, cell, base, mutant, suites, limit)
        reason = equivalents.get((task.id, mutant.key))
        if verdict is None:
            (report.equivalent if reason else report.survivors).append(mutant)
            continue
        report.killed += 1
        if verdict == "notebook":
            report.killed_by_notebook += 1
        else:
            report.missed_by_notebook.append(mutant)
        if reason:
            report.equivalent_but_killed.append(mutant.key)
    if report.sampled_from is None and operators is None:
        keys = {m.key for m in all_mutants}
        report.stale = [k for (t, k) in equivalents if t == task.id and k not in keys]
    report.seconds = time.perf_counter() - start
    return report


def _grade_mutant(task, cell, base, mutant, suites, limit) -> str | None:
    """ "notebook" or "hidden" (where it was killed), None when it survives everything."""
    try:
        with _Alarm(limit):
            torch.manual_seed(0)
            try:
                obj = mutant_namespace(cell, base, mutant).get(task.name)
            except Exception:  # noqa: BLE001  (a mutant that does not even define the task)
                return "notebook"
            if obj is None:
                return "notebook"
            for i, suite in enumerate(suites):
                if first_failure(task, obj, suite) is not None:
                    return "notebook" if i == 0 else "hidden"
    except _Timeout:
        return "notebook"
    except Exception:  # noqa: BLE001  (anything a mutant breaks in the harness kills it)
        return "notebook"
    return None


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def select_tasks(names: list[str]) -> list[Task]:
    if not names:
        return all_tasks()
    chosen: list[Task] = []
    for name in names:
        if "." in name:
            chosen.append(get_task(name))
        else:
            found = [t for t in all_tasks() if t.id.split(".")[0] == name]
            if not found:
                raise KeyError(f"no task of exercise set {name!r}")
            chosen.extend(found)
    return chosen


def run(
    names: list[str] | None = None,
    *,
    seed: int = 1,
    hidden_seeds: int = 2,
    sample: int | None = None,
    timeout: float | None = None,
    out=None,
    list_equivalent: bool = False,
    equivalents: dict | None = None,
    operators: set[str] | None = None,
) -> list[Report]:
    """Run every selected task, print the reports to `out`, return them."""
    out = out or sys.stdout
    equivalents = load_equivalents() if equivalents is None else equivalents
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads cost more than they give
    reports = []
    try:
        for task in select_tasks(list(names or [])):
            report = run_task(
                task,
                seed=seed,
                hidden_seeds=hidden_seeds,
                sample=sample,
                timeout=timeout,
                equivalents=equivalents,
                operators=operators,
            )
            _print_report(report, equivalents, out, list_equivalent)
            reports.append(report)
    finally:
        torch.set_num_threads(threads)
    _print_summary(reports, out)
    return reports


def _print_report(report: Report, equivalents: dict, out, list_equivalent: bool) -> None:
    if report.error:
        print(f"{report.task}: ERROR {report.error}", file=out)
        return
    sampled = f" (a sample of {report.sampled_from})" if report.sampled_from else ""
    print(
        f"{report.task}: {report.mutants} mutants{sampled}, {report.killed} killed "
        f"({report.killed_by_notebook} by the notebook check alone), "
        f"{len(report.equivalent)} equivalent, {len(report.survivors)} unexplained "
        f"survivors; mutation score {report.score:.1f}% [{report.seconds:.1f} s]",
        file=out,
    )
    for mutant in report.survivors:
        print(f"  SURVIVOR ({mutant.op}) {mutant.key}", file=out)
        print("    " + mutant.diff.rstrip("\n").replace("\n", "\n    "), file=out)
    for mutant in report.missed_by_notebook:
        print(f"  NOTEBOOK-MISSED ({mutant.op}) {mutant.key}", file=out)
        print("    " + mutant.diff.rstrip("\n").replace("\n", "\n    "), file=out)
    if list_equivalent:
        for mutant in report.equivalent:
            print(f"  equivalent ({mutant.op}) {mutant.key}", file=out)
            print(f"    why: {equivalents[(report.task, mutant.key)]}", file=out)
            print("    " + mutant.diff.rstrip("\n").replace("\n", "\n    "), file=out)
    for key in report.equivalent_but_killed:
        print(f"  note: recorded as equivalent but killed, remove it: {key}", file=out)
    for key in report.stale:
        print(f"  note: recorded as equivalent but no longer made, remove it: {key}", file=out)


def _print_summary(reports: list[Report], out) -> None:
    sets: dict[str, list[Report]] = {}
    for r in reports:
        sets.setdefault(r.task.split(".")[0], []).append(r)
    print(
        "\nset    tasks  mutants  killed  (notebook)  equivalent  survivors  notebook-missed"
        "  score",
        file=out,
    )
    for name, rs in sets.items():
        m = sum(r.mutants for r in rs)
        k = sum(r.killed for r in rs)
        nb = sum(r.killed_by_notebook for r in rs)
        e = sum(len(r.equivalent) for r in rs)
        s = sum(len(r.survivors) for r in rs)
        score = 100.0 * k / (m - e) if m - e else 100.0
        print(
            f"{name:6} {len(rs):5}  {m:7}  {k:6}  {nb:10}  {e:10}  {s:9}  {k - nb:15}  "
            f"{score:5.1f}%",
            file=out,
        )
    errors = [r for r in reports if r.error]
    survivors = sum(len(r.survivors) for r in reports)
    print(
        f"{len(reports)} tasks, {survivors} unexplained survivors, {len(errors)} errors, "
        f"{sum(r.seconds for r in reports):.1f} s",
        file=out,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/mutants.py",
        description="Mutation testing of the grader: every small wrong variant of a solution "
        "must lose points.",
    )
    parser.add_argument(
        "tasks",
        nargs="*",
        metavar="TASK",
        help="task ids (ex05.causal_mask) or exercise sets (ex05); default all",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=1,
        help="first seed of the hidden cases (and of --sample); default 1",
    )
    parser.add_argument(
        "--hidden-seeds",
        type=int,
        default=2,
        help="how many hidden seeds besides the notebook's; default 2",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        metavar="N",
        help="grade at most N mutants per task, chosen deterministically",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per mutant (default: max(0.25, 20 x the solution's time))",
    )
    parser.add_argument(
        "--operators",
        type=lambda text: set(text.split(",")),
        default=None,
        metavar="OP,OP",
        help="only these operators (e.g. order,regroup,arg); default all",
    )
    parser.add_argument(
        "--list-equivalent",
        action="store_true",
        help="also list the surviving mutants recorded as equivalent, with why",
    )
    args = parser.parse_args(argv)
    options = vars(args)  # every other option is a keyword of run(), under the same name
    try:
        reports = run(options.pop("tasks"), **options)
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return 2
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
