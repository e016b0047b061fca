"""What ex02's tasks share: the lesson section two of them cite, the float32 hints, the
NaN-where-a-stable-softmax-has-none test, the softmax(dim=2)-on-2-D-scores test, and the
refusal of a wrong result from code that reads a size from the notebook's variables."""

from __future__ import annotations

import types

import torch

from ...core import GradingError, _gradients_apart

SDPA_LESSON = "lesson 02, section 'Scaled dot-product attention, step by step'"
F64 = torch.float64

FLOAT32_DIGITS = (
    "your float64 result is right only to float32's digits: part of it was computed in float32 "
    "(a .float(), or a tensor made without dtype=); keep the inputs' dtype throughout"
)
FLOAT32_SCALE = (
    "your scale is a float32 tensor (torch.sqrt(torch.tensor(d_k)) is float32): its root of a "
    "d_k that is not a perfect square has float32's 7 digits, too few for float64 scores; "
    "divide by math.sqrt(d_k) (or d_k ** 0.5), a Python float"
)


NAN_SHIFT = (
    "NaN appears where a softmax that subtracts each row's own maximum has none: exp overflowed "
    "to inf (inf / inf) or every exp of a row underflowed to 0 (0 / 0). Subtract each row's "
    "maximum, scores.amax(dim=-1, keepdim=True), as your softmax of task 1 does: the whole "
    "tensor's (scores.max()), a row's mean, minimum or first entry leaves exponents far above "
    "or all far below 0"
)


def _nan_where_none(got, want) -> bool:
    pairs = zip(got, want, strict=False) if isinstance(got, (tuple, list)) else [(got, want)]
    return any(
        isinstance(mine, torch.Tensor)
        and mine.is_floating_point()
        and bool(mine.isnan().any())
        and not bool(right.isnan().any())
        for mine, right in pairs
    )


def _softmax_dim_2(failure, error, case) -> bool:
    """The first failure is an IndexError for dim 2 in a softmax (or max) of 2-D scores."""
    if failure is None or failure[0] is not IndexError or "got 2)" not in str(error):
        return False
    n_q, n_k = case.args[0].shape[-2], case.args[1 if len(case.args) == 3 else 0].shape[-2]
    shapes = [shape for shape in failure[2] if shape is not None]
    return failure[1] in _SOFTMAX_OPS and shapes[:1] == [(n_q, n_k)]


_SOFTMAX_OPS = ("softmax", "amax", "max", "logsumexp", "exp", "sum")


def _global_ints(fn) -> dict[str, int]:
    """The module-level ints (not bools) that `fn`, the functions defined in it and the notebook
    functions it calls read by name: in a notebook, sizes an earlier cell left (d_k = 4)."""
    found: dict[str, int] = {}
    seen, todo = set(), [fn]
    while todo:
        f = todo.pop()
        if not isinstance(f, types.FunctionType) or f in seen:
            continue
        seen.add(f)
        codes = [f.__code__]
        while codes:
            code = codes.pop()
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            for name in code.co_names:
                value = f.__globals__.get(name)
                if isinstance(value, int) and not isinstance(value, bool):
                    found[name] = value
                elif isinstance(value, types.FunctionType) and value.__module__ == f.__module__:
                    todo.append(value)
    return found


def refuse_global_sizes(task, obj, case, value, name: str = "q") -> None:
    """A result that is wrong from code that reads an int of the notebook's globals: that size
    stays fixed while the inputs' change. Named before the listed mistakes, which a fixed
    scale can match by chance on one case (isqrt(8) = 2 = sqrt(4), d_k = sqrt(16)) (#hunt19)."""
    leftovers = _global_ints(obj)
    if not leftovers or case.raises is not None:
        return
    # the right value from the wrong version with no mistake: the reference itself, called
    # while the learner's call is watched, would count as the learner's call of it
    right = task.wrong(*case.args, **case.kwargs, mistake="")
    if task.compare(_gradients_apart(value)[0], right, case) is None:
        return
    raise GradingError(_read_globals(leftovers, case, name))


def crash_from_global_sizes(obj, case, error: Exception, name: str = "q") -> GradingError | None:
    """The error of code that reads an int of the notebook's globals (n = 5 for the distances
    of a call whose lengths are 3 and 6), with that hint; None when it reads none."""
    leftovers = _global_ints(obj)
    if not leftovers or case.raises is not None:
        return None
    hint = _read_globals(leftovers, case, name)
    return GradingError(f"your code raised {type(error).__name__}: {error}. Hint: {hint}")


def _read_globals(leftovers: dict[str, int], case, name: str) -> str:
    names = ", ".join(f"{key} = {number}" for key, number in leftovers.items())
    return (
        f"your code reads {names} from the notebook's variables (left by an earlier cell), not "
        f"from its inputs, so that size stays fixed while the inputs' sizes change (this call's "
        f"{name} has shape {tuple(case.args[0].shape)}): take every size from the tensors you "
        "are given, inside the function, e.g. d_k = q.shape[-1], n_k = k.shape[-2]"
    )
