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

import datetime
import functools
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from torch import Tensor

__all__ = [
    "door",
    "at_the_door",
    "is_int",
    "is_number",
    "check_tensor",
    "check_sequence",
    "check_ids",
    "check_dropout",
    "check_eps",
    "check_choice",
    "check_same_last_dim",
    "check_batch_broadcast",
    "check_positive_int",
    "check_heads_divide",
    "check_flag",
    "check_callable",
    "check_token_id",
    "check_bool_mask",
    "check_floating",
    "check_same_dtype",
    "check_features",
    "check_size",
    "check_same_batch",
    "check_attention_mask",
    "check_attention_inputs",
    "check_decoder_inputs",
    "check_qkv",
    "check_memory_mask",
    "check_text",
    "check_date",
    "check_token_ids",
    "check_id_list",
    "check_id_pair",
    "check_boolean",
    "check_even",
    "check_positions_input",
    "check_sampling_options",
    "check_logits",
    "check_number",
    "check_logits_target",
    "check_smoothing",
    "check_non_negative_int",
    "check_context",
    "check_cross_attention_inputs",
    "check_source",
]


_F = TypeVar("_F", bound=Callable)
_INTEGER_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
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


def is_int(value: object) -> bool:
    """An int, and not a bool: Python counts True and False as ints, and neither is a size."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """An int or a float, and not a bool (see is_int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
    x: object,
    name: str,
    d_model: int,
    seq: str = "seq",
    owner: str = "this layer",
    weights: Tensor | None = None,
) -> Tensor:
    """Check that `x` is a floating (batch, seq, d_model) tensor with the d_model of `owner`
    (and the dtype and device of its `weights`, see check_features)."""
    hint = f"(batch, {seq}, d_model={d_model})"
    check_tensor(x, name, ndim=3, shape_hint=hint)
    return check_features(x, name, d_model, owner, hint, weights)


def check_dropout(dropout: object, name: str = "dropout") -> float:
    """Check that `dropout` is a probability in [0, 1)."""
    if not is_number(dropout) or not 0 <= dropout < 1:
        raise ValueError(f"{name} must be in [0, 1) (a probability), got {dropout!r}")
    return float(dropout)


def check_eps(eps: object) -> float:
    """Check that `eps` (a norm's small constant) is a non-negative number."""
    if not is_number(eps) or eps < 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    return float(eps)


def check_choice(value: object, name: str, choices: Sequence[str]) -> str:
    """Check that `value` is one of `choices` (e.g. an activation's name)."""
    if value not in choices:
        raise ValueError(f"{name} must be {' or '.join(map(repr, choices))}, got {value!r}")
    return value  # type: ignore[return-value]


def check_ids(
    ids: object, name: str = "ids", seq: str = "seq", vocab_size: int | None = None
) -> Tensor:
    """Check that `ids` is a (batch, seq) tensor of token ids (int64 or int32), each in
    [0, vocab_size) when vocab_size is given."""
    check_tensor(
        ids,
        name,
        ndim=2,
        shape_hint=f"(batch, {seq}) of token ids",
        dtype=(torch.int64, torch.int32),
    )
    if vocab_size is not None:
        low, high = torch.stack((ids.min(), ids.max())).tolist()  # one sync on a GPU
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"{name} holds ids outside [0, vocab_size={vocab_size}): it contains "
                f"{low if low < 0 else high}; every id must name a row of the embedding table"
            )
    return ids


def check_floating(x: Tensor, name: str) -> Tensor:
    """Check that `x` holds floating-point numbers (attention and softmax need them)."""
    if not torch.is_floating_point(x):
        raise TypeError(
            f"{name} must be a floating-point tensor (float32 or float64), got "
            f"{str(x.dtype).replace('torch.', '')}; convert with {name}.float()"
        )
    return x


def check_same_dtype(tensors: Sequence[Tensor], names: Sequence[str], fix: str) -> None:
    """Check that tensors one operation combines (a matrix multiply, a concatenation) share
    one dtype: "A has dtype a but B has b; FIX" for two, the list of dtypes for more. `fix`
    says what to do, e.g. "convert w_q with w_q.to(x.dtype)"."""
    dtypes = [str(t.dtype).replace("torch.", "") for t in tensors]
    if len(set(dtypes)) == 1:
        return
    if len(dtypes) == 2:
        problem = f"{names[0]} has dtype {dtypes[0]} but {names[1]} has {dtypes[1]}"
    else:
        listed = f"{', '.join(names[:-1])} and {names[-1]}"
        problem = f"{listed} must share one dtype, got {', '.join(dtypes)}"
    raise TypeError(f"{problem}; {fix}")


def check_same_last_dim(a: Tensor, a_name: str, b: Tensor, b_name: str, what: str) -> None:
    """Check that two tensors share their last dimension (`what` names it, e.g. "d_k")."""
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"{a_name} has {what}={a.shape[-1]} but {b_name} has {what}={b.shape[-1]}; "
            f"{a_name} and {b_name} must share their last dimension "
            f"(shapes {_shape(a)} and {_shape(b)})"
        )


def check_batch_broadcast(a: Tensor, a_name: str, b: Tensor, b_name: str) -> None:
    """Check that the batch dimensions of two (..., rows, cols) tensors, all but the last two,
    broadcast together (as a matrix multiply of a batch needs)."""
    try:
        torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of {a_name} {tuple(a.shape[:-2])} and {b_name} "
            f"{tuple(b.shape[:-2])} do not broadcast: each must be equal or 1, counted from the "
            f"right (shapes {_shape(a)} and {_shape(b)})"
        ) from None


def check_positive_int(value: object, name: str) -> int:
    """Check that `value` is a positive int (a size, a count of heads, a length)."""
    if not is_int(value) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_heads_divide(d_model: int, num_heads: int) -> None:
    """Check that num_heads divides d_model: each head gets d_model / num_heads features."""
    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}; each head gets "
            f"d_model / num_heads features, so choose num_heads among the divisors of {d_model}"
        )


def check_flag(value: object, name: str) -> bool:
    """Check that a switch is True or False (1, 0 and None are refused: they hide a typo)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def check_callable(fn: object, name: str = "fn") -> Callable:
    """Check that `fn` is a function to call (a timing or a measurement calls it), not the
    result of calling one."""
    if not callable(fn):
        raise TypeError(
            f"{name} must be a function to call, e.g. lambda: model(x), got "
            f"{type(fn).__name__}: pass the call itself, not its result"
        )
    return fn


def check_token_id(value: object, name: str, meaning: str) -> int:
    """Check that a special token's id (`meaning`, e.g. "the id of the <bos> token") is an int."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int ({meaning}), got {value!r}")
    return value


def check_bool_mask(mask: object, name: str, target_shape: Sequence[int], target: str) -> Tensor:
    """Check that `mask` is a boolean tensor broadcastable to `target_shape` (True = may attend):
    it may repeat along its size-1 dimensions but neither grow nor add any (that would make
    more attention scores, and outputs, than the queries and keys have).

    `target` describes the shape in words, e.g. "(..., n_q, n_k)".
    """
    check_boolean(mask, name)
    scores = "(" + ", ".join(str(s) for s in target_shape) + ")"
    try:
        shape = torch.broadcast_shapes(tuple(mask.shape), tuple(target_shape))
    except RuntimeError:
        raise ValueError(
            f"{name} of shape {_shape(mask)} does not broadcast to the attention scores of shape "
            f"{scores} {target}"
        ) from None
    if shape != torch.Size(target_shape):
        raise ValueError(
            f"{name} of shape {_shape(mask)} would enlarge the attention scores of shape "
            f"{scores} {target} to {tuple(shape)}. A mask lines up with the scores from the "
            "right and may only repeat along its size-1 dimensions, e.g. a (batch, 1, n_k) "
            "padding mask; mask.unsqueeze(1) moves its axes onto other ones of the scores: use "
            "the mask as it is"
        )
    return mask


def check_size(x: Tensor, name: str, dim: int, size: int, unit: str, reason: str) -> None:
    """Check that dimension `dim` of `x` has `size` entries; else "NAME has N UNIT but REASON"."""
    if x.shape[dim] != size:
        raise ValueError(f"{name} has {x.shape[dim]} {unit} but {reason}")


def check_features(
    x: object,
    name: str,
    d_model: int,
    owner: str = "this layer",
    shape_hint: str = "",
    weights: Tensor | None = None,
) -> Tensor:
    """Check that `x` is a floating tensor whose last dimension is the d_model of `owner` (a
    per-token layer takes any (..., d_model); `shape_hint` names a stricter expected shape).
    `weights`, a parameter of `owner`: x must sit on its device and have its dtype, as a matrix
    multiply with it needs (under torch.autocast, which casts for the multiply, any dtype)."""
    hint = shape_hint or f"(..., d_model={d_model})"
    check_tensor(x, name, min_ndim=1, shape_hint=hint)
    check_floating(x, name)
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{name} has {x.shape[-1]} features but {owner} has d_model={d_model} "
            f"(expected {hint}, got shape {_shape(x)})"
        )
    if weights is None:
        return x
    if x.dtype != weights.dtype and not torch.is_autocast_enabled(x.device.type):
        dtype, want = (str(t.dtype).replace("torch.", "") for t in (x, weights))
        raise TypeError(
            f"{name} has dtype {dtype} but the weights of {owner} are {want}; convert {name} "
            f"with {name}.to(torch.{want}), or the model with model.to(torch.{dtype})"
        )
    if x.device != weights.device:
        raise ValueError(
            f"{name} is on {x.device} but the weights of {owner} are on {weights.device}; move "
            f"{name} with {name}.to('{weights.device}'), or the model with model.to('{x.device}')"
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
    weights: Tensor | None = None,
) -> None:
    """The inputs of multi-head attention: query (batch, n_q, d_model), key and value
    (batch, n_k, d_model), a mask over the `cached` earlier keys and the new ones, or
    is_causal=True with as many queries as keys; all of the dtype and device of `weights`."""
    for t, name, seq in ((query, "query", "n_q"), (key, "key", "n_k"), (value, "value", "n_k")):
        check_sequence(t, name, d_model, seq, "this attention", weights)
    check_flag(is_causal, "is_causal")
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
    d_model: int,
    num_heads: int,
    memory_name: str = "memory",
    weights: Tensor | None = None,
) -> None:
    """A decoder's inputs: tgt (batch, n_tgt, d_model), memory (batch, n_src, d_model) and
    the masks of its self-attention (n_tgt x n_tgt) and cross-attention (n_tgt x n_src).
    `memory_name` is what the caller calls memory (an EncoderDecoder's `src`); `weights` see
    check_features."""
    check_sequence(tgt, name, d_model, "n_tgt", weights=weights)
    check_sequence(memory, memory_name, d_model, "n_src", weights=weights)
    check_same_batch(tgt, name, memory, memory_name)
    batch, n_tgt, n_src = len(tgt), tgt.shape[1], memory.shape[1]
    if tgt_mask is not None:
        check_attention_mask(tgt_mask, "tgt_mask", batch, num_heads, n_tgt, n_tgt)
    if memory_mask is not None:
        check_attention_mask(memory_mask, "memory_mask", batch, num_heads, n_tgt, n_src)


# The checks of one lesson's idea each, called at the door of that lesson's module


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Scaled dot-product attention's q, k, v (lesson 02): shapes, dtypes, broadcasting."""
    check_tensor(q, "q", min_ndim=2, shape_hint="(..., n_q, d_k)")
    check_tensor(k, "k", min_ndim=2, shape_hint="(..., n_k, d_k)")
    check_tensor(v, "v", min_ndim=2, shape_hint="(..., n_k, d_v)")
    for t, name in ((q, "q"), (k, "k"), (v, "v")):
        check_floating(t, name)
    check_same_dtype((q, k, v), ("q", "k", "v"), "convert them to one, e.g. k.to(q.dtype)")
    check_same_last_dim(q, "q", k, "k", "d_k")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k has n_k={k.shape[-2]} keys but v has {v.shape[-2]} values; every key needs one "
            f"value (shapes {tuple(k.shape)} and {tuple(v.shape)})"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of q {tuple(q.shape[:-2])}, k {tuple(k.shape[:-2])} and "
            f"v {tuple(v.shape[:-2])} do not broadcast"
        ) from None


def check_memory_mask(memory_mask: Tensor, target: tuple[int, ...], words: str) -> None:
    """memory_mask must be bool and broadcast to the scores' shape without adding dimensions."""
    check_bool_mask(memory_mask, "memory_mask", target, words)


def check_text(text: object) -> None:
    """A tokenizer's text (lesson 01): a str that has UTF-8 bytes."""
    if not isinstance(text, str):
        hint = (
            " (decode it first, data.decode('utf-8'), or encode raw bytes with "
            "BPETokenizer.encode_bytes)"
            if isinstance(text, (bytes, bytearray))
            else ""
        )
        raise TypeError(f"text must be a str, got {type(text).__name__}{hint}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"text holds {text[error.start]!r} at position {error.start}, a lone "
            "surrogate that has no UTF-8 bytes, so it is not valid text"
        ) from None


def check_date(date: object) -> datetime.date:
    """A date for the date-translation data (lesson 08)."""
    if not isinstance(date, datetime.date):
        raise TypeError(f"date must be a datetime.date, got {type(date).__name__}")
    return date


def check_token_ids(ids: object, vocab_size: int, name: str = "ids") -> Tensor:
    """Token ids of any shape (lesson 01), each in [0, vocab_size)."""
    check_tensor(ids, name, shape_hint="(...,) of token ids", allow_empty=True)
    if ids.dtype not in _INTEGER_DTYPES:
        raise TypeError(
            f"{name} must hold integer token ids (dtype int64), got dtype "
            f"{str(ids.dtype).replace('torch.', '')}; convert with {name}.long()"
        )
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ValueError(
            f"{name} contains {bad}, outside [0, vocab_size) = [0, {vocab_size}); "
            "every id must name a row of the vocabulary"
        )
    return ids


def check_id_list(ids: object, name: str = "ids") -> Sequence[int]:
    """A list of int token ids (lesson 01's BPE pieces): a list, tuple or bytes of ints; not a
    str (its characters are not ids) and not a tensor (a tensor is never equal to a dict key)."""
    if isinstance(ids, str):
        raise TypeError(
            f"{name} must be a list of int ids, got a str; turn text into its byte ids first, "
            "list(text.encode('utf-8'))"
        )
    if not isinstance(ids, Sequence):  # bytes are a Sequence of ints; a tensor is not one
        hint = f"; convert it with {name}.tolist()" if hasattr(ids, "tolist") else ""
        raise TypeError(f"{name} must be a list of int ids, got {type(ids).__name__}{hint}")
    for i, value in enumerate(ids):
        if not is_int(value):
            raise TypeError(
                f"{name}[{i}] is {value!r} ({type(value).__name__}); {name} must hold int ids"
            )
    return ids


def check_id_pair(pair: object, name: str = "pair") -> tuple[int, int]:
    """Two int ids (a, b), e.g. the pair a BPE merge joins."""
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not all(is_int(i) for i in pair):
        raise TypeError(f"{name} must be a pair of two int ids (a, b), got {pair!r}")
    return pair[0], pair[1]


def check_boolean(mask: object, name: str) -> Tensor:
    """A mask (lesson 05): a torch.Tensor of dtype bool, True = may attend."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must have dtype bool (True = may attend), got "
            f"{str(mask.dtype).replace('torch.', '')}; build it with a comparison such as "
            f"ids != pad_id, or convert with {name}.bool()"
        )
    return mask


def check_even(d_model: int, name: str = "d_model") -> int:
    """A width that sinusoidal or rotary positions split into pairs (lesson 04)."""
    check_positive_int(d_model, name)
    if d_model % 2 != 0:
        raise ValueError(
            f"{name} must be even, got {d_model}: features come in (sin, cos) pairs "
            f"(2i, 2i+1), one pair per frequency"
        )
    return d_model


def check_positions_input(x: Tensor, d_model: int, max_len: int, start_pos: int) -> None:
    """The input of a positional encoding (lesson 04) and the positions it asks for."""
    check_sequence(x, "x", d_model, owner="this positional encoding")
    check_non_negative_int(start_pos, "start_pos")
    if start_pos + x.shape[1] > max_len:
        raise ValueError(
            f"positions {start_pos}..{start_pos + x.shape[1] - 1} were asked for but max_len="
            f"{max_len}: this module has no encoding beyond position {max_len - 1}; "
            f"build it with a larger max_len or use shorter sequences"
        )


def check_sampling_options(temperature: object, top_k: object, top_p: object) -> None:
    """Temperature, top-k and top-p of sampling (lesson 09)."""
    if not is_number(temperature):
        raise TypeError(f"temperature must be a number >= 0, got {temperature!r}")
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(
            f"temperature must be a finite number >= 0 (0 = greedy), got {temperature}"
        )
    if top_k is not None:
        if not is_int(top_k):
            raise TypeError(f"top_k must be None or a positive int, got {top_k!r}")
        if top_k < 1:
            raise ValueError(
                f"top_k must be None or at least 1 (keep the k most likely tokens), got {top_k}"
            )
    if top_p is not None:
        if not is_number(top_p):
            raise TypeError(f"top_p must be None or a number in (0, 1], got {top_p!r}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (a cumulative probability), got {top_p}")


def check_logits(logits: object) -> Tensor:
    """Next-token logits to sample from (lesson 09): (batch, vocab), floating point, every row
    with a largest logit that is a number: -inf masks a token out, but NaN, +inf or a row
    masked out entirely leave no distribution to draw from (torch.multinomial would fail deep
    inside, and the arg-max of temperature 0 would pick a token silently)."""
    check_tensor(logits, "logits", ndim=2, shape_hint="(batch, vocab)")
    check_floating(logits, "logits")
    row_max = logits.detach().amax(dim=-1)  # (batch,): NaN when the row holds a NaN
    if not bool(torch.isfinite(row_max).all()):  # one sync on a GPU
        row = int((~torch.isfinite(row_max)).nonzero()[0])
        what, why = {
            "nan": ("NaN (not a number)", "often a model whose training diverged"),
            "inf": ("+inf", "softmax turns it into NaN"),
            "-inf": ("-inf everywhere", "every token is masked out, none is left to draw"),
        }[str(float(row_max[row]))]
        raise ValueError(
            f"logits row {row} holds {what}: {why}; sampling needs at least one finite logit "
            "per row and no NaN or +inf (mask a token out with -inf)"
        )
    return logits


def check_number(value: object, name: str, positive: bool = True) -> float:
    """A finite number (lesson 08's schedules and training loop), positive unless told."""
    if not is_number(value) or not math.isfinite(value):
        raise TypeError(f"{name} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return float(value)


def check_logits_target(
    logits: object, target: object, name: str = "target", allow_empty: bool = True
) -> None:
    """A loss's logits (..., vocab) and integer `name` (...) (lessons 08 and 09)."""
    check_tensor(logits, "logits", min_ndim=2, shape_hint="(..., vocab)")
    check_floating(logits, "logits")
    check_tensor(
        target,
        name,
        shape_hint="(...) matching logits without its last dimension",
        dtype=(torch.int64, torch.int32),
        allow_empty=allow_empty,
    )
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"{name} has shape {tuple(target.shape)} but logits has shape {tuple(logits.shape)}; "
            f"{name} must have the shape of logits without its last (vocab) dimension"
        )


def check_smoothing(smoothing: object) -> float:
    """Label smoothing (lesson 08): a number in [0, 1]."""
    if not is_number(smoothing):
        raise TypeError(f"smoothing must be a number in [0, 1], got {smoothing!r}")
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"smoothing must be in [0, 1], got {smoothing!r}")
    return float(smoothing)


def check_non_negative_int(value: object, name: str, meaning: str = "") -> int:
    """Check that `value` is an int >= 0 (a bool is not accepted); `meaning` ends the message."""
    if not is_int(value) or value < 0:
        raise ValueError(f"{name} must be an int >= 0{meaning}, got {value!r}")
    return value


def check_context(ids: object, start: int, block_size: int, vocab_size: int | None = None) -> None:
    """A GPT's input: (batch, t) ids in [0, vocab_size) that, after `start` cached tokens, fit in
    its block_size."""
    check_ids(ids, "ids", vocab_size=vocab_size)
    check_non_negative_int(start, "start", " (the position of ids[:, 0])")
    if start + ids.shape[1] > block_size:
        raise ValueError(
            f"ids has {ids.shape[1]} tokens (after {start} cached ones) but the "
            f"model's context is block_size={block_size}; "
            "crop it to the last block_size tokens"
        )


def check_cross_attention_inputs(
    x: Tensor,
    memory: Tensor,
    memory_mask: Tensor | None,
    d_model: int,
    weights: Tensor | None = None,
) -> None:
    """The inputs of lesson 06's cross-attention sub-layer (`weights`: see check_features)."""
    check_sequence(x, "x", d_model, "n_q", "this sub-layer", weights)
    check_sequence(memory, "memory", d_model, "n_kv", "this sub-layer", weights)
    check_same_batch(x, "x", memory, "memory")
    if memory_mask is not None:
        check_memory_mask(
            memory_mask, (x.shape[0], x.shape[1], memory.shape[1]), "(batch, n_q, n_kv)"
        )


def check_source(
    src: Tensor,
    src_mask: Tensor | None,
    d_model: int,
    num_heads: int,
    weights: Tensor | None = None,
) -> None:
    """The encoder's input of an EncoderDecoder: features and an optional source mask
    (`weights`: see check_features)."""
    check_sequence(src, "src", d_model, "n_src", weights=weights)
    if src_mask is not None:
        n_src = src.shape[1]
        check_attention_mask(src_mask, "src_mask", len(src), num_heads, n_src, n_src)
