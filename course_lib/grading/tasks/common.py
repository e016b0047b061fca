"""What the exercise modules share: random inputs, masks, and two kinds of task.

- `randn`, `randint`, `lengths_mask`, `stable_softmax`: inputs and small pieces of the wrong
  implementations (which must not call the graded references).
- `randns` (several inputs in one call) and `all_close` (a comparison within a stated tolerance,
  for cases whose last digits a correct answer may compute otherwise), at the end.
- `ModuleTask`: a task whose learner writes an `nn.Module` class; its `call` builds the class
  with the case's sizes, loads the reference weights and runs `forward`.
- `HintOnError`: a task whose known mistakes may *raise* (e.g. `.T` on a batch); when the
  learner's code raises as one of them does, the error gets that mistake's hint.

Not an exercise module (those are `exNN.py`), so importing it registers nothing.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from ..core import (
    Case,
    GradingError,
    Task,
    _input_names,
    exercise_name,
    load_weights,
    resolve,
    with_gradients,
)

__all__ = [
    "HintOnError",
    "ModuleTask",
    "OpRecorder",
    "failure_of",
    "lengths_mask",
    "randint",
    "randn",
    "stable_softmax",
]


# The hint for attention scaled by sqrt(d_v), shared by every task whose cases have d_v != d_k
D_V_SCALE_HINT = (
    "the scores are divided by sqrt(d_v); the scale is sqrt(d_k), the length of the query and "
    "key vectors in each dot product q . k (the values may have another length)"
)


# The hint for d_k read from shape[2] of q or k: the last axis of a 3-D tensor only
D_K_FROM_SHAPE_2 = (
    "you took d_k from shape[2], which is d_k only when q is 3-D; with more batch dimensions it "
    "is another axis: d_k is the last dimension, q.shape[-1]"
)


def randn(
    gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0
) -> Tensor:
    """Standard normal numbers of the given shape drawn from `gen`, times `scale`."""
    x = torch.randn(*shape, generator=gen, dtype=dtype)
    return x if scale == 1.0 else x * scale


def randint(gen: torch.Generator, high: int, *shape: int) -> Tensor:
    """Integers in [0, high) of the given shape drawn from `gen` (int64)."""
    return torch.randint(0, high, shape, generator=gen)


# Softmax over every key, the masked weights zeroed, the rows rescaled: right in exact arithmetic
RENORMALISED_HINT = (
    "you took the softmax over every key, then zeroed the masked ones and rescaled the rows: "
    "when a masked key scores far above the allowed ones, their weights underflow to 0 before "
    "you rescale. Fill the masked SCORES with -inf before the softmax"
)


def far_blocked_key() -> tuple[Tensor, Tensor, Tensor]:
    """query (1, 1, 4) of 10s and memory (1, 2, 4) whose second row, of 15s, scores 300 through
    identity projections (d_k 4), the first 0; keep (1, 2) = [True, False] blocks the second.
    Softmax before masking underflows the allowed weight to 0 in float32, and rescaling the
    zeroed row divides 0 by 0. No random draw: the notebook's check fails it too."""
    memory = torch.tensor([[[1.0, -1.0, 1.0, -1.0], [15.0] * 4]])
    return torch.full((1, 1, 4), 10.0), memory, torch.tensor([[True, False]])


def lengths_mask(lengths: list[int], n_k: int) -> Tensor:
    """(batch, 1, n_k) bool, True for the first `length` keys of each row (a padding mask)."""
    return (torch.arange(n_k) < torch.tensor(lengths).unsqueeze(-1)).unsqueeze(-2)


def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax with the maximum subtracted, for the wrong implementations."""
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


# --------------------------------------------------------------------------------------------
# Tasks whose learner writes a module
# --------------------------------------------------------------------------------------------


class ModuleTask(Task):
    """A task whose learner writes an nn.Module class, checked against the reference's weights.

    `call` builds the learner's class with `init_args(case)`, checks that it made an
    nn.Module, moves it to the dtype of the weights, loads `weights(case)` (with a clear message
    on a missing, misnamed or misshapen parameter) and returns `run(module, case)`: by default
    `forward(*case.args, **case.kwargs)` in eval mode, without gradients. A subclass overrides
    only the hooks whose defaults do not fit. A module is trained, so every case also judges
    its gradients (`with_gradients`: with respect to each floating input and each parameter),
    unless `backward` is False.
    """

    backward = True

    def init_args(self, case: Case) -> tuple[tuple, dict]:
        """Positional and keyword arguments of the constructor (default: `data["sizes"]`)."""
        return tuple(case.data["sizes"]), {}

    def weights(self, case: Case) -> dict[str, Tensor]:
        """The state dict to load (default: `data["state_dict"]`)."""
        return case.data["state_dict"]

    def not_a_module(self, built: Any) -> str:
        """The message when the constructor did not make an nn.Module."""
        return f"your {self.name} should be a torch.nn.Module, got {type(built).__name__}"

    def build(self, obj: Any, case: Case) -> nn.Module:
        if isinstance(obj, nn.Module):  # check("ex03.MultiHeadAttention", MultiHeadAttention(8, 2))
            raise GradingError(
                f"you passed a module built from your class (a {type(obj).__name__} instance); the "
                f"check builds its own with each case's sizes: pass the class itself, "
                f'check("{self.id}", {self.name})'
            )
        args, kwargs = self.init_args(case)
        module = obj(*args, **kwargs)
        if not isinstance(module, nn.Module):
            raise GradingError(self.not_a_module(module))
        return module

    def call(self, obj: Any, case: Case) -> Any:
        module = self.build(obj, case)
        state = self.weights(case)
        module = module.to(next(iter(state.values())).dtype)
        load_weights(module, state, f"your {self.name}")
        value = self.run(module, case)
        if not self.backward:
            return value
        # the statement's names (the reference's), not the learner's
        names = _input_names(resolve(self.reference) if self.reference else obj)
        inputs = {f"the input {n}": a for n, a in zip(names, case.args, strict=False)}

        def forward(leaves: list) -> Any:
            module.eval()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                return module(*leaves, **case.kwargs)

        named = module.named_parameters(remove_duplicate=False)  # an alias may come first
        parameters = {exercise_name(n): p for n, p in named}
        return with_gradients(value, forward, inputs, parameters)

    def run(self, module: nn.Module, case: Case) -> Any:
        """Run the loaded module on the case (default: forward in eval mode, no gradients)."""
        module.eval()
        with torch.no_grad():
            return module(*case.args, **case.kwargs)


KEPT_INPUTS = (
    "your module kept an input from an earlier call (a cache of key and value, or of the "
    "memory): each call must attend to the inputs it is given, as a new batch brings new ones; "
    "keep no input on self between calls"
)


def call_on_other_inputs(module: nn.Module, args: list, kwargs: dict) -> None:
    """A first call, its result dropped, on other values of the same shapes (float tensors
    negated, bool masks reversed along the keys), so that a module that keeps inputs from its
    first call gives the real call's result from the wrong ones."""

    def other(a: Any) -> Any:
        if not isinstance(a, Tensor):
            return a
        return -a if a.is_floating_point() else a.flip(-1)

    try:  # an error here is the real call's to report
        with torch.no_grad():
            module(*[other(a) for a in args], **{k: other(v) for k, v in kwargs.items()})
    except Exception:  # noqa: BLE001, S110
        pass


def without_dropout(module: nn.Module, args: list, kwargs: dict, what: str) -> Any:
    """`module(*args, **kwargs)` in eval mode, without gradients, once it gave the same in
    training mode: a layer whose statement has no dropout must not drop anything there either."""
    with torch.no_grad():
        trained = module.train()(*args, **kwargs)
        evaluated = module.eval()(*args, **kwargs)
    if isinstance(trained, Tensor) and isinstance(evaluated, Tensor):
        same = torch.allclose(trained, evaluated, atol=1e-6, equal_nan=True)  # NaN: not dropout
        if trained.shape == evaluated.shape and not same:
            raise GradingError(
                f"your {what} gives other outputs in training mode than in eval mode, so it has "
                "dropout the task does not ask for (PyTorch's layers default to dropout=0.1; "
                "this one has none): leave out nn.Dropout, MultiHeadAttention without dropout"
            )
    return evaluated


# --------------------------------------------------------------------------------------------
# Tasks whose mistakes may raise
# --------------------------------------------------------------------------------------------


def _op_name(func: Any) -> str:
    """`matmul` for torch.matmul, Tensor.matmul and Tensor.__matmul__ alike."""
    return getattr(func, "__name__", type(func).__name__).strip("_")


def _shapes(value: Any) -> Any:
    if isinstance(value, Tensor):
        return tuple(value.shape)
    if isinstance(value, (tuple, list)):
        return tuple(_shapes(v) for v in value)
    return None


class OpRecorder(TorchFunctionMode):
    """Notes the first torch operation that raised while it was active: what an error *did*.

    `failure` is (exception type, operation name, shapes of its tensor arguments), or None.
    Two pieces of code that fail the same way have the same failure, whatever PyTorch's
    message says. `calls` lists (operation, args, kwargs) of every call to a function in `watch`.
    """

    def __init__(self, watch: tuple = ()):
        super().__init__()
        self.watch = watch
        self.calls: list[tuple[Any, tuple, dict]] = []
        self.failure: tuple | None = None

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.watch:
            self.calls.append((func, args, kwargs))
        try:
            return func(*args, **kwargs)
        except Exception as error:
            if self.failure is None:
                self.failure = (type(error), _op_name(func), _shapes(args))
            raise


def failure_of(fn: Any, *args: Any, **kwargs: Any) -> tuple | None:
    """How `fn(*args, **kwargs)` fails (see OpRecorder), or None when it does not fail in torch."""
    recorder = OpRecorder()
    try:
        with warnings.catch_warnings(), recorder:
            warnings.simplefilter("ignore")
            fn(*args, **kwargs)
    except Exception:  # noqa: BLE001  (a wrong version may raise anything)
        return recorder.failure
    return None


class HintOnError(Task):
    """A task whose mistakes may *raise* (e.g. `.T` on a batch): the error gets their hint.

    The learner's error matches a mistake when the mistake fails in the same torch operation,
    on arguments of the same shapes, with the same exception type. A subclass may also watch
    the torch functions in `watch` and judge their calls in `checked` (e.g. a look-up where a
    product was asked for), or find other hints for an error in `_hint_for_error`.
    """

    watch: tuple = ()

    def call(self, obj, case):
        recorder = OpRecorder(self.watch)
        try:
            with recorder:
                value = obj(*case.args, **case.kwargs)
        except (NotImplementedError, GradingError):
            raise
        except Exception as error:  # noqa: BLE001  (a learner's code may raise anything)
            hint = self._hint_for_error(obj, case, recorder.failure, error)
            if hint is None:
                raise
            raise GradingError(
                f"your code raised {type(error).__name__}: {error}. Hint: {hint}"
            ) from None
        return self.learnable(obj, case, self.checked(value, case, recorder.calls))

    def checked(self, value: Any, case: Case, calls: list) -> Any:
        """The value to judge, given the watched calls that made it (default: the value)."""
        return value

    def _hint_for_error(self, obj, case, failure: tuple | None, error=None) -> str | None:
        if failure is None:
            return None
        for wrong, hint in self.mistakes():
            if wrong is not obj and failure_of(wrong, *case.args, **case.kwargs) == failure:
                return hint
        return None


# --- g-early ---


def randns(
    gen: torch.Generator, *shapes: tuple[int, ...], dtype: torch.dtype = torch.float32, scale=1.0
) -> tuple[Tensor, ...]:
    """One `randn(gen, *shape, dtype=dtype, scale=scale)` per shape, drawn in that order."""
    return tuple(randn(gen, *shape, dtype=dtype, scale=scale) for shape in shapes)


def all_close(got: Any, want: Any, tol: float) -> bool:
    """`got` equals `want` within rtol = atol = `tol`: float tensors of the same shape and dtype,
    or tuples of them (for cases whose last digits a correct answer may compute otherwise)."""
    if isinstance(want, (tuple, list)):
        return (
            isinstance(got, (tuple, list))
            and len(got) == len(want)
            and all(all_close(g, w, tol) for g, w in zip(got, want, strict=True))
        )
    return (
        isinstance(got, Tensor)
        and isinstance(want, Tensor)
        and got.shape == want.shape
        and got.dtype == want.dtype
        and want.is_floating_point()
        and torch.allclose(got, want, rtol=tol, atol=tol)
    )


def float32_digits(got: Any, want: Any, hint: str = "") -> str | None:
    """A hint when a float64 result has float32's digits only (x.float(), then back)."""
    if isinstance(want, Tensor) and want.dtype == torch.float64 and all_close(got, want, 1e-5):
        return (
            "your float64 result has float32's precision: compute in x's dtype, without a "
            "float32 round trip (x.float(), then back)" + hint
        )
    return None


# --- g-mid ---


def wrong_attention(q, k, v, mask=None, *, scale=None, fill=float("-inf"), dim=-1, **slips):
    """softmax(q k^T / sqrt(d_k), masked where `mask` is False) v, as (output, weights), with
    the pieces a wrong answer changes as arguments: `scale` the size under the root (1: none),
    `fill` for the masked scores, `dim` the softmax's axis; the `slips` that are True: `inverted`
    (~mask), `zero_after` (masked weights zeroed after the softmax), `nan_to_zero` (NaN weights of
    a fully masked row made 0), `renormalised` (with zero_after, the rows rescaled), `log`
    (log_softmax for softmax)."""
    if mask is not None and slips.get("inverted"):
        mask = ~mask
    scores = q @ k.transpose(-2, -1) / (q.shape[-1] if scale is None else scale) ** 0.5
    if mask is not None and not slips.get("zero_after"):
        scores = scores.masked_fill(~mask, fill)
    weights = scores.log_softmax(dim) if slips.get("log") else scores.softmax(dim)
    if mask is not None and slips.get("zero_after"):
        weights = weights.masked_fill(~mask, 0.0)
    weights = weights.nan_to_num(0.0) if slips.get("nan_to_zero") else weights
    if slips.get("renormalised"):  # after zero_after: the rows rescaled to sum to 1 (or 0/0)
        weights = weights / weights.sum(dim, keepdim=True)
    return weights @ v, weights


def residual_sublayers(x, steps, norm_first, mistake=""):
    """Run `steps`, (norm, sublayer) pairs, each in a residual connection, post-norm
    (x = norm(x + sublayer(x))) or pre-norm (x = x + sublayer(norm(x))), with one named
    mistake where it bites: the wrong sub-layers of ex06 and the wrong layers of ex07."""
    pre = {"always_post": False, "pre_post_swapped": not norm_first}.get(mistake, norm_first)
    layer_input, last = x, len(steps) - 1
    for i, (norm, sublayer) in enumerate(steps):
        if mistake == "output_unused" and i == last - 1:  # h = norm(x + ...): h never read
            continue
        stale = (mistake, i) in {("ff_on_input", last), ("cross_reads_input", 1)}
        reads = layer_input if stale else x  # the sub-layer's input
        no_residual = mistake == "no_residual" or (mistake, i) in {
            ("no_attn_residual", 0),
            ("no_cross_residual", 1),
            ("no_ff_residual", last),
        }
        if mistake == "residual_outside":  # one residual around the whole layer
            residual = layer_input if i == last else 0
        else:  # stale_residual: residual = x set once, before the first sub-layer
            residual = 0 if no_residual else layer_input if mistake == "stale_residual" else x
        if pre:
            unnormed = (mistake, i) in {("pre_no_last_norm", last), ("pre_cross_unnormed", 1)}
            h = reads if unnormed else norm(reads)
            normed_residual = mistake in ("residual_normed", "residual_of_normed")
            x = (h if normed_residual else residual) + sublayer(h)
            x = norm(x) if mistake == "pre_norm_output_normalised" else x
        elif mistake in ("residual_normed", "normed_sublayer"):
            x = residual + norm(sublayer(reads))
        elif (mistake, i) in {("no_final_norm", last), ("no_first_norm", 0)}:
            x = residual + sublayer(reads)
        else:
            x = norm(residual + sublayer(reads))
    return steps[-1][0](x) if pre and mistake == "pre_final_norm" else x  # GPT-2's ln_f, inside
