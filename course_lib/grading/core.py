"""The machinery behind every graded task: cases, running a learner's code, comparing, feedback.

A `Task` knows how to make test cases (`cases`), how to run a learner's function or class on one
case (`call`), what the right answer is (`expected`, by default the reference in `course_lib`),
and how to explain a wrong answer (`mistakes`: wrong implementations with the hint each deserves;
a learner's result that equals a mistake's, or an error that is the one a mistake raises on the
same case, gets that mistake's hint).

Running and judging are separate on purpose. `run_cases` runs the learner's object and returns
plain outcomes (values or the exception raised, plus any forbidden call it made); `judge`
compares those outcomes with the reference. In a notebook, `check` does both in the learner's
kernel for instant feedback. The batch grader runs only `run_cases` inside the learner's kernel
and `judge` in its own process, so nothing a notebook redefines can change a grade.

The learner's code gets copies of a case's tensors and lists, so the reference always answers
the case as drawn; code that changes an input in place fails that case and is told which.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import re
import sys
import types
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from os.path import commonprefix
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from course_lib.validation import door, is_number

__all__ = [
    "Case",
    "Task",
    "TaskResult",
    "register",
    "get_task",
    "all_tasks",
    "tasks_for",
    "run_cases",
    "judge",
    "resolve",
    "watched_calls",
    "course_state",
    "load_weights",
    "learner_namespace",
    "GradingError",
    "compare_gradients",
    "with_gradients",
]


class GradingError(Exception):
    """Raised by a task's own harness code (e.g. a module with a missing sub-module).

    Its message is shown to the learner as it is, so it must say what to fix.
    """


@dataclass
class Case:
    """One test input. `description` is what the learner reads when this case fails."""

    description: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    # Extra inputs a task's `call` needs, e.g. the weights to load into a learner's module.
    data: dict = field(default_factory=dict)
    # The learner's code must raise this exception type on this input (e.g. ValueError).
    raises: type[BaseException] | None = None


# why a partial score in the notebook can differ from the grader's (shown with both).
SCORE_NOTE = (
    "A score is the fraction of checks passed; the grader draws fresh random inputs, so a "
    "partial score can differ between the notebook and the grader, but a correct solution "
    "passes both."
)


@dataclass
class TaskResult:
    task_id: str
    score: float
    max_score: float
    passed: int
    total: int
    feedback: str
    status: str  # "passed", "failed", "not implemented", "missing", "forbidden"

    def render(self) -> str:
        """What `check` prints; a partial score comes with SCORE_NOTE on a line of its own."""
        mark = {"passed": "✅", "not implemented": "✏️ "}.get(self.status, "❌")
        if self.status == "passed" and self.score < self.max_score:  # passed, with borrowed parts
            mark = "⚠️ "
        note = f"\n   ({SCORE_NOTE})" if self.status == "failed" else ""
        return f"{mark} {self.task_id}: {self.feedback}{note}"

    def as_dict(self) -> dict:
        return {"score": self.score, "max_score": self.max_score, "feedback": self.feedback}


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------

_REGISTRY: dict[str, Task] = {}


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: add a task to the registry (ids must be unique)."""
    task = cls()
    if task.id in _REGISTRY and type(_REGISTRY[task.id]).__qualname__ != cls.__qualname__:
        raise ValueError(f"task id {task.id!r} is registered twice")
    _REGISTRY[task.id] = task
    return cls


def _load_all() -> None:
    from . import tasks  # noqa: F401  (importing registers every exercise set)


def get_task(task_id: str) -> Task:
    _load_all()
    if task_id not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(f"unknown task id {task_id!r}; known tasks: {known}")
    return _REGISTRY[task_id]


def all_tasks() -> list[Task]:
    """Every task, set by set (ex00, ex01, ...), each set's in the order it registered them
    (its notebook's): a set that imports another's module registers that set first."""
    _load_all()
    return sorted(_REGISTRY.values(), key=lambda task: task.id.split(".")[0])


def tasks_for(exercise: str) -> list[Task]:
    """The tasks of one exercise set, e.g. "ex02", in the order they were registered."""
    return [t for t in all_tasks() if t.id.split(".")[0] == exercise]


def resolve(dotted: str) -> Any:
    """Import `a.b.c` and return the object (module attribute or class attribute)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"cannot resolve {dotted!r}")


# --------------------------------------------------------------------------------------------
# Watching what a learner's code calls
# --------------------------------------------------------------------------------------------


def _functions(klass: type) -> Iterable[types.FunctionType]:
    """The plain functions a class defines itself (methods, static and class methods)."""
    for value in vars(klass).values():
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, types.FunctionType):
            yield value


def _code_objects(obj: Any) -> Iterable[types.CodeType]:
    """The Python code objects that run when `obj` (function or class) is used.

    A function behind a decorator (course_lib's `@door`) is seen by its own code: every
    decorated function shares the decorator's wrapper code.
    """
    if isinstance(obj, types.FunctionType):
        yield inspect.unwrap(obj).__code__
    elif isinstance(obj, type):
        for klass in obj.__mro__:
            if not klass.__module__.startswith(("torch.nn.modules.module", "builtins")):
                yield from (inspect.unwrap(f).__code__ for f in _functions(klass))


# PyTorch's operators called directly (torch.ops.aten.softmax(...)) bypass the functions a task
# forbids; a learner's code that calls one is reported as "torch.ops.aten.softmax".
OPERATOR = "torch.ops."
_OPERATOR_CALLS = {
    torch._ops.OpOverloadPacket.__call__.__code__,
    torch._ops.OpOverload.__call__.__code__,
}
_DOOR_CODE = door(lambda: None).__code__  # the wrapper every @door function runs through
_TORCH_DIR = str(__import__("pathlib").Path(torch.__file__).resolve().parent)


def _inside_torch(frame) -> bool:
    """True when `frame` runs PyTorch's own Python code (which may call its operators), or the
    watcher's own dispatch of an operator call it intercepted."""
    return frame is not None and (
        frame.f_code.co_filename.startswith(_TORCH_DIR)
        or frame.f_code is _Watcher.__torch_function__.__code__
    )


class _Watcher(TorchFunctionMode):
    """Records calls to the given objects while learner code runs.

    Torch functions and tensor methods are seen through a TorchFunctionMode (which sees
    `torch.softmax`, `x.softmax` and `F.softmax` alike, however they were imported); plain
    Python functions and classes, such as a course_lib reference, are seen through their code
    objects with `sys.setprofile`, so an alias does not hide them.
    """

    def __init__(self, watched: dict[str, Any]):
        super().__init__()
        self.by_id = {id(obj): name for name, obj in watched.items()}
        self.by_code: dict[types.CodeType, str] = {}
        for name, obj in watched.items():
            for code in _code_objects(obj):
                self.by_code.setdefault(code, name)
        self.seen: list[str] = []

    def _note(self, name: str) -> None:
        if name not in self.seen:
            self.seen.append(name)

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        name = self.by_id.get(id(func))
        if name is not None:
            self._note(name)
        return func(*args, **(kwargs or {}))

    def _inside_a_course_piece(self, frame) -> bool:
        """Whether `frame` was called by a watched course piece (through doors and nn.Module's
        call), not by the learner: the course's attention calls the course's softmax, and a
        learner who borrowed the attention has not borrowed the softmax too."""
        caller = frame.f_back
        while caller is not None and (caller.f_code is _DOOR_CODE or _inside_torch(caller)):
            caller = caller.f_back
        outer = caller and self.by_code.get(caller.f_code)
        return bool(outer) and not outer.startswith(USES)  # "uses:": the learner's own

    def _profile(self, frame, event, arg):
        if event == "call":
            name = self.by_code.get(frame.f_code)
            if name is not None and not self._inside_a_course_piece(frame):
                self._note(name)
            elif frame.f_code in _OPERATOR_CALLS and not _inside_torch(frame.f_back):
                op = getattr(frame.f_locals.get("self"), "_qualified_op_name", None) or getattr(
                    frame.f_locals.get("self"), "_name", "?"
                )
                self._note(OPERATOR + str(op).replace("::", "."))
        elif event == "c_call":
            name = self.by_id.get(id(arg))
            if name is not None:
                self._note(name)

    def __enter__(self):
        self._previous_profile = sys.getprofile()
        sys.setprofile(self._profile)
        return super().__enter__()

    def __exit__(self, *exc):
        sys.setprofile(self._previous_profile)
        return super().__exit__(*exc)


# --------------------------------------------------------------------------------------------
# Outcomes: what running a learner's object produced, as plain data
# --------------------------------------------------------------------------------------------


def _plain(value: Any, depth: int = 0) -> Any:
    """Tensors, numbers, strings and nested tuples/lists/dicts of them; anything else by repr.

    Outcomes cross a process boundary in batch grading, so they are kept to what
    `torch.load(weights_only=True)` accepts.
    """
    if depth > 6:
        return {"__repr__": "<nested too deeply>"}
    if isinstance(value, Tensor):
        return value.detach().to("cpu").clone()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        items = [_plain(v, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    return {"__repr__": f"<{type(value).__name__}>"}


def _outcome_of(fn: Callable[[], Any]) -> dict:
    try:
        value = fn()
    except GradingError as e:
        return {"status": "harness", "message": str(e)}
    except BaseException as e:  # noqa: BLE001  (a learner's code may raise anything, even SystemExit)
        if isinstance(e, KeyboardInterrupt):
            raise
        # an untouched exercise's `raise NotImplementedError()`; PyTorch's own, with a message
        # ('"bitwise_and_cpu" not implemented for \'Float\''), is the learner's error
        stub = isinstance(e, NotImplementedError) and not str(e)
        return {
            "status": "raised",
            "types": ["NotImplementedError"] if stub else [k.__name__ for k in type(e).__mro__],
            "message": str(e) if stub else _raised_message(e),
            "not_implemented": stub,
        }
    return {"status": "ok", "value": _plain(value)}


def _raised_message(e: BaseException) -> str:
    """How an exception is reported, and compared with the errors of the listed mistakes."""
    return f"{type(e).__name__}: {e}"[:2000]


USES = "uses:"  # in `seen`, "uses:one_hot": the learner's code called the learner's one_hot
STAND_IN = "stand-in:"  # "stand-in:ex02.softmax": it called the course's, standing in via mine()


def _stand_ins(task: Task, watched: dict[str, Any]) -> dict[str, Any]:
    """The course pieces `mine()` gave out in this session in place of the learner's own (its
    ledger), by STAND_IN + task id, that are not already watched: a task built on a piece from an
    earlier exercise names it when the learner's code calls it (no marks lost here: that piece
    is graded in its own exercise). Empty when the learner's library is not in use."""
    library = sys.modules.get("course_lib.mine")  # importing it would switch saving on
    if library is None:
        return {}
    stand_ins = {}
    for task_id, entry in library.ledger().items():
        if entry["whose"] != "borrowed" or task_id == task.id:
            continue
        try:
            name = get_task(task_id).reference
            if name and name not in watched:
                stand_ins[STAND_IN + task_id] = resolve(name)
        except (KeyError, ImportError, AttributeError):  # a task or piece this install lacks
            continue
    return stand_ins


def learner_namespace(obj: Any) -> dict:
    """The globals a learner's function or class was defined in (its notebook's), or {}."""
    if isinstance(obj, types.FunctionType):
        return obj.__globals__
    return next((f.__globals__ for f in _functions(obj)), {}) if isinstance(obj, type) else {}


def watched_calls(task: Task) -> dict[str, Any]:
    """The functions a learner's code is watched calling: the task's forbidden ones and its
    reference, by dotted name (a name that does not resolve in this install is skipped)."""
    watched = {}
    for name in (*task.forbidden, *task.borrowable, task.reference):
        if name:
            try:
                watched[name] = resolve(name)
            except (ImportError, AttributeError):
                pass
    return watched


def run_cases(task: Task, obj: Any, cases: list[Case], namespace: dict | None = None) -> dict:
    """Run a learner's object on every case; returns plain outcomes and the watched calls seen.

    Seen are the forbidden calls, the reference, and the learner's own versions of the tasks in
    `task.depends_on` (as "uses:NAME"), found in `namespace` (by default the globals `obj` was
    defined in). This is the only part of grading that runs learner code. It makes no judgement.
    """
    watched = watched_calls(task)
    watched.update(_stand_ins(task, watched))
    namespace = learner_namespace(obj) if namespace is None else namespace
    for name in task.depends_on:
        own = namespace.get(name)
        if callable(own) and not any(own is w for w in watched.values()):
            watched[USES + name] = own
    outcomes = []
    watcher = _Watcher(watched)
    for case in cases:
        own = _own_copy(case)
        with course_state(), watcher:
            outcome = _outcome_of(lambda own=own: task.call(obj, own))
            left = _state_left_behind()  # read before course_state puts it back
        changed = _changed_inputs(obj, case, own)
        if changed and outcome["status"] in ("ok", "harness"):  # not when it raised itself
            outcome["changed"] = changed
        if left and outcome["status"] in ("ok", "harness"):
            outcome["left"] = left
        outcomes.append(outcome)
    run = {"outcomes": outcomes, "seen": list(watcher.seen)}
    library = sys.modules.get("course_lib.mine")
    if library is not None:
        run["ledger"] = {k: v for k, v in library.ledger().items() if v["whose"] == "borrowed"}
    return run


@contextlib.contextmanager
def course_state():
    """The state every check runs in, whatever a notebook's earlier cells set: float32 as the
    default dtype and the CPU as the default device (what the cases and references assume;
    torch.set_default_device("meta") made every check crash), gradients on and inference mode off (a
    task that wants none turns them off itself), no anomaly detection (it raises on the NaN
    gradient of a fully masked row that a right answer then zeroes), warnings only printed, not
    raised as errors. All of it, and the global RNG the checks draw from, is restored
    afterwards: the learner's next cell sees the state and the random stream it left."""
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    on_cpu = torch.get_default_device().type == "cpu"  # set_default_device("meta") or "cuda"
    try:
        with (
            contextlib.nullcontext() if on_cpu else torch.device("cpu"),  # the cases are on CPU
            torch.inference_mode(False),
            torch.enable_grad(),
            torch.random.fork_rng(devices=[]),
            torch.autograd.set_detect_anomaly(False),
            warnings.catch_warnings(),
        ):
            warnings.filters[:] = [f for f in warnings.filters if f[0] != "error"]
            warnings.simplefilter("default", append=True)  # Python's own last resort, re-read
            yield
    finally:
        torch.set_default_dtype(dtype)


def _state_left_behind() -> str | None:
    """What a learner's call changed in PyTorch's global state, inside `course_state` (which
    set it before the call and puts it back after it, so the check itself would not notice):
    in their notebook, every later cell would run in it. None when nothing changed."""
    if not torch.is_grad_enabled():
        return (
            "your code switched gradients off for the whole program and left them off "
            "(torch.set_grad_enabled(False)): every later forward in your notebook builds no "
            "graph, so the next loss.backward() raises and nothing trains. Use `with "
            "torch.no_grad():`, which switches them back on when the block ends"
        )
    if torch.get_default_dtype() != torch.float32:
        return (
            f"your code changed the default dtype to {torch.get_default_dtype()} and left it "
            "(torch.set_default_dtype): every tensor your notebook makes later, and every "
            "layer's weights, would be in it. Give the tensors you make a dtype= (x.dtype) "
            "instead"
        )
    return None


def _copy_input(value: Any, memo: dict[int, Any]) -> Any:
    if id(value) not in memo:  # one copy per object, so inputs that were one tensor still are
        if isinstance(value, Tensor):
            memo[id(value)] = value.detach().clone().requires_grad_(value.requires_grad)
        else:
            copy = {list: list, dict: dict}.get(type(value))
            memo[id(value)] = copy(value) if copy else value
    return memo[id(value)]


def _own_copy(case: Case) -> Case:
    """`case` with copies of its tensors, lists and dicts: what the learner's code gets, so code
    that changes its inputs in place cannot change the case the reference answers."""
    memo: dict[int, Any] = {}
    return replace(
        case,
        args=tuple(_copy_input(a, memo) for a in case.args),
        kwargs={k: _copy_input(v, memo) for k, v in case.kwargs.items()},
    )


def _same_input(before: Any, after: Any) -> bool:
    if isinstance(before, Tensor):
        return (
            before.shape == after.shape
            and before.dtype == after.dtype
            and bool(((before == after) | (before.isnan() & after.isnan())).all())
            if before.is_floating_point() or before.is_complex()
            else before.shape == after.shape and torch.equal(before, after)
        )
    if isinstance(before, dict):  # a shallow copy: the same values, unless one was replaced
        return list(before) == list(after) and all(before[k] is after[k] for k in before)
    return before == after if isinstance(before, list) else True


def _input_names(obj: Any) -> list[str]:
    """The learner's names of its positional parameters (a module's: those of `forward`)."""
    target = obj.forward if isinstance(obj, type) else obj
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return []
    if isinstance(obj, type) and params and params[0].name == "self":
        params = params[1:]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in kinds]


def _changed_inputs(obj: Any, case: Case, own: Case) -> list[str]:
    """The names of the inputs the learner's code changed in place (compared with `case`)."""
    names = _input_names(obj)
    changed = [
        names[i] if i < len(names) else f"argument {i + 1}"
        for i, (before, after) in enumerate(zip(case.args, own.args, strict=True))
        if not _same_input(before, after)
    ]
    return changed + [k for k in case.kwargs if not _same_input(case.kwargs[k], own.kwargs[k])]


# --------------------------------------------------------------------------------------------
# Comparing
# --------------------------------------------------------------------------------------------

_TOLERANCES = {
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-9),
}


def _shape(t: Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def _differ(where: str) -> str:
    """'differs' or 'differ', agreeing with the subject: "your result" / "your tokens"."""
    head = where.split(" after ")[0].split("[")[0].split()[-1]
    plural = head.endswith("s") and not head.endswith(("ss", "us", "'s"))
    return f"{where} {'differ' if plural else 'differs'}"


# a number where a tensor is expected: math.exp, .item() or float() made it one
NUMBER_NOT_TENSOR = (
    ": return a tensor (torch.exp, torch.log and the other tensor operations keep one; "
    "math.exp, .item() and float() give a Python number)"
)


def _index_of(flat: int, shape: torch.Size) -> list[int]:
    """The index of entry `flat` of a tensor of `shape`, in row-major order (torch.unravel_index
    imports sympy on its first call, and an import inside a running check can break it)."""
    index = []
    for size in reversed(shape):
        flat, rest = divmod(flat, size)
        index.append(rest)
    return index[::-1]


def _where_first(got: Tensor, want: Tensor, index: Any, which: str = "the first at") -> str:
    """Where two tensors differ, with both entries: "the first at [0, 2]: yours True, expected
    False", so a learner can look at that entry of a small input (no index for a 0-d tensor)."""
    spot = () if index is None else tuple(int(i) for i in index)
    mine, right = got[spot].item(), want[spot].item()
    if isinstance(right, float):
        mine, right = f"{mine:.4g}", f"{right:.4g}"
    at = f"{which} [{', '.join(str(i) for i in spot)}]: " if spot else ""
    return f"{at}yours {mine}, expected {right}"


def compare_values(got: Any, want: Any, where: str = "your result") -> str | None:
    """None when `got` matches `want` (within float tolerance), else what differs, in words."""
    if isinstance(want, Tensor):
        if isinstance(got, dict) and "__repr__" in got:
            return f"{where} should be a tensor, got {got['__repr__']}"
        if not isinstance(got, Tensor):
            message = (
                f"{where} should be a tensor of shape {_shape(want)}, got {type(got).__name__}"
            )
            return message + (NUMBER_NOT_TENSOR if is_number(got) else "")
        if got.shape != want.shape:
            return f"{where} has shape {_shape(got)}, expected {_shape(want)}"
        if got.dtype != want.dtype:
            return f"{where} has dtype {str(got.dtype)[6:]}, expected {str(want.dtype)[6:]}"
        if want.dtype == torch.bool or not want.is_floating_point():
            if torch.equal(got, want):
                return None
            wrong = got != want
            first = _where_first(got, want, wrong.nonzero()[0])
            return (
                f"{_differ(where)} from the expected values in {wrong.sum().item()} of "
                f"{want.numel()} entries ({first})"
            )
        got_nan, want_nan = torch.isnan(got), torch.isnan(want)
        if got_nan.any() and not want_nan.any():
            return f"{where} contains NaN where the expected result has none"
        if torch.isinf(got).any() and not torch.isinf(want).any():
            return f"{where} contains inf where the expected result has none"
        rtol, atol = _TOLERANCES.get(want.dtype, (1e-4, 1e-5))
        if torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
            return None
        gaps = (got.double() - want.double()).abs().nan_to_num(0.0)
        at = _index_of(int(gaps.argmax()), gaps.shape) if gaps.dim() else None
        diff = gaps.max().item()
        return (
            f"{_differ(where)} from the expected values (largest difference {diff:.3g}, "
            f"{_where_first(got, want, at, 'at')})"
        )
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            kind = "list" if isinstance(want, list) else "tuple"
            return f"{where} should be a {kind} of {len(want)} values, got {type(got).__name__}"
        if len(got) != len(want):
            return f"{where} should have {len(want)} values, got {len(got)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            msg = compare_values(g, w, f"{where}[{i}]")
            if msg:
                return msg
        return None
    if isinstance(want, float):
        if not is_number(got):
            tensor = isinstance(got, Tensor) and got.numel() == 1
            return f"{where} should be a number, got {type(got).__name__}" + (
                ": return a Python number, e.g. its .item()" if tensor else ""
            )
        if math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            return None
        return f"{where} is {got:.6g}, expected {want:.6g}"
    if got == want:
        return None
    return f"{where} is {got!r}, expected {want!r}"


# A result with its gradients: a task whose answer is trained later returns
# {VALUE: its result, GRADIENTS: {what: the gradient of a fixed projection of the output with
# respect to it (None: none reaches it)}} (with_gradients, below); the values are judged
# first, as ever, then the gradients, so a .detach() that leaves the values right still fails.
VALUE, GRADIENTS = "__value__", "__gradients__"
BACKWARD_FAILED = "__backward_failed__"  # in GRADIENTS: the error the backward pass raised


def _gradients_apart(value: Any) -> tuple[Any, dict | None]:
    """(the result, its gradients or None) of what a task's `call` returned."""
    if isinstance(value, dict) and GRADIENTS in value:
        return value.get(VALUE), value[GRADIENTS]
    return value, None


# why the gradient pass could not run, by what PyTorch's error names; else an in-place operation
_BACKWARD_HINTS = {
    "numpy()": "NumPy (.numpy(), np.array, np.asarray) works outside PyTorch, so no gradient can "
    "follow it back to the inputs: compute with torch operations on the tensors themselves",
    "Inference tensors": "a tensor made under torch.inference_mode() cannot take part in "
    "training: make tables that need no gradient under torch.no_grad() instead",
}
IN_PLACE_HINT = (
    "an in-place operation (+=, *=, a method ending in _) changed a tensor the backward pass "
    "needs, or one that needs a gradient; build a new tensor instead (x = x + ..., not x += ...)"
)


def _gradients_close(mine: Tensor, grad: Tensor) -> bool:
    """`mine` equals the reference's `grad` within the gradients' tolerance."""
    tol = 1e-5 if grad.dtype == torch.float64 else 1e-3  # looser than the values: sums of them
    scale = max(1.0, grad.nan_to_num(0.0).abs().max().item())
    return torch.allclose(mine.to(grad.dtype), grad, rtol=tol, atol=tol * scale, equal_nan=True)


def compare_gradients(got: dict | None, want: dict) -> str | None:
    """None when every gradient in `want` is matched in `got`, else what is wrong, with a hint:
    the learner's values are right, but training would not follow them. No gradient at all
    matches a gradient of zeros (a softmax over an axis of length 1 is constant)."""
    got = got or {}
    if BACKWARD_FAILED in got:
        error = got[BACKWARD_FAILED].split(" Use tensor.detach()")[0]  # that advice cuts it too
        hint = next((h for key, h in _BACKWARD_HINTS.items() if key in error), IN_PLACE_HINT)
        return (
            f"your result is right, but back-propagating through it raised "
            f"{error.rstrip('.')}. Hint: {hint}"
        )
    unreached = [
        name
        for name, grad in want.items()
        if grad is not None
        and got.get(name) is None
        and not _gradients_close(torch.zeros_like(grad), grad)
    ]
    if unreached:
        return (
            f"your result is right, but no gradient reaches {', '.join(unreached)}, so training "
            "could never change what lies behind it. Hint: something cuts the graph: look for "
            ".detach(), torch.no_grad(), .data, .item() or torch.tensor(...) rebuilding a "
            "tensor, or a parameter made with requires_grad=False; compute with tensor "
            "operations on the inputs and parameters themselves. A result kept from an earlier "
            "call (a dict or default argument that caches it by shape) is made of that call's "
            "tensors, not these: compute it anew at every call"
        )
    for name, grad in want.items():
        mine = got.get(name)
        if grad is None or not isinstance(mine, Tensor) or mine.shape != grad.shape:
            continue
        if (~mine.isfinite() & grad.isfinite()).any():  # log(w) of a weight that underflowed
            bad = "NaN" if mine.isnan().any() else "inf"
            return (
                f"your result is right, but its gradient with respect to {name} holds {bad} "
                "where the right one is finite, so one training step would turn every parameter "
                f"into {bad}. Hint: a {bad} gradient comes from a step whose derivative blows up "
                "where a value is 0 or underflows to 0: log(w) of a weight that is 0 (its "
                "derivative is 1/w), sqrt(x) at x = 0, x / y with y = 0. Compute without that "
                "step, or keep the value away from 0 (in attention: add a bias to the scores "
                "rather than taking the log of the weights)"
            )
        if not _gradients_close(mine, grad):
            gap = (mine.double() - grad.double()).abs().max().item()
            return (
                f"your result is right, but its gradient with respect to {name} is not "
                f"(largest difference {gap:.3g}), so training would follow the wrong gradient. "
                "Hint: a .detach(), torch.no_grad() or .data on part of the computation (an "
                "input, a residual branch, one sub-layer) cuts some of the paths back to it: "
                "remove it, so that every path the values take carries the gradient too"
            )
    return None


def _one_tensor(names: list[str]) -> str:
    """How the gradient messages name an input: "q", or, for one tensor given under several
    names, "the input query, key and value (one tensor in this case)": its gradient is the sum
    of every path, and any one of them may be the cut one."""
    if len(names) == 1:
        return names[0]
    prefix = "".join(commonprefix(names).rpartition(" ")[:2])  # "the input " or ""
    bare = [name.removeprefix(prefix) for name in names]
    return f"{prefix}{', '.join(bare[:-1])} and {bare[-1]} (one tensor in this case)"


def with_gradients(
    value: Any, forward, inputs: dict[str, Any], parameters=None, data: Iterable[str] = ()
) -> Any:
    """`value` (the result the check judges) with the gradients of one more pass, as
    core.compare_gradients reads them: `forward(leaves)` gets `inputs`' values in order, each
    floating tensor a fresh copy that requires grad (one copy per object, named by all its
    names), except those named in `data` (not learned, as RoPE's positions: given as they
    are); the sum of its (first) output times fixed random weights is differentiated with
    respect to those copies and to `parameters` ({name: tensor}). A gradient that does not
    reach one is None."""
    copies: dict[int, Any] = {}
    names: dict[int, list[str]] = {}
    for name, t in inputs.items():
        floating = isinstance(t, Tensor) and t.is_floating_point() and name not in data
        copies.setdefault(id(t), t.detach().clone().requires_grad_() if floating else t)
        names.setdefault(id(t), []).append(name)
    leaves = {name: copies[id(t)] for name, t in inputs.items()}
    try:  # inputs that require grad refuse an in-place change (a changed input is told first)
        with torch.enable_grad():
            out = forward(list(leaves.values()))
    except Exception as error:  # noqa: BLE001  (the learner's code, once more)
        return {VALUE: value, GRADIENTS: {BACKWARD_FAILED: _raised_message(error)[:400]}}
    out = out[0] if isinstance(out, (tuple, list)) and out else out
    if not isinstance(out, Tensor) or not out.is_floating_point():
        return value
    learned_inputs = {  # each input copy once, by all its names
        _one_tensor(names[key]): t
        for key, t in copies.items()
        if isinstance(t, Tensor) and t.requires_grad
    }
    targets = {  # what should receive a gradient, by every name it has
        name: t
        for name, t in [*learned_inputs.items(), *(parameters or {}).items()]
        if isinstance(t, Tensor) and t.is_floating_point()
    }
    learned = list({id(t): t for t in targets.values() if t.requires_grad}.values())
    found: dict[int, Any] = {}
    if out.requires_grad and learned:
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
        try:
            computed = torch.autograd.grad(
                (out * weights.to(out)).sum(), learned, allow_unused=True
            )
        except RuntimeError as error:  # an in-place change the backward pass needed undone
            return {VALUE: value, GRADIENTS: {BACKWARD_FAILED: _raised_message(error)[:400]}}
        found = {id(t): g for t, g in zip(learned, computed, strict=True)}
    grads = {name: found.get(id(t)) for name, t in targets.items()}
    return {VALUE: value, GRADIENTS: grads}


# --------------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------------


class Task:
    """One graded task. Subclass it, set the attributes, write `cases`; register it.

    A task is data around one reference and one wrong implementation: `mistake_table` is the
    table of named mistakes, {name: the hint a learner who made it needs}, and `wrong` is the
    reference written once more as straight code that takes the mistake's name (a keyword-only
    `mistake` argument, or, for an nn.Module class, a `mistake` attribute) and changes only the
    place where it bites. `mistakes()` pairs the two (`tasks.mistake_table.mistakes_of`);
    listing a newly found mistake is one row and, at most, one conditional in `wrong`. Rows are
    tried in order: the first whose result (or error) equals the learner's gives the hint.

    Attributes:
        id: "exNN.name", where name is the function or class the learner writes.
        lesson: where to read up, e.g. "lesson 02, section 3 (a numerically stable softmax)".
        reference: dotted path of the finished version in course_lib (calling it is not allowed).
        forbidden: dotted paths of functions or classes the task may not call.
        points: what the task is worth.
        depends_on: names of earlier tasks of the same exercise whose learner versions this
            task's solution calls (ex01.embed calls one_hot). When the learner's code calls
            one of them and fails, and that one fails its own checks, the feedback says to fix
            it first.
        borrowable: dotted paths of course pieces that may stand in for the learner's own
            (exercise 09's capstone, built from the learner's library): when one is seen, the
            feedback names it and the score is halved.
    """

    id: str = ""
    lesson: str = ""
    reference: str = ""
    forbidden: tuple[str, ...] = ()
    points: float = 1.0
    depends_on: tuple[str, ...] = ()
    mistake_table: dict[str, str] = {}
    borrowable: tuple[str, ...] = ()
    backward: bool = False  # the answer is trained later: judge its gradients too
    data_inputs: tuple[str, ...] = ()  # floating arguments never learned (RoPE's positions)

    @property
    def name(self) -> str:
        return self.id.split(".", 1)[1]

    def cases(self, gen: torch.Generator) -> list[Case]:
        raise NotImplementedError

    def call(self, obj: Any, case: Case) -> Any:
        """Run the object under test on one case (the learner's, a reference or a mistake)."""
        return self.learnable(obj, case, obj(*case.args, **case.kwargs))

    def learnable(self, obj: Any, case: Case, value: Any) -> Any:
        """`value`, with the gradients of `obj`'s output on the case with respect to each
        floating argument (named as the reference names them) when `backward` is set."""
        if not self.backward:
            return value
        names = _input_names(resolve(self.reference) if self.reference else obj)
        inputs = dict(zip(names, case.args, strict=False))
        rest = case.args[len(inputs) :]
        return with_gradients(
            value, lambda leaves: obj(*leaves, *rest, **case.kwargs), inputs, data=self.data_inputs
        )

    def expected(self, case: Case) -> Any:
        return self.call(resolve(self.reference), case)

    def compare(self, got: Any, want: Any, case: Case) -> str | None:
        return compare_values(got, want)

    def wrong(self, *args: Any, mistake: str, **kwargs: Any) -> Any:
        """The one wrong implementation: the reference with the named mistake."""
        raise NotImplementedError(f"{self.id} lists mistakes but has no wrong implementation")

    def mistakes(self) -> list[tuple[Callable, str]]:
        """(wrong implementation, the hint a learner who wrote it needs), in the table's order."""
        from .tasks.mistake_table import mistakes_of

        return mistakes_of(self.wrong, self.mistake_table)

    def diagnose(self, got: Any, want: Any, case: Case) -> str | None:
        """A hint from the wrong value itself, when no listed mistake matches it."""
        return None


_SIZES = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")


def _unordered(message: str) -> str:
    """A broadcast error names the two sizes in operand order: `a | b` and `b | a` are one slip."""
    return _SIZES.sub(lambda m: f"sizes {sorted(m.groups())}", message)


def _listed_hint(
    task: Task,
    case: Case,
    got: Any = None,
    raised: str | None = None,
    gradients: dict | None = None,
) -> str | None:
    """The hint of the first listed mistake whose result on this case equals the learner's
    `got` (and, when `gradients` are given, whose gradients equal them too: a detached
    softmax), or, when the learner's code raised, whose error is the very `raised` one (the same
    exception and text: a crash is explained by its cause, a float d_head, a sum without
    keepdim, without matching PyTorch's wording anywhere); None when none does."""
    for wrong, hint in task.mistakes():
        try:
            with warnings.catch_warnings():  # a wrong version may warn; the learner's did not
                warnings.simplefilter("ignore")
                wrong_value, wrong_gradients = _gradients_apart(
                    _plain(task.call(wrong, _own_copy(case)))
                )
        except Exception as e:  # noqa: BLE001  (a mistake may not even run on this case)
            if raised is not None and _unordered(_raised_message(e)) == _unordered(raised):
                return hint
            continue
        if raised is not None or task.compare(got, wrong_value, case) is not None:
            continue
        if gradients is None or (
            wrong_gradients is not None
            and compare_gradients(gradients, wrong_gradients) is None
            and compare_gradients(wrong_gradients, gradients) is None
        ):
            return hint
    return None


def judge(
    task: Task,
    cases: list[Case],
    run: dict | None,
    *,
    missing: str | None = None,
    earlier: Callable[[str], TaskResult | None] | None = None,
) -> TaskResult:
    """Compare the outcomes of `run_cases` with the reference and write the feedback.

    `earlier(name)` gives the result of an earlier task of the same exercise (one of
    `task.depends_on`) on the learner's version of it, or None; it is asked only when this task
    did not pass and the learner's code called that version.
    """
    total = len(cases)

    def result(status: str, passed: int, feedback: str) -> TaskResult:
        score = round(task.points * passed / total, 4) if status in ("passed", "failed") else 0.0
        if borrowed and status in ("passed", "failed"):
            score = round(score / 2, 4)
            feedback = f"{feedback} {borrowed_message(borrowed, run)}"
        elif stand_ins and status in ("passed", "failed"):
            feedback = f"{feedback} {stand_in_message(stand_ins, run)}"
        return TaskResult(task.id, score, task.points, passed, total, feedback, status)

    borrowed = [n for n in (run or {}).get("seen", []) if n in task.borrowable]
    stand_ins = [n[len(STAND_IN) :] for n in (run or {}).get("seen", []) if n.startswith(STAND_IN)]

    if run is None:
        return result("missing", 0, missing or f"no `{task.name}` was found in the notebook")
    seen = run.get("seen", [])
    operators = ", ".join(name for name in seen if name.startswith(OPERATOR))
    bad = ", ".join(name for name in seen if name in task.forbidden)
    if task.reference and task.reference in seen:
        why = "the course's finished version of this task; write it yourself (0 points)."
        return result("forbidden", 0, f"your code calls {task.reference}, {why}")
    if operators or bad:
        why = (
            "one of PyTorch's internal operators, directly: the graded tasks ask you to build "
            "the computation from ordinary tensor operations"
            if operators
            else "which this exercise asks you not to use: the point is to build it yourself"
        )
        return result(
            "forbidden", 0, f"your code calls {operators or bad}, {why} (see {task.lesson})."
        )
    outcomes = run["outcomes"]
    if outcomes and all(o.get("not_implemented") for o in outcomes):
        fix_first = _fix_first(task, seen, earlier)
        return result(
            "not implemented",
            0,
            "not implemented yet: replace `raise NotImplementedError()` with your code."
            + (f" {fix_first}" if fix_first else ""),
        )
    passed, first_failure, fix_first = 0, None, None
    for case, outcome in zip(cases, outcomes, strict=False):
        message = _judge_one(task, case, outcome, want_hint=False)  # hints only for the first
        if message is None:
            passed += 1
        elif first_failure is None:  # when an earlier piece of theirs fails, it is the cause to
            fix_first = _fix_first(task, seen, earlier)  # name: this task's hints would guess
            message = message if fix_first else _judge_one(task, case, outcome)
            first_failure = f"on {case.description}: {message}"
    if passed == total:
        return result("passed", passed, f"passed all {total} checks.")
    feedback = f"passed {passed} of {total} checks. "
    feedback += f"{fix_first} " if fix_first else ""
    feedback += f"First failure {first_failure}"
    if task.lesson:
        feedback += f" (see {task.lesson})"
    return result("failed", passed, feedback)


def borrowed_message(names: list[str], run: dict | None) -> str:
    """Names the course pieces a task was built with, and why each stands in (from the
    learner's library's ledger, when the run recorded it)."""
    if all(name.startswith("torch.") for name in names):  # PyTorch's, not a stand-in of mine()
        return (
            f"Built with PyTorch's {', '.join(names)} (a class of yours that subclasses it counts "
            "too) instead of your own (half marks until your code uses yours)."
        )
    ledger = (run or {}).get("ledger") or {}
    by_why: dict[str, list[str]] = {}  # one reason said once, for all the pieces it explains
    for task_id, entry in sorted(ledger.items()):
        by_why.setdefault(entry["why"], []).append(task_id)
    reasons = [f"{', '.join(ids)}: {why}" for why, ids in by_why.items()]
    return (
        f"Built with the course's {', '.join(names)}, borrowed instead of your own "
        + (f"({'; '.join(reasons)}) " if reasons else "")
        + (
            "(half marks until your own versions pass their checks and stand in)."
            if reasons
            else "(half marks until your code uses your own)."
        )
    )


def stand_in_message(task_ids: list[str], run: dict | None) -> str:
    """Names the course pieces from earlier exercises that stood in for the learner's own."""
    ledger = (run or {}).get("ledger") or {}
    parts = [f"{t} ({ledger[t]['why']})" if t in ledger else t for t in task_ids]
    sets = ", ".join(sorted({f"exercise {t[2:4]}" for t in task_ids}))
    return (
        f"Built with the course's {'; '.join(parts)}, standing in for yours: no marks are lost "
        f"here, as it is graded in {sets}; once yours passes there, run this cell again."
    )


def _fix_first(
    task: Task, seen: list[str], earlier: Callable[[str], TaskResult | None] | None
) -> str | None:
    """X-9: "This uses your one_hot, which fails its own checks: fix one_hot first.", or None."""
    if earlier is None:
        return None
    for name in task.depends_on:
        if USES + name not in seen:
            continue
        other = earlier(name)
        if other is None or other.status == "passed":
            continue
        if other.status == "not implemented":
            return f"This uses your {name}, which is not implemented yet: write {name} first."
        return f"This uses your {name}, which fails its own checks: fix {name} first."
    return None


# compare_values' messages for values that differ; other messages (a type, a shape, a task's own
# words) already name what is wrong, and "more than one thing" would send the learner astray
_VALUES_DIFFER = re.compile(r"differs? from the expected values")
_DTYPE_ONLY = re.compile(r"has dtype \w+, expected \w+$")  # compare_values' dtype message
DTYPE_HINT = (
    "the values are compared once the dtype is right. Look for a cast (.float(), .double(), "
    ".int(), .long()) that changes it, and for a tensor you create: it gets PyTorch's default "
    "dtype (int64 for integers, float32 for floats) unless you pass dtype= or build it from the "
    "input (torch.full_like, torch.zeros_like, .to(x.dtype))"
)


TRUTH_HINT = (
    "`if t:` (or `t or ...`) asks a tensor of many values for one truth value, which PyTorch "
    "refuses: for an argument or attribute that may be None, test `if t is not None:`"
)
# a device named inside the learner's code: the checks run on the CPU, a notebook may not have
# ("Torch not compiled with CUDA enabled" where a Colab GPU notebook is graded on a laptop)
_DEVICE_CRASH = re.compile(r"Expected all tensors to be on the same device|not compiled with CUDA")
DEVICE_HINT = (
    "your code names a device: the checks give it CPU tensors, and a class grader may have no "
    "GPU. Take the device from an input (`torch.zeros_like(x)`, `torch.arange(n, "
    "device=x.device)`), create parameters and modules with no device (no `.to(device)` or "
    "`device=` inside `__init__`), and move the finished model with `model.to(device)` outside"
)


# a crash no listed mistake explains: the check shows no traceback, so say how to get one
TRACEBACK = (
    "To see the line that fails, run your code in a cell of its own on an input like this "
    "one: the traceback points at it"
)


EMPTY_ERROR = (  # a bare `raise ValueError` (or `ValueError()`) where an error case is checked
    "your {name} carries no message: say what was expected and what came, "
    'e.g. raise {name}(f"x must be ..., got {{x!r}}")'
)


def changed_message(names: list[str]) -> str:
    which = " and ".join(f"`{n}`" for n in names)
    return (
        f"your code changed its input {which} in place (its values after the call differ from "
        "those it was given); whoever calls it may still need them: build new values instead "
        "(`x = x - c`, not `x -= c`; no methods ending in `_` such as `add_`, and no `pop` or "
        "`append` on a list you were given, no `pop` or `del` on a dict), or work on a copy "
        "(`x.clone()`, `list(ids)`, `dict(merges)`)"
    )


def _judge_one(task: Task, case: Case, outcome: dict, want_hint: bool = True) -> str | None:
    status = outcome.get("status")
    if outcome.get("changed"):  # the first thing to fix: later checks ran on changed inputs
        return changed_message(outcome["changed"])
    if outcome.get("left"):  # right or not, it breaks the learner's later cells
        return outcome["left"]
    if status == "harness":
        return outcome.get("message", "the check could not run your code")
    if case.raises is not None:
        if status == "raised" and case.raises.__name__ in outcome.get("types", []):
            name = outcome["types"][0]  # the raised class; every statement asks for a message
            said = outcome["message"].removeprefix(f"{name}:").strip()
            return None if said else EMPTY_ERROR.format(name=name)
        if status == "raised":
            return f"expected a {case.raises.__name__}, but your code raised {outcome['message']}"
        return f"expected your code to raise a {case.raises.__name__} with a clear message"
    if status == "raised":
        if outcome.get("not_implemented"):
            return "not implemented yet (NotImplementedError)"
        hint = _listed_hint(task, case, raised=outcome["message"]) if want_hint else None
        if want_hint and "Boolean value of Tensor with more than one" in outcome["message"]:
            hint = hint or TRUTH_HINT  # `if mask:`, `self.bias or zeros`: any set, any task
        if want_hint and _DEVICE_CRASH.search(outcome["message"]):
            hint = hint or DEVICE_HINT
        raised = f"your code raised {outcome['message']}".rstrip(".")
        return f"{raised}. Hint: {hint}" if hint else f"{raised}. {TRACEBACK}"
    if status != "ok":
        return outcome.get("message", "your code did not return a result")
    got, got_gradients = _gradients_apart(outcome["value"])
    with warnings.catch_warnings():  # the reference's own warnings are not the learner's
        warnings.simplefilter("ignore")
        want, want_gradients = _gradients_apart(_plain(task.expected(case)))
    message = task.compare(got, want, case)
    if message is None and want_gradients is not None:  # right values: are they learnable?
        message = compare_gradients(got_gradients, want_gradients)
        listed = message and want_hint and _listed_hint(task, case, got, gradients=got_gradients)
        if not listed:
            return message
        # the named cause first: "your result is right, but ..." read as if the result were fine
        cause = listed if listed.endswith(".") else f"{listed}."
        return f"Hint: {cause} Here {message.split(' Hint: ')[0].rstrip('.')}"
    if message is None or not want_hint:
        return message
    hint = _listed_hint(task, case, got) or task.diagnose(got, want, case)
    if hint:
        return f"{message.rstrip('.')}. Hint: {hint}"
    if _DTYPE_ONLY.search(message):  # one thing is wrong, and the message names it
        return f"{message}. Hint: {DTYPE_HINT}"
    if task.mistakes() and _VALUES_DIFFER.search(message):  # EX02-3: no known mistake fits
        return (
            f"{message}. None of the usual single mistakes gives this result, so more than "
            "one thing may be wrong: test your function on a small input you can check by "
            "hand"
        )
    return message


# The exercises name a layer's sub-modules flat, as PyTorch does (linear1, multihead_attn, norm2,
# position_embedding); course_lib's layers contain the earlier lessons' pieces, so the same
# parameters sit one level deeper (feed_forward.linear1, cross_attn.attn, cross_attn.norm,
# position_embedding.embedding). Cases carry the exercise's names.
_EXERCISE_NAMES = (
    (re.compile(r"(^|\.)feed_forward\."), r"\1"),
    (re.compile(r"(^|\.)cross_attn\.attn\."), r"\1multihead_attn."),
    (re.compile(r"(^|\.)cross_attn\.norm\."), r"\1norm2."),
    (re.compile(r"(^|\.)position_embedding\.embedding\."), r"\1position_embedding."),
)


def exercise_name(key: str) -> str:
    """A course_lib state-dict key -> the name the exercises use for it."""
    for pattern, replacement in _EXERCISE_NAMES:
        key = pattern.sub(replacement, key)
    return key


def exercise_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A course_lib module's state dict with the exercises' (PyTorch's flat) names."""
    return {exercise_name(key): value for key, value in state.items()}


def load_weights(module: Any, state_dict: dict[str, Tensor], what: str = "your module") -> None:
    """Load the reference's weights into a learner's module, with a clear message on mismatch."""
    if not isinstance(module, torch.nn.Module):
        raise GradingError(f"{what} should be a torch.nn.Module, got {type(module).__name__}")
    own = module.state_dict()
    home = type(module).__module__
    if home.startswith("course_lib.") and not home.startswith("course_lib.grading"):
        # the reference itself: the exercise's names -> its own
        ours = {exercise_name(key): key for key in own}
        state_dict = {ours.get(key, key): value for key, value in state_dict.items()}
    missing = [k for k in state_dict if k not in own]
    no_bias = [k for k in missing if k.endswith(".bias") and k[:-5] + ".weight" in own]
    if missing and len(no_bias) == len(missing):
        layer = no_bias[0][:-5]
        raise GradingError(
            f"{what}'s {layer} has no bias, but the task's layers have one: create it with "
            f"bias=True (the default of nn.Linear)"
        )
    parent, _, name = missing[0].rpartition(".") if missing else ("", "", "")
    owner = dict(module.named_modules()).get(parent)
    if isinstance(getattr(owner, name, None), Tensor):  # self.weight = torch.ones(d_model)
        raise GradingError(
            f"{what}'s {missing[0]} is a plain tensor, not a parameter: wrap it in "
            "nn.Parameter(...), so that it is learned, saved and loaded"
        )
    nested = [k for k in own if k.endswith("." + missing[0])] if missing else []
    if nested:  # self.feed_forward = FeedForward(...): linear1 one level too deep
        raise GradingError(
            f"{what} has {missing[0]!r} one level deeper, as {nested[0]!r}: the task names it "
            f"{missing[0]!r}, so create {missing[0].split('.')[0]} on the module itself, not "
            "inside a sub-module (the check loads its weights by these names)"
        )
    if missing:
        raise GradingError(
            f"{what} has no parameter named {missing[0]!r}; it has "
            f"{', '.join(own) or 'no parameters'}. Name the sub-modules as the task says."
        )
    for key, value in state_dict.items():
        if own[key].shape != value.shape:
            raise GradingError(
                f"{what}'s {key} has shape {_shape(own[key])}, expected {_shape(value)}"
            )

    # a second name for a tensor the task asks for (nn.Sequential(self.linear1, ...)) is no extra
    def storage(key: str) -> tuple:
        return own[key].data_ptr(), own[key].shape, own[key].stride()

    asked = {storage(k) for k in state_dict}
    # a persistent buffer of one's own is extra too: exercise 09 loads GPT-2 strictly into it
    extra = [k for k in own if k not in state_dict and storage(k) not in asked]
    if extra:
        biases = all(
            k.rpartition(".")[2] == "bias" and k[:-4] + "weight" in state_dict for k in extra
        )
        others = any(k.rpartition(".")[2] == "bias" for k in state_dict)  # bias=True asked
        buffers = set(extra) & {name for name, _ in module.named_buffers()}
        message = f"{what} has {'buffers' if buffers else 'parameters'} the task does not ask for: "
        message += ", ".join(extra)
        if buffers:
            message += (
                ". A buffer of your own stays out of the loaded weights with "
                "register_buffer(name, tensor, persistent=False)"
            )
        lm_head = extra == ["lm_head.bias"]  # a GPT's head never has a bias
        if biases and (
            others or lm_head or "bias" not in inspect.signature(type(module)).parameters
        ):
            # these layers never have a bias (SwiGLU takes no bias argument at all)
            even = " even when the others have one" if others or lm_head else ""
            message += f". These layers have no bias{even}: build them with bias=False"
        elif biases:
            message += (
                ". This case asks for layers without biases (bias=False): pass bias=bias on to "
                "every layer that has one (nn.Linear(..., bias=bias), your LayerNorm(..., "
                "bias=bias))"
            )
        raise GradingError(message)
    module.load_state_dict(state_dict, strict=False)  # every name checked above; aliases follow
