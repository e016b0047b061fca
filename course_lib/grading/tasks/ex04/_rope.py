"""What ex04's two RoPE tasks share (transfer: the layout of GPT-NeoX and Llama): RoPE with a
named mistake in either layout, their case builders, the hints both give, and the base task
that scores q·k at shifted positions and catches angles kept from an earlier call."""

from __future__ import annotations

import torch

from ...core import Case, GradingError, changed_message
from ..common import all_close, randn, randns
from ._shared import (
    _POSITIONS_1D,
    _POSITIONS_ROW,
    F64,
    _base_e4,
    _d_minus_1,
    _degrees,
    _divided_outside,
    _divisor_bracketed,
    _frequencies,
    _pair_from_1,
    _PositionalTask,
    _positions_over_len,
    _times_2pi,
    _times_pi,
    _zero,
)


def _rope_variant(x, positions=None, *, layout="adjacent", mistake=""):
    """RoPE with the named mistake ("": none). `layout` is the task's: "adjacent" rotates pairs
    (2i, 2i+1), "halves" pairs (i, i + d/2) (the rotate-half layout of GPT-NeoX and Llama)."""
    d = x.shape[-1]
    if mistake == "perm_swapped":  # apply_rope(x[..., argsort(perm)])[..., perm]: swapped
        perm = torch.arange(d).view(2, d // 2).t().reshape(d)  # [0, d/2, 1, d/2 + 1, ...]
        return _rope_variant(x[..., perm.argsort()], positions)[..., perm]
    if mistake == "view":  # x.view(-1, seq, d) and the like: a transposed x cannot be viewed
        x.view(-1)
    if mistake in ("halves", "halves_mixed_frequencies", "adjacent", "adjacent_in_halves_out"):
        layout = mistake.removesuffix("_mixed_frequencies").removesuffix("_in_halves_out")
    out_layout = {"adjacent_out_halves": "halves", "halves_out_adjacent": "adjacent"}
    out_layout["adjacent_in_halves_out"] = "halves"  # the lesson's pairs, this task's output
    if mistake == "positions_or":  # a tensor of several values has no truth value: raises
        positions = positions or torch.arange(x.shape[-2])
    if mistake == "ignore_positions" or positions is None:  # seq_axis_1: x.shape[1] as seq
        positions = torch.arange(x.shape[1 if mistake == "seq_axis_1" else -2], device=x.device)
        positions = positions + (mistake == "from_1")
        if mistake == "linspace":  # torch.linspace(0, seq, seq): the end included
            positions = torch.linspace(0, len(positions), len(positions), device=x.device)
    elif mistake == "integer_positions":  # .long() rounds 0.5 towards 0
        positions = positions.long()
    positions = positions.to(x.device, F64)  # on x's device, as a GPU needs
    positions = positions if mistake == "positions_1d" else positions[:, None]
    positions = positions.T if mistake == "positions_row" else positions  # (1, seq): raises
    if mistake == "constant":
        positions = torch.ones_like(positions)
    if mistake == "positions_over_len":  # positions / seq, seq = x.shape[-2]
        positions = positions / x.shape[-2]
    if mistake == "table_cat_dim0":  # cat((angles, angles), dim=0): a (2 seq, d / 2) table
        angles = positions * _frequencies(d).to(x.device)
        return x * torch.cat((angles, angles), 0).cos()
    angles = positions * _frequencies(d, mistake).to(x.device)  # (seq, d / 2)
    first = second = angles  # the angles of each pair's first and second feature
    if mistake in ("mixed_frequencies", "halves_mixed_frequencies"):  # repeat_interleave'd table
        first, second = angles.repeat_interleave(2, dim=-1).chunk(2, dim=-1)
    elif mistake == "cat_table":  # the rotate-half table, cat((angles, angles), -1), read in pairs
        first, second = torch.cat((angles, angles), -1).unflatten(-1, (-1, 2)).unbind(-1)
    elif mistake == "column_frequencies":  # feature j at its own 10000^(-j/d)
        first, second = (
            positions * 10000.0 ** (-torch.arange(d, dtype=F64, device=x.device) / d)
        ).chunk(2, -1)
    if mistake == "cos_sin_swapped":
        first, second = torch.pi / 2 - first, torch.pi / 2 - second
    cos0, sin0 = torch.cos(first).to(x.dtype), torch.sin(first).to(x.dtype)
    cos1, sin1 = torch.cos(second).to(x.dtype), torch.sin(second).to(x.dtype)
    if layout == "adjacent":
        x0, x1 = x[..., 0::2], x[..., 1::2]
    else:
        half = d / 2 if mistake == "float_half" else d // 2  # a float slice index raises
        x0, x1 = x[..., :half], x[..., half:]
    sign = -1.0 if mistake == "sign" else 1.0
    r0 = x0 * cos0 - sign * x1 * sin0
    if mistake == "no_minus":  # x0 cos a + x1 sin a: the minus of the first component lost
        r0 = x0 * cos0 + x1 * sin0
    if mistake == "overwritten":  # r0 written into x before the second line read x0 from it
        x0 = r0
    r1 = sign * x0 * sin1 + x1 * cos1
    if mistake == "reflect":  # the sign of the second component's x1 term flipped
        r1 = x0 * sin1 - x1 * cos1
    if mistake == "not_swapped":  # x * cos + cat((-x1, x2)) * sin: rotate_half's halves kept
        r0, r1 = x0 * cos0 - x0 * sin0, x1 * cos1 + x1 * sin1
    if mistake == "out_halves_swapped":  # cat((r1, r0)): the rotated halves in each other's place
        r0, r1 = r1, r0
    if out_layout.get(mistake, layout) == "halves":
        out = torch.cat((r0, r1), -1)
    else:
        out = torch.stack((r0, r1), -1).flatten(-2)
    if mistake == "perm_not_inverted":  # apply_rope(x[..., perm])[..., perm]: perm read twice
        perm = torch.arange(d).view(2, d // 2).t().reshape(d)  # [0, d/2, 1, d/2 + 1, ...]
        out = out[..., perm[perm]]
    return out


def _x(gen, description, shape, positions=None, dtype=torch.float32, raises=None) -> Case:
    """A case of x of `shape` drawn from `gen`, and the given positions."""
    return Case(description, (randn(gen, *shape, dtype=dtype), positions), raises=raises)


def _shift_case(
    gen, description, shape=(2, 5, 16), base=(0, 1, 3, 4, 9), shifts=(0, 7, -3, 50), dtype=F64
) -> Case:
    """q·k of q and k of `shape` after RoPE at positions `base` moved by each of `shifts` (by
    default the float64 case both layouts check)."""
    q, k = randns(gen, shape, shape, dtype=dtype)
    return Case(description, data={"q": q, "k": k, "base": torch.tensor(base), "shifts": shifts})


def _positions_cases(gen) -> list[Case]:
    """Four cases both layouts share: heads, random and negative positions, a transposed x."""
    return [
        _x(
            gen,
            "x (2, 3, 7, 8) (batch, heads, seq, d), positions 0..6",
            (2, 3, 7, 8),
            torch.arange(7),
        ),
        Case(
            "float64 x (2, 6, 16), random positions up to 100",
            (randn(gen, 2, 6, 16, dtype=F64), torch.randint(0, 100, (6,), generator=gen)),
        ),
        _x(
            gen,
            "float64 x (3, 4, 5, 32), negative positions [-3, 0, 2, 10, 11]",
            (3, 4, 5, 32),
            torch.tensor([-3, 0, 2, 10, 11]),
            F64,
        ),
        Case(
            "x (2, 3, 7, 8) that is not contiguous, as split heads are (a (2, 7, 3, 8) "
            ".transpose(1, 2), which your GPT's attention rotates), positions 0..6",
            (randn(gen, 2, 7, 3, 8).transpose(1, 2), torch.arange(7)),
        ),
    ]


def _after_other_positions(gen, description, shape, dtype=torch.float32) -> Case:
    """x of `shape` at random positions, judged on a second call: a first call, its result
    dropped, rotates another x of that shape by those positions moved by 3, so that cos and sin
    kept from it (a table cached by (seq, d) or by x.shape) turn this x by the wrong angles. The
    q·k cases cannot tell: moving every position alike leaves q·k as it is."""
    x, earlier_x = randns(gen, shape, shape, dtype=dtype)
    positions = torch.randint(0, 60, (shape[-2],), generator=gen)
    return Case(description, (x, positions), data={"earlier_args": (earlier_x, positions + 3)})


_KEPT_ANGLES = (
    "your result is x rotated by the positions of the call before (on an x of the same shape, "
    "at these positions moved by 3), not by the positions given now: cos and sin kept between "
    "calls (a table cached by (seq, d) or by x.shape, or built at the first call) ignore later "
    "positions. Compute the angles from the positions of every call (a cache needs the "
    "positions themselves in its key)"
)


def _scores_or_call(obj, case):
    """For a shift case, (shifts, ..., seq, seq): q·k after `obj` (RoPE) at the positions
    base + s, for each shift s; else obj on the case."""
    if "shifts" not in case.data:
        return obj(*case.args, **case.kwargs)
    d = case.data
    q, k = d["q"].clone(), d["k"].clone()  # copies, compared after the call
    positions = [d["base"] + s for s in d["shifts"]]
    scores = torch.stack([obj(q, p) @ obj(k, p).transpose(-2, -1) for p in positions])
    if not (torch.equal(q, d["q"]) and torch.equal(k, d["k"])):
        raise GradingError(changed_message(["x"]))
    return scores


_ODD = "an odd last dimension, x (2, 3, 5) (must raise ValueError)"
_START_AT_1 = (
    "with positions=None your positions start at 1; they are 0, 1, ..., seq-1 "
    "(torch.arange(seq)): the vector at position 0 is not rotated"
)
_INTEGER_POSITIONS = (
    "the positions may be fractional (0.5 apart here): converting them to integers (.long(), "
    ".int()) cuts 0.5 to 0; convert them to floats, positions.to(torch.float64)"
)
_REFLECTED = (
    "the second component has the wrong sign: (x0, x1) -> (x0 cos a - x1 sin a, "
    "x0 sin a + x1 cos a); with x0 sin a - x1 cos a the pair is reflected, not rotated"
)
_IGNORED_POSITIONS = (
    "you ignored `positions` and used 0, 1, ..., seq-1; use the positions you are given "
    "(arange only when positions is None)"
)
_SEQ_AXIS_1 = (
    "with positions=None the positions are 0, 1, ..., seq-1 with seq = x.shape[-2], the "
    "second-to-last axis: x.shape[1] is seq only when x is (batch, seq, d); a 2-D x (seq, d) "
    "has its sequence on axis 0"
)
_POSITIONS_OR = (
    "`positions or torch.arange(...)` asks a tensor of several values for its truth value, "
    "which it has not: test `if positions is None:`"
)
_OVERWRITTEN = (
    "the second feature of each pair was computed from the already rotated first one: the "
    "rotated first features were written into the tensor before the second line read them. "
    "Compute both from the original features (torch.stack or torch.cat the two results)"
)
_VIEW = (
    "x may be a view that is not contiguous (split heads are a transpose, and your GPT's "
    "attention rotates them): .view cannot regroup its axes. Use .reshape, or let the (seq, "
    "d/2) angles broadcast over the leading axes"
)
_CONSTANT = (
    "every position gets the same rotation, so positions change nothing; the angle is "
    "position * 10000^(-2i/d) and grows with the position"
)


_OFF_THE_DEVICE = (  # the messages of a CPU tensor meeting a meta (or CUDA) one
    "is not on the expected device",
    "Expected all tensors to be on the same device",
)


UNJUDGED = "ran into what the meta device cannot do (.item(), .numpy()): not judged here"


def _on_the_meta_device(obj, x, positions) -> str:
    """The learner's RoPE on PyTorch's meta device (shapes and dtypes, no data), which stands
    in for a GPU, with the case's positions and with None: a tensor made on the CPU inside it
    (torch.arange(seq) without device=) meets x there as it would on CUDA, where exercise 09's
    GPT calls it (#hunt19). What comes back: the results' shapes, dtypes and device types.
    Errors of another kind (.item(), .numpy() on meta) are not judged."""
    x = x.detach().to("meta")
    try:
        with torch.no_grad():
            outs = [obj(x, positions.to("meta")), obj(x, None)]
    except Exception as error:  # noqa: BLE001  (a learner's code may raise anything)
        if any(text in str(error) for text in _OFF_THE_DEVICE):
            raise GradingError(
                f"on a GPU your code would raise: {str(error).replace('meta', 'cuda:0')}. "
                "Hint: a tensor you create (torch.arange(seq), the frequencies, cos and sin) is "
                "made on the CPU unless told otherwise, and x may be on a GPU (your GPT in "
                "exercise 09 runs there): create it on x's device, torch.arange(seq, "
                "device=x.device), and move given positions with positions.to(x.device). (The "
                "check runs your function once on PyTorch's 'meta' device, which stands in for "
                "a GPU.)"
            ) from None
        if "meta" not in str(error):  # the learner's own error (a stub's too): theirs to see
            raise
        return UNJUDGED
    return "; ".join(
        f"{tuple(out.shape)} {out.dtype} on {out.device.type}"
        if isinstance(out, torch.Tensor)
        else type(out).__name__
        for out in outs
    )


class _RopeTask(_PositionalTask):
    layout = "adjacent"  # pairs (2i, 2i+1); "halves": pairs (i, i + d/2)
    data_inputs = ("positions",)  # not learned: a float tensor of them needs no gradient

    def compare(self, got, want, case):
        if case.data.get("device"):
            if got in (want, UNJUDGED):
                return None
            return f"on the meta device (a GPU's stand-in) your results are {got}, expected {want}"
        return super().compare(got, want, case)

    def dtype_hint(self, got, want):
        if got == F64:  # float64 cos and sin times a float32 x promote it
            return (
                "the result keeps x's dtype: cos and sin made in float64 (positions.double(), "
                "dtype=torch.float64) turn a float32 x into float64 when multiplied; convert "
                "them with .to(x.dtype), as the lesson's rope_by_hand does"
            )
        return (
            f"the result keeps x's dtype, here {str(want).removeprefix('torch.')}: a cast such "
            "as .float() on x or on the result (as some libraries' RoPE does) loses it; compute "
            "in x's dtype, or return .to(x.dtype)"
        )

    def call(self, obj, case):
        if case.data.get("device"):
            return _on_the_meta_device(obj, *case.args)
        if "earlier_args" in case.data:  # its result is dropped; an error is the real call's
            try:
                with torch.no_grad():
                    obj(*(a.clone() for a in case.data["earlier_args"]))
            except Exception:  # noqa: BLE001, S110  (a learner's code may raise anything)
                pass
        try:
            value = _scores_or_call(obj, case)
            return value if "shifts" in case.data else self.learnable(obj, case, value)
        except RuntimeError as error:
            if "shifts" in case.data or case.raises or isinstance(error, NotImplementedError):
                raise  # (an odd d that raised RuntimeError gets the ValueError message)
            x, positions = case.args
            if positions is not None or x.dim() < 3:
                raise
            raise GradingError(
                f"your code raised RuntimeError: {error}. Hint: with positions=None the "
                "positions are 0, 1, ..., seq-1 where seq = x.shape[-2] (the second-to-last "
                "axis), whatever batch dimensions come first and however long x is (a table "
                "made once for a fixed length is too short for a longer x)"
            ) from None
        except ValueError as error:  # the evenness check on another axis than the last
            x = case.data["q"] if "shifts" in case.data else case.args[0]
            odd = [f"x.shape[{i}] = {n}" for i, n in enumerate(x.shape[:-1], -x.dim()) if n % 2]
            if case.raises or x.shape[-1] % 2 or not odd:
                raise
            raise GradingError(
                f"your code raised ValueError: {error}. Hint: d = x.shape[-1] = {x.shape[-1]}, "
                f"the last axis, is even here, but {', '.join(odd)} is odd: test the last "
                "axis for evenness, d = x.shape[-1] (x.shape[-2] is the sequence length, which "
                "may be odd, and the axes before it are batch axes)"
            ) from None
        except (AttributeError, TypeError) as error:  # positions.double() with positions=None
            if "shifts" in case.data or case.raises or case.args[1] is not None:
                raise
            if "NoneType" not in str(error):
                raise
            raise GradingError(
                f"your code raised {type(error).__name__}: {error}. Hint: positions=None means "
                "0, 1, ..., seq-1: if positions is None: positions = torch.arange(x.shape[-2])"
            ) from None

    def diagnose(self, got, want, case):
        earlier = case.data.get("earlier_args")
        if earlier is not None and isinstance(got, torch.Tensor) and got.shape == want.shape:
            stale = _rope_variant(case.args[0], earlier[1], layout=self.layout)
            if all_close(got, stale, 1e-4):
                return _KEPT_ANGLES
        return None

    def wrong(self, x, positions=None, *, mistake):
        return _rope_variant(x, positions, layout=self.layout, mistake=mistake)


# rows the two RoPE layouts share, each block in the place both tables give it
_POSITION_ROWS = {
    "from_1": _START_AT_1,
    "integer_positions": _INTEGER_POSITIONS,
    "seq_axis_1": _SEQ_AXIS_1,
    "positions_1d": _POSITIONS_1D,
    "positions_row": _POSITIONS_ROW,
    "positions_or": _POSITIONS_OR,
    "overwritten": _OVERWRITTEN,
    "view": _VIEW,
}
_SCALE_ROWS = {
    "times_pi": _times_pi("d"),
    "positions_over_len": _positions_over_len("seq"),
    "times_2pi": _times_2pi("d"),
    "d_minus_1": _d_minus_1("d"),
    "pair_from_1": _pair_from_1("d", "the first pair rotates by the position itself"),
}

# the frequency slips of the table (task 1) that are the same slips here, at the tables' ends
_FREQUENCY_ROWS = {
    "zero": _zero("d", "every pair turns by the position itself (the frequency 1)"),
    "divided_outside": _divided_outside("d"),
    "base_e4": _base_e4("d"),
    "divisor_bracketed": _divisor_bracketed("d"),
    "degrees": _degrees("d"),
}


def _last_cases(gen, d: int) -> list[Case]:
    """The cases both layouts end with: an odd last dimension, 40 positions, and a call after
    a first one at other positions (x of width d)."""
    return [
        _x(gen, _ODD, (2, 3, 5), raises=ValueError),
        _x(gen, "x (2, 40, 4), positions=None: 40 positions, 0, 1, ..., 39", (2, 40, 4)),
        _after_other_positions(
            gen,
            f"x (2, 6, {d}) at random positions, after a first call on another x (2, 6, {d}) at "
            "these positions moved by 3: the rotated values themselves (cos and sin come from "
            "the positions of each call)",
            (2, 6, d),
        ),
        Case(  # #hunt19: a table made on the CPU crashed exercise 09's GPT on a GPU only
            f"on a GPU: x (2, 3, 6, {d}) and positions 5, 6, ..., 10 on PyTorch's meta device "
            "(a stand-in for a GPU: shapes and dtypes, no values), then positions=None: every "
            "tensor you make must be on x's device, and so is the result",
            (randn(gen, 2, 3, 6, d), torch.arange(5, 11)),
            data={"device": True},
        ),
    ]
