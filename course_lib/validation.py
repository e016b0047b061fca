"""Input checks shared by every module: errors that tell a learner what to fix.

Each helper raises `ValueError` (or `TypeError` for a wrong type or dtype) naming the argument,
what was expected and what it got, instead of letting a cryptic error surface from deep inside a
matrix multiply.

Checks run at the door. A public function or a module's `forward` marked `@door` checks its
inputs only when it is called from outside (`if at_the_door(): ...`): a learner who calls
`split_heads` or a `MultiHeadAttention` gets the clear message, but when a `GPT` calls its
layers, which call their attention, which calls `split_heads`, the inner calls skip the checks
the outer one already made. One counter says how deep inside such calls the program is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import Tensor

__all__ = [
    "door",
    "at_the_door",
    "check_tensor",
    "check_sequence",
    "check_ids",
    "check_dropout",
    "check_eps",
    "check_choice",
    "check_same_last_dim",
    "check_positive_int",
    "check_bool_mask",
    "check_floating",
    "check_features",
    "check_same_batch",
    "check_attention_mask",
    "check_attention_inputs",
    "check_decoder_inputs",
]


_F = TypeVar("_F", bound=Callable)
_depth = 0  # how many @door calls are running: 1 = the outermost, where checks run


def door(function: _F) -> _F:
    """Mark `function` (a public function or a `forward`) as a place where inputs are checked."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        global _depth
        _depth += 1
        try:
            return function(*args, **kwargs)
        finally:
            _depth -= 1

    return wrapper  # type: ignore[return-value]


def at_the_door() -> bool:
    """True in the outermost `@door` call (or outside any): the place to check inputs."""
    return _depth <= 1


def _shape(x: Tensor) -> str:
    return "(" + ", ".join(str(s) for s in x.shape) + ")"


def check_tensor(
    x: object,
    name: str,
    *,
    ndim: int | None = None,
    min_ndim: int | None = None,
    shape_hint: str = "",
    dtype: torch.dtype | Sequence[torch.dtype] | None = None,
    allow_empty: bool = False,
) -> Tensor:
    """Check that `x` is a tensor of the expected rank and dtype; return it.

    `shape_hint` is the expected shape in words, e.g. "(batch, seq, d_model)"; it goes into the
    error message.
    """
    hint = f" {shape_hint}" if shape_hint else ""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor{hint}, got {type(x).__name__}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions{hint}, got shape {_shape(x)}")
    if min_ndim is not None and x.dim() < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions{hint}, got shape {_shape(x)}"
        )
    if dtype is not None:
        allowed = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
        if x.dtype not in allowed:
            names = " or ".join(str(d).replace("torch.", "") for d in allowed)
            raise TypeError(
                f"{name} must have dtype {names}, got {str(x.dtype).replace('torch.', '')}"
            )
    if not allow_empty and x.numel() == 0:
        raise ValueError(f"{name} is empty (shape {_shape(x)}); it needs at least one element")
    return x


def check_sequence(
    x: object, name: str, d_model: int, seq: str = "seq", owner: str = "this layer"
) -> Tensor:
    """Check that `x` is a floating (batch, seq, d_model) tensor with the d_model of `owner`."""
    hint = f"(batch, {seq}, d_model={d_model})"
    check_tensor(x, name, ndim=3, shape_hint=hint)
    check_floating(x, name)
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{name} has {x.shape[-1]} features but {owner} has d_model={d_model} "
            f"(expected {hint}, got shape {_shape(x)})"
        )
    return x


def check_dropout(dropout: object) -> float:
    """Check that `dropout` is a probability in [0, 1)."""
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"dropout must be in [0, 1) (a probability), got {dropout!r}")
    return float(dropout)


def check_eps(eps: object) -> float:
    """Check that `eps` (a norm's small constant) is a non-negative number."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    return float(eps)


def check_choice(value: object, name: str, choices: Sequence[str]) -> str:
    """Check that `value` is one of `choices` (e.g. an activation's name)."""
    if value not in choices:
        raise ValueError(f"{name} must be {' or '.join(map(repr, choices))}, got {value!r}")
    return value  # type: ignore[return-value]


def check_ids(ids: object, name: str = "ids", seq: str = "seq") -> Tensor:
    """Check that `ids` is a (batch, seq) tensor of token ids (int64 or int32)."""
    return check_tensor(
        ids,
        name,
        ndim=2,
        shape_hint=f"(batch, {seq}) of token ids",
        dtype=(torch.int64, torch.int32),
    )


def check_floating(x: Tensor, name: str) -> Tensor:
    """Check that `x` holds floating-point numbers (attention and softmax need them)."""
    if not torch.is_floating_point(x):
        raise TypeError(
            f"{name} must be a floating-point tensor (float32 or float64), got "
            f"{str(x.dtype).replace('torch.', '')}; convert with {name}.float()"
        )
    return x


def check_same_last_dim(a: Tensor, a_name: str, b: Tensor, b_name: str, what: str) -> None:
    """Check that two tensors share their last dimension (`what` names it, e.g. "d_k")."""
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"{a_name} has {what}={a.shape[-1]} but {b_name} has {what}={b.shape[-1]}; "
            f"{a_name} and {b_name} must share their last dimension "
            f"(shapes {_shape(a)} and {_shape(b)})"
        )


def check_positive_int(value: object, name: str) -> int:
    """Check that `value` is a positive int (a size, a count of heads, a length)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_bool_mask(mask: object, name: str, target_shape: Sequence[int], target: str) -> Tensor:
    """Check that `mask` is a boolean tensor broadcastable to `target_shape` (True = may attend).

    `target` describes the shape in words, e.g. "(..., n_q, n_k)".
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must have dtype bool (True = may attend), got "
            f"{str(mask.dtype).replace('torch.', '')}; build it with a comparison such as "
            f"ids != pad_id, or convert with {name}.bool()"
        )
    try:
        torch.broadcast_shapes(tuple(mask.shape), tuple(target_shape))
    except RuntimeError:
        raise ValueError(
            f"{name} of shape {_shape(mask)} does not broadcast to the attention scores of shape "
            f"({', '.join(str(s) for s in target_shape)}) {target}"
        ) from None
    return mask


def check_features(x: object, name: str, d: int, what: str) -> Tensor:
    """Check that `x` is a floating (..., d) tensor: the input of a per-token layer (`what`)."""
    check_tensor(x, name, min_ndim=1, shape_hint=f"(..., d={d})")
    check_floating(x, name)
    if x.shape[-1] != d:
        raise ValueError(
            f"{name} has {x.shape[-1]} features but this {what} has d_model={d} "
            f"(in its last dimension; {name} shape {_shape(x)})"
        )
    return x


def check_same_batch(a: Tensor, a_name: str, b: Tensor, b_name: str) -> None:
    """Check that a target batch and its encoder output (or source) have the same batch size."""
    if a.shape[0] != b.shape[0]:
        raise ValueError(
            f"{a_name} has batch={a.shape[0]} but {b_name} has batch={b.shape[0]}; each target "
            "sequence goes with the encoder output of its own source sentence"
        )


def check_attention_mask(
    mask: object, name: str, batch: int, num_heads: int, n_q: int, n_k: int
) -> None:
    """A boolean mask (True = may attend) broadcastable to (batch, n_q, n_k), or a 4-D one to
    (batch, num_heads, n_q, n_k)."""
    if isinstance(mask, Tensor) and mask.dim() == 4:
        check_bool_mask(mask, name, (batch, num_heads, n_q, n_k), "(batch, num_heads, n_q, n_k)")
    else:
        check_bool_mask(mask, name, (batch, n_q, n_k), "(batch, n_q, n_k)")


def check_attention_inputs(
    query: object,
    key: object,
    value: object,
    mask: object,
    is_causal: bool,
    d_model: int,
    num_heads: int,
    cached: int = 0,
) -> None:
    """The inputs of multi-head attention: query (batch, n_q, d_model), key and value
    (batch, n_k, d_model), a mask over the `cached` earlier keys and the new ones, or
    is_causal=True with as many queries as keys."""
    for t, name, seq in ((query, "query", "n_q"), (key, "key", "n_k"), (value, "value", "n_k")):
        check_sequence(t, name, d_model, seq, "this attention")
    if key.shape[:2] != value.shape[:2]:
        raise ValueError(
            f"key {_shape(key)} and value {_shape(value)} must have the same "
            "batch size and length: each key has one value"
        )
    if query.shape[0] != key.shape[0]:
        raise ValueError(f"query has batch={query.shape[0]} but key has batch={key.shape[0]}")
    batch, n_q, n_k = query.shape[0], query.shape[1], key.shape[1]
    if is_causal:
        if mask is not None:
            raise ValueError(
                "give either mask or is_causal=True, not both (combine the "
                "causal mask into mask instead)"
            )
        if n_q != n_k:
            raise ValueError(
                f"is_causal=True needs as many queries as keys, got n_q={n_q} and n_k={n_k}"
            )
    if mask is not None:
        check_attention_mask(mask, "mask", batch, num_heads, n_q, n_k + cached)


def check_decoder_inputs(
    tgt: object,
    name: str,
    memory: object,
    tgt_mask: object,
    memory_mask: object,
    num_heads: int,
) -> None:
    """A decoder's inputs: tgt (batch, n_tgt, d_model), memory (batch, n_src, d_model) and
    the masks of its self-attention (n_tgt x n_tgt) and cross-attention (n_tgt x n_src)."""
    d_model = tgt.shape[-1] if isinstance(tgt, Tensor) and tgt.dim() else 0
    check_sequence(tgt, name, d_model, "n_tgt")
    check_sequence(memory, "memory", d_model, "n_src")
    check_same_batch(tgt, name, memory, "memory")
    batch, n_tgt, n_src = len(tgt), tgt.shape[1], memory.shape[1]
    if tgt_mask is not None:
        check_attention_mask(tgt_mask, "tgt_mask", batch, num_heads, n_tgt, n_tgt)
    if memory_mask is not None:
        check_attention_mask(memory_mask, "memory_mask", batch, num_heads, n_tgt, n_src)
