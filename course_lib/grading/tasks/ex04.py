"""ex04, positional encoding: the sinusoidal table, a shift as a rotation, and RoPE."""

from __future__ import annotations

import torch

from ..core import Case, GradingError, Task, changed_message, compare_values, register
from .common import randn

LESSON = "lesson 04, section "


def _frequencies(d_model: int, exponent: str = "2i") -> torch.Tensor:
    """(d_model / 2,) float64 frequencies; `exponent` picks the right one or a wrong one."""
    pair = torch.arange(d_model // 2, dtype=torch.float64)
    wrong_formula = {
        "base 1000": lambda: 1000.0 ** (-2 * pair / d_model),
        "base e^4": lambda: torch.exp(-2 * pair * 4.0 / d_model),  # math.log10(10000) for ln
        "inverted": lambda: 10000.0 ** (2 * pair / d_model),  # the minus sign dropped
        "not over d": lambda: 10000.0 ** (-2 * pair),  # the exponent not divided by d_model
        "divided outside": lambda: 10000.0 ** (-2 * pair) / d_model,  # exp(...) / d_model
        "zero": lambda: torch.ones_like(pair),  # 2 * i // d_model: integer division, 0
    }.get(exponent)
    if wrong_formula is not None:
        return wrong_formula()
    power = {"2i": 2 * pair, "i": pair, "4i": 4 * pair}[exponent]  # 4i: the 2 taken twice
    return 10000.0 ** (-power / d_model)


def _close_or_explain(got, want) -> str | None:
    """compare_values with a tolerance of 1e-4, which allows float32 angles computed another way
    (sin of p * frequency loses a few 1e-6 at the positions tested); wrong answers are O(1) off."""
    if (
        isinstance(got, torch.Tensor)
        and isinstance(want, torch.Tensor)
        and got.shape == want.shape
        and got.dtype == want.dtype
        and want.is_floating_point()
        and torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    ):
        return None
    if (
        isinstance(got, torch.Tensor)
        and isinstance(want, torch.Tensor)
        and got.shape == want.shape
        and got.dtype != want.dtype
    ):
        return f"your result has dtype {str(got.dtype)[6:]}, expected {str(want.dtype)[6:]}"
    return compare_values(got, want)


# --------------------------------------------------------------------------------------------
# sinusoidal_positional_encoding
# --------------------------------------------------------------------------------------------


def _table(
    seq_len,
    d_model,
    *,
    first_position=0,
    exponent="2i",
    layout="interleaved",
    even="sin",
    odd=None,
):
    positions = torch.arange(first_position, first_position + seq_len, dtype=torch.float64)
    angles = positions[:, None] * _frequencies(d_model, exponent)[None, :]
    first, second = (torch.sin, torch.cos) if even == "sin" else (torch.cos, torch.sin)
    second = {"sin": torch.sin, None: second}[odd]  # "sin": sin in the odd columns too
    if layout == "halves":
        pe = torch.cat((first(angles), second(angles)), dim=-1)
    else:
        pe = torch.empty(seq_len, d_model, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = first(angles), second(angles)
    return pe.float()


def _column_index_exponent(seq_len, d_model):
    positions = torch.arange(seq_len, dtype=torch.float64)[:, None]
    column = torch.arange(d_model, dtype=torch.float64)[None, :]
    angles = positions * 10000.0 ** (-column / d_model)
    pe = torch.where(column.long() % 2 == 0, torch.sin(angles), torch.cos(angles))
    return pe.float()


def _inverted_frequency(seq_len, d_model):
    positions = torch.arange(seq_len, dtype=torch.float64)[:, None]
    angles = positions * (1.0 / _frequencies(d_model))[None, :]
    pe = torch.empty(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return pe.float()


@register
class SinusoidalPositionalEncoding(Task):
    id = "ex04.sinusoidal_positional_encoding"
    lesson = LESSON + "'The sinusoidal encoding'"
    reference = "course_lib.positional.sinusoidal_positional_encoding"

    def cases(self, gen):
        return [
            Case("seq_len=1, d_model=2 (position 0 only)", (1, 2)),
            Case("seq_len=10, d_model=4", (10, 4)),
            Case("seq_len=7, d_model=6", (7, 6)),
            Case("seq_len=33, d_model=10", (33, 10)),
            Case("seq_len=50, d_model=16", (50, 16)),
            Case("seq_len=64, d_model=64", (64, 64)),
            Case(
                "an odd d_model=5 (must raise ValueError: features come in pairs)",
                (4, 5),
                raises=ValueError,
            ),
        ]

    def compare(self, got, want, case):
        return _close_or_explain(got, want)

    def mistakes(self):
        return [
            (
                lambda n, d: _table(n, d, even="cos"),
                "sin and cos are swapped: sin goes on the even columns (0, 2, ...), cos on the odd "
                "ones, so row 0 is [0, 1, 0, 1, ...]",
            ),
            (
                lambda n, d: _table(n, d, exponent="i"),
                "the exponent uses the pair index i; it is 2i/d_model, i.e. 10000^(-2i/d_model), "
                "so the slowest pair has wavelength close to 10000·2π",
            ),
            (
                lambda n, d: _table(n, d, exponent="4i"),
                "the exponent counts the 2 twice: with the even column index 2i = 0, 2, 4, ... "
                "the frequency is 10000^(-2i/d_model), not 10000^(-2·2i/d_model) (dividing 2i "
                "by d_model / 2 instead of d_model does the same)",
            ),
            (
                _column_index_exponent,
                "the exponent uses each column's own index, so cos in column 2i+1 gets a different "
                "frequency from sin in column 2i; both columns of a pair share 10000^(-2i/d_model)",
            ),
            (
                lambda n, d: _table(n, d, layout="halves"),
                "you put all the sines in the first half and all the cosines in the second half; "
                "here they are interleaved: sin in column 2i, cos in column 2i+1 (use pe[:, 0::2] "
                "and pe[:, 1::2])",
            ),
            (
                lambda n, d: _table(n, d, first_position=1),
                "positions start at 1; they start at 0, so the first row is sin(0)=0, cos(0)=1",
            ),
            (
                _inverted_frequency,
                "the frequency grows with the dimension; it must shrink: 10000^(-2i/d_model) "
                "(note the minus sign)",
            ),
        ]


# --------------------------------------------------------------------------------------------
# relative_shift_matrix
# --------------------------------------------------------------------------------------------


def _shift_matrix(
    offset, d_model, *, angle="offset*frequency", transpose=False, exponent="2i", block="rotation"
):
    frequencies = _frequencies(d_model, "i" if angle == "exponent i" else exponent)
    angles = offset * (torch.ones_like(frequencies) if angle == "no frequency" else frequencies)
    cos, sin = torch.cos(angles), torch.sin(angles)
    if block == "cos and sin swapped":
        cos, sin = sin, cos
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    even = torch.arange(0, d_model, 2)
    m[even, even], m[even, even + 1] = cos, sin
    m[even + 1, even], m[even + 1, even + 1] = sin if block == "no minus" else -sin, cos
    return (m.T if transpose else m).float()


@register
class RelativeShiftMatrix(Task):
    id = "ex04.relative_shift_matrix"
    lesson = LESSON + "'A shift in position is a rotation'"
    reference = "course_lib.positional.relative_shift_matrix"

    def cases(self, gen):
        return [
            Case("offset=1, d_model=2 (one pair)", (1, 2)),
            Case("offset=0, d_model=4 (no shift: the identity)", (0, 4)),
            Case("offset=1, d_model=8", (1, 8)),
            Case("offset=5, d_model=16", (5, 16)),
            Case("a negative offset=-3, d_model=16", (-3, 16)),
            Case("offset=25, d_model=32", (25, 32)),
            Case("a negative offset=-17, d_model=64", (-17, 64)),
            Case("offset=100, d_model=6", (100, 6)),
            Case("an odd d_model=7 (must raise ValueError)", (2, 7), raises=ValueError),
        ]

    def compare(self, got, want, case):
        return _close_or_explain(got, want)

    def diagnose(self, got, want, case):
        if isinstance(got, torch.Tensor) and got.shape == want.shape:
            d_model = want.shape[0]
            off_blocks = got.clone()
            for i in range(0, d_model, 2):
                off_blocks[i : i + 2, i : i + 2] = 0
            if off_blocks.abs().max() > 1e-6:
                return (
                    "M must be block-diagonal: pair (2i, 2i+1) of PE[p + offset] depends "
                    "only on pair (2i, 2i+1) of PE[p]"
                )
        return None

    def mistakes(self):
        return [
            (
                lambda k, d: _shift_matrix(k, d, transpose=True),
                "your matrix shifts by -offset (it is the transpose, a rotation the other way): "
                "with row vectors, PE[p + k] = PE[p] @ M.T needs the block [[cos a, sin a], "
                "[-sin a, cos a]]; check sin(p+k) = sin p cos k + cos p sin k",
            ),
            (
                lambda k, d: _shift_matrix(k, d, angle="no frequency"),
                "every pair is rotated by the same angle (offset radians); pair i turns by "
                "offset * 10000^(-2i/d_model)",
            ),
            (
                lambda k, d: _shift_matrix(k, d, angle="exponent i"),
                "the rotation angle uses 10000^(-i/d_model); the frequency of pair (2i, 2i+1) is "
                "10000^(-2i/d_model), the same as in the encoding",
            ),
        ]


# --------------------------------------------------------------------------------------------
# apply_rope
# --------------------------------------------------------------------------------------------


def _rope_variant(
    x,
    positions=None,
    *,
    pairing="adjacent",
    exponent="2i",
    sign=1.0,
    constant=False,
    ignore_positions=False,
    mixed_frequencies=False,
    first_position=0,
    integer_positions=False,
    cos_sin_swapped=False,
    reflect=False,
):
    d = x.shape[-1]
    if ignore_positions or positions is None:
        positions = torch.arange(first_position, first_position + x.shape[-2])
    elif integer_positions:  # .long() rounds 0.5 towards 0
        positions = positions.long()
    frequencies = _frequencies(d, exponent)  # (d / 2,)
    angles = (
        torch.ones_like(positions, dtype=torch.float64) if constant else positions.to(torch.float64)
    )[:, None] * frequencies  # (seq, d / 2)
    if cos_sin_swapped:
        angles = torch.pi / 2 - angles  # cos and sin trade places
    if reflect or pairing in ("adjacent", "adjacent_out_halves", "halves_out_adjacent"):
        cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
        if pairing in ("adjacent", "adjacent_out_halves"):
            x0, x1 = x[..., 0::2], x[..., 1::2]
        else:
            x0, x1 = x[..., : d // 2], x[..., d // 2 :]
        r0, r1 = x0 * cos - sign * x1 * sin, sign * x0 * sin + x1 * cos
        if reflect:  # the sign of the second component's x1 term flipped: not a rotation
            r1 = x0 * sin - x1 * cos
        if pairing in ("adjacent_out_halves", "halves"):  # the output as two halves
            return torch.cat((r0, r1), -1)
        return torch.stack((r0, r1), -1).flatten(-2)
    # "halves": feature i is paired with feature i + d/2 (the rotate_half layout)
    full = (
        angles.repeat_interleave(2, dim=-1)
        if mixed_frequencies
        else torch.cat((angles, angles), dim=-1)
    )  # (seq, d)
    cos, sin = torch.cos(full).to(x.dtype), torch.sin(full).to(x.dtype)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    rotate_half = torch.cat((-second, first), dim=-1)
    return x * cos + sign * rotate_half * sin


def _scores_under_shifts(rope, q, k, base, shifts):
    """(shifts, ..., seq, seq): q·k after RoPE at positions base + s, for each shift s."""
    out = []
    for s in shifts:
        positions = base + s
        out.append(rope(q, positions) @ rope(k, positions).transpose(-2, -1))
    return torch.stack(out)


@register
class ApplyRope(Task):
    id = "ex04.apply_rope"
    lesson = LESSON + "'RoPE: rotate the queries and keys'"
    reference = "course_lib.positional.apply_rope"

    def cases(self, gen):
        d64 = torch.float64
        return [
            # The property that makes RoPE useful is checked first: its hint is the clearest.
            Case(
                "q·k for q, k (2, 5, 16) float64, when both are moved by the same shift "
                "(0, 7, -3, 50): the scores must not change",
                data={
                    "q": randn(gen, 2, 5, 16, dtype=d64),
                    "k": randn(gen, 2, 5, 16, dtype=d64),
                    "base": torch.tensor([0, 1, 3, 4, 9]),
                    "shifts": (0, 7, -3, 50),
                },
            ),
            Case(
                "q·k for q, k (3, 4, 8) float32, when both are moved by the same shift (0, 2, 11)",
                data={
                    "q": randn(gen, 3, 4, 8),
                    "k": randn(gen, 3, 4, 8),
                    "base": torch.tensor([2, 0, 5, 6]),
                    "shifts": (0, 2, 11),
                },
            ),
            Case("x (5, 4), positions=None (0, 1, ..., 4)", (randn(gen, 5, 4), None)),
            Case(
                "x (3, 5, 8), positions=None: a batch of 3 sequences of 5 positions "
                "(0, 1, ..., 4; the sequence axis is x.shape[-2], not the first one)",
                (randn(gen, 3, 5, 8), None),
            ),
            Case(
                "x (2, 3, 7, 8) (batch, heads, seq, d), positions 0..6",
                (randn(gen, 2, 3, 7, 8), torch.arange(7)),
            ),
            Case(
                "float64 x (2, 6, 16), random positions up to 100",
                (randn(gen, 2, 6, 16, dtype=d64), torch.randint(0, 100, (6,), generator=gen)),
            ),
            Case(
                "float64 x (3, 4, 5, 32), negative positions [-3, 0, 2, 10, 11]",
                (randn(gen, 3, 4, 5, 32, dtype=d64), torch.tensor([-3, 0, 2, 10, 11])),
            ),
            Case(
                "x (1, 6, 2) (one pair), positions 0.5 apart",
                (randn(gen, 1, 6, 2), torch.arange(6) * 0.5),
            ),
            Case(
                "float64 x (2, 2, 3, 6) with positions [40, 41, 42] given as floats",
                (randn(gen, 2, 2, 3, 6, dtype=d64), torch.tensor([40.0, 41.0, 42.0], dtype=d64)),
            ),
            Case(
                "an odd last dimension, x (2, 3, 5) (must raise ValueError)",
                (randn(gen, 2, 3, 5), None),
                raises=ValueError,
            ),
        ]

    def call(self, obj, case):
        if "shifts" in case.data:
            d = case.data
            q, k = d["q"].clone(), d["k"].clone()  # copies, compared after the call
            scores = _scores_under_shifts(obj, q, k, d["base"], d["shifts"])
            if not (torch.equal(q, d["q"]) and torch.equal(k, d["k"])):
                raise GradingError(changed_message(["x"]))
            return scores
        try:
            return obj(*case.args, **case.kwargs)
        except RuntimeError as error:
            x, positions = case.args
            if isinstance(error, NotImplementedError) or positions is not None or x.dim() < 3:
                raise
            raise GradingError(
                f"your code raised RuntimeError: {error}. Hint: with positions=None the "
                "positions are 0, 1, ..., seq-1 where seq = x.shape[-2] (the second-to-last "
                "axis), whatever batch dimensions come first"
            ) from None

    def compare(self, got, want, case):
        return _close_or_explain(got, want)

    def diagnose(self, got, want, case):
        if "shifts" in case.data and isinstance(got, torch.Tensor) and got.shape == want.shape:
            change = (got - got[0]).abs().max().item()
            if change > 1e-4:
                return (
                    f"your q·k changes by up to {change:.3g} when q and k are both moved by "
                    "the same number of positions; with RoPE it depends only on the offset. "
                    "Rotate each pair (2i, 2i+1) of a vector at position p by the angle "
                    "p * 10000^(-2i/d), the same angles for q and k"
                )
        return None

    def mistakes(self):
        return [
            (
                lambda x, p=None: _rope_variant(x, p, constant=True),
                "every position gets the same rotation, so positions change nothing; the angle is "
                "position * 10000^(-2i/d) and grows with the position",
            ),
            (
                lambda x, p=None: _rope_variant(x, p, pairing="halves", mixed_frequencies=True),
                "you paired feature i with feature i + d/2 but took the frequencies of adjacent "
                "pairs, so the two features of a pair turn by different angles: that is not a "
                "rotation and q·k no longer depends only on the offset. Rotate adjacent pairs "
                "(2i, 2i+1) by position * 10000^(-2i/d)",
            ),
            (
                lambda x, p=None: _rope_variant(x, p, pairing="halves"),
                "you paired feature i with feature i + d/2 (the 'rotate_half' layout of some "
                "libraries); this task rotates adjacent pairs (2i, 2i+1): x[..., 0::2], x[..., "
                "1::2]",
            ),
            (
                lambda x, p=None: _rope_variant(x, p, sign=-1.0),
                "you rotated the other way, or swapped cos and sin (both give these q·k scores); "
                "(x0, x1) -> (x0 cos a - x1 sin a, x0 sin a + x1 cos a)",
            ),
            (
                lambda x, p=None: _rope_variant(x, p, exponent="i"),
                "the frequency uses 10000^(-i/d); pair (2i, 2i+1) turns by 10000^(-2i/d) per "
                "position",
            ),
            (
                lambda x, p=None: _rope_variant(x, p, ignore_positions=True),
                "you ignored `positions` and used 0, 1, ..., seq-1; use the positions you are "
                "given (arange only when positions is None)",
            ),
            (
                lambda x, p=None: _rope_variant(x, p, pairing="adjacent_out_halves"),
                "the rotation is right but the output is laid out as two halves (all rotated "
                "first features, then all second ones): write each rotated pair back where it "
                "came from, features 2i and 2i+1 (torch.stack((r0, r1), -1).flatten(-2))",
            ),
        ]


# --------------------------------------------------------------------------------------------
# apply_rope_half (transfer: the layout of GPT-NeoX and Llama, which the lesson does not show)
# --------------------------------------------------------------------------------------------


def _half(x, positions=None, **kwargs):
    return _rope_variant(x, positions, pairing="halves", **kwargs)


@register
class ApplyRopeHalf(Task):
    id = "ex04.apply_rope_half"
    lesson = LESSON + "'RoPE: rotate the queries and keys'"
    reference = "course_lib.positional.apply_rope_half"

    def cases(self, gen):
        d64 = torch.float64
        return [
            Case(
                "x (5, 4), positions=None (0, 1, ..., 4): pairs (0, 2) and (1, 3)",
                (randn(gen, 5, 4), None),
            ),
            Case(
                "x (3, 5, 8) with a batch of 3 and positions=None: the positions are "
                "0..4 along the sequence axis (dim -2), whatever the batch",
                (randn(gen, 3, 5, 8), None),
            ),
            Case(
                "x (1, 6, 2) (one pair (0, 1)), positions 0.5 apart",
                (randn(gen, 1, 6, 2), torch.arange(6) * 0.5),
            ),
            Case(
                "x (2, 3, 7, 8) (batch, heads, seq, d), positions 0..6",
                (randn(gen, 2, 3, 7, 8), torch.arange(7)),
            ),
            Case(
                "float64 x (2, 6, 16), random positions up to 100",
                (randn(gen, 2, 6, 16, dtype=d64), torch.randint(0, 100, (6,), generator=gen)),
            ),
            Case(
                "float64 x (3, 4, 5, 32), negative positions [-3, 0, 2, 10, 11]",
                (randn(gen, 3, 4, 5, 32, dtype=d64), torch.tensor([-3, 0, 2, 10, 11])),
            ),
            Case(
                "float64 x (1, 2, 3, 12) (batch 1) with positions [40, 41, 42] given as floats",
                (randn(gen, 1, 2, 3, 12, dtype=d64), torch.tensor([40.0, 41.0, 42.0], dtype=d64)),
            ),
            Case(
                "q·k for q, k (2, 5, 16) float64 after your rotation, positions moved by "
                "0, 7, -3 and 50, compared with the expected scores",
                data={
                    "q": randn(gen, 2, 5, 16, dtype=d64),
                    "k": randn(gen, 2, 5, 16, dtype=d64),
                    "base": torch.tensor([0, 1, 3, 4, 9]),
                    "shifts": (0, 7, -3, 50),
                },
            ),
            Case(
                "an odd last dimension, x (2, 3, 5) (must raise ValueError)",
                (randn(gen, 2, 3, 5), None),
                raises=ValueError,
            ),
        ]

    def call(self, obj, case):
        if "shifts" in case.data:
            d = case.data
            q, k = d["q"].clone(), d["k"].clone()  # copies, compared after the call
            scores = _scores_under_shifts(obj, q, k, d["base"], d["shifts"])
            if not (torch.equal(q, d["q"]) and torch.equal(k, d["k"])):
                raise GradingError(changed_message(["x"]))
            return scores
        return obj(*case.args, **case.kwargs)

    def compare(self, got, want, case):
        return _close_or_explain(got, want)

    def mistakes(self):
        return [
            (
                lambda x, p=None: _rope_variant(x, p),
                "you rotated adjacent pairs (2i, 2i+1), the lesson's interleaved layout; this task "
                "pairs feature i with feature i + d/2: first half x[..., :d//2], second half "
                "x[..., d//2:]",
            ),
            (
                lambda x, p=None: _half(x, p, sign=-1.0),
                "you rotated the other way (the sign of sin is flipped): "
                "(x_i, x_{i+d/2}) -> (x_i cos - x_{i+d/2} sin, x_i sin + x_{i+d/2} cos), i.e. "
                "x * cos + cat(-second_half, first_half) * sin",
            ),
            (
                lambda x, p=None: _half(x, p, mixed_frequencies=True),
                "feature i and feature i + d/2 must turn by the same angle p * 10000^(-2i/d): "
                "the cos/sin table of shape (seq, d) is the (seq, d/2) table twice, "
                "cat((angles, angles), dim=-1), not each angle repeated in place "
                "(repeat_interleave belongs to the interleaved layout)",
            ),
            (
                lambda x, p=None: _half(x, p, exponent="i"),
                "the frequency uses 10000^(-i/d); pair i turns by 10000^(-2i/d) per position",
            ),
            (
                lambda x, p=None: _half(x, p, constant=True),
                "every position gets the same rotation, so positions change nothing; the angle is "
                "position * 10000^(-2i/d) and grows with the position",
            ),
            (
                lambda x, p=None: _half(x, p, ignore_positions=True),
                "you ignored `positions` and used 0, 1, ..., seq-1; use the positions you are "
                "given (arange only when positions is None)",
            ),
        ]


# --------------------------------------------------------------------------------------------
# Review 2026-11-23 (EX04-1, EX04-2), kept apart so that it merges with work on the cases above
# --------------------------------------------------------------------------------------------

from ..core import extend_task  # noqa: E402

# EX04-1: abs(offset) is right for positive offsets and looks like the transpose for negative
# ones; it must be recognised first, or the transpose hint would break the positive offsets.
extend_task(
    RelativeShiftMatrix,
    mistakes_first=[
        (
            lambda offset, d_model: _shift_matrix(abs(offset), d_model),
            "your matrix is right for positive offsets only: for a negative offset it shifts by "
            "|offset|. Use the offset with its sign in the angle offset * frequency (no abs)",
        ),
    ],
)

# EX04-2: the shift cases compare with the reference's scores; say so, since a wrong layout or
# direction is shift-invariant too.
_original_rope_cases = ApplyRope.cases


def _rope_cases_described(self, gen):
    cases = _original_rope_cases(self, gen)
    for case in cases:
        if "shifts" in case.data:
            shifts = ", ".join(str(s) for s in case.data["shifts"])
            shape = tuple(case.data["q"].shape)
            dtype = str(case.data["q"].dtype)[6:]
            case.description = (
                f"q·k for {dtype} q, k {shape} after your rotation, at positions "
                f"moved by {shifts}, compared with the expected scores"
            )
    return cases


ApplyRope.cases = _rope_cases_described


# --------------------------------------------------------------------------------------------
# Single mistakes that got "more than one thing may be wrong" (a frequency formula slightly off,
# a sign or cos/sin misplaced, positions=None from 1, fractional positions cut to integers)
# --------------------------------------------------------------------------------------------


def _table_over_seq_len(seq_len, d_model):
    """The exponent divided by seq_len instead of d_model."""
    positions = torch.arange(seq_len, dtype=torch.float64)[:, None]
    pair = torch.arange(d_model // 2, dtype=torch.float64)[None, :]
    angles = positions * 10000.0 ** (-2 * pair / seq_len)
    pe = torch.empty(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return pe.float()


def _table_position_and_pair_swapped(seq_len, d_model):
    """angle[p, i] = i * 10000^(-2p/d_model): the pair index plays the position's part."""
    positions = torch.arange(seq_len, dtype=torch.float64)[:, None]
    pair = torch.arange(d_model // 2, dtype=torch.float64)[None, :]
    angles = pair * 10000.0 ** (-2 * positions / d_model)
    pe = torch.empty(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return pe.float()


def _base_1000(d="d_model"):
    return f"the base is 10000, not 1000: pair i turns at the frequency 10000^(-2i/{d})"


def _inverted(d="d_model"):
    return (
        f"the frequency grows with the pair index; it must shrink: 10000^(-2i/{d}) "
        "(note the minus sign)"
    )


def _not_over_d(d="d_model"):
    return (
        f"the exponent is not divided by {d}: the frequency is 10000^(-2i/{d}), "
        "not 10000^(-2i), so the pairs slow down gradually from 1 to about 1/10000"
    )


extend_task(
    SinusoidalPositionalEncoding,
    mistakes=[
        (lambda n, d: _table(n, d, exponent="base 1000"), _base_1000()),
        (lambda n, d: _table(n, d, exponent="not over d"), _not_over_d()),
        (
            lambda n, d: _table(n, d, exponent="divided outside"),
            "the division by d_model belongs inside the exponent: "
            "exp(-2i * math.log(10000) / d_model), not exp(-2i * math.log(10000)) / d_model",
        ),
        (
            lambda n, d: _table(n, d, exponent="base e^4"),
            "math.log10(10000) = 4 is not the natural logarithm: with exp, the frequency is "
            "exp(-2i * math.log(10000) / d_model) (math.log is ln)",
        ),
        (
            lambda n, d: _table(n, d, exponent="zero"),
            "every pair has the frequency 1, so the exponent 2i/d_model became 0: 2 * i // "
            "d_model is integer division; use /, 10000 ** (-2 * i / d_model)",
        ),
        (
            _table_over_seq_len,
            "the exponent is divided by seq_len; it is divided by d_model, 10000^(-2i/d_model): "
            "the frequencies do not depend on the length of the sequence",
        ),
        (
            _table_position_and_pair_swapped,
            "the position and the pair index trade places: the angle in row p, pair i is "
            "p * 10000^(-2i/d_model), the position times the pair's frequency",
        ),
        (
            lambda n, d: _table(n, d, odd="sin"),
            "the odd columns hold sin too: column 2i+1 is cos(p * w_i), so pe[:, 1::2] = "
            "torch.cos(angles)",
        ),
    ],
)

extend_task(
    RelativeShiftMatrix,
    mistakes=[
        (
            lambda k, d: _shift_matrix(k, d, block="no minus"),
            "the block has no minus sign: it is [[cos a, sin a], [-sin a, cos a]], from "
            "cos(x+a) = cos x cos a - sin x sin a; with two plus signs it is not a rotation",
        ),
        (
            lambda k, d: _shift_matrix(k, d, block="cos and sin swapped"),
            "cos and sin are swapped in the block: cos a goes on the diagonal and ±sin a off it, "
            "[[cos a, sin a], [-sin a, cos a]] (at offset 0 M is the identity)",
        ),
        (lambda k, d: _shift_matrix(k, d, exponent="base 1000"), _base_1000()),
        (lambda k, d: _shift_matrix(k, d, exponent="inverted"), _inverted()),
        (lambda k, d: _shift_matrix(k, d, exponent="not over d"), _not_over_d()),
        (
            lambda k, d: _shift_matrix(k, d, exponent="4i"),
            "the rotation angle uses 10000^(-4i/d_model), the 2 counted twice; pair (2i, 2i+1) "
            "turns by offset * 10000^(-2i/d_model), the same frequency as in the encoding",
        ),
    ],
)

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

extend_task(
    ApplyRope,
    mistakes=[
        (lambda x, p=None: _rope_variant(x, p, exponent="base 1000"), _base_1000("d")),
        (
            lambda x, p=None: _rope_variant(x, p, exponent="4i"),
            "the frequency uses 10000^(-4i/d), the 2 counted twice (or 2i divided by d / 2); "
            "pair (2i, 2i+1) turns by 10000^(-2i/d) per position",
        ),
        (lambda x, p=None: _rope_variant(x, p, exponent="inverted"), _inverted("d")),
        (lambda x, p=None: _rope_variant(x, p, exponent="not over d"), _not_over_d("d")),
        (lambda x, p=None: _rope_variant(x, p, reflect=True), _REFLECTED),
        (lambda x, p=None: _rope_variant(x, p, first_position=1), _START_AT_1),
        (lambda x, p=None: _rope_variant(x, p, integer_positions=True), _INTEGER_POSITIONS),
    ],
)


def _half_column_frequencies(x, positions=None):
    """Each of the d features turns at its own frequency 10000^(-j/d)."""
    d = x.shape[-1]
    if positions is None:
        positions = torch.arange(x.shape[-2])
    column = torch.arange(d, dtype=torch.float64)
    angles = positions.to(torch.float64)[:, None] * 10000.0 ** (-column / d)  # (seq, d)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    rotate_half = torch.cat((-second, first), dim=-1)
    return x * torch.cos(angles).to(x.dtype) + rotate_half * torch.sin(angles).to(x.dtype)


extend_task(
    ApplyRopeHalf,
    mistakes=[
        (
            lambda x, p=None: _half(x, p, cos_sin_swapped=True),
            "cos and sin are swapped: x * cos + cat(-second_half, first_half) * sin (at "
            "position 0 nothing turns, so the first vector stays as it is)",
        ),
        (
            lambda x, p=None: _half(x, p, reflect=True),
            _REFLECTED.replace("x0", "x_i").replace("x1", "x_{i+d/2}"),
        ),
        (
            lambda x, p=None: _rope_variant(x, p, pairing="halves_out_adjacent"),
            "you paired feature i with feature i + d/2, right, but wrote the rotated pairs back "
            "interleaved (x_i', x_{i+d/2}' side by side): the rotated first features go back to "
            "the first half, the second ones to the second half",
        ),
        (
            _half_column_frequencies,
            "each feature got its own frequency 10000^(-j/d), j = 0 .. d-1; pair i (features i "
            "and i + d/2) turns by one angle, p * 10000^(-2i/d): the (seq, d) table is "
            "cat((angles, angles), dim=-1) of the (seq, d/2) one",
        ),
        (lambda x, p=None: _half(x, p, exponent="base 1000"), _base_1000("d")),
        (
            lambda x, p=None: _half(x, p, exponent="4i"),
            "the frequency uses 10000^(-4i/d), the 2 counted twice (or 2i divided by d / 2); "
            "pair i turns by 10000^(-2i/d) per position",
        ),
        (lambda x, p=None: _half(x, p, exponent="inverted"), _inverted("d")),
        (lambda x, p=None: _half(x, p, exponent="not over d"), _not_over_d("d")),
        (lambda x, p=None: _half(x, p, first_position=1), _START_AT_1),
        (lambda x, p=None: _half(x, p, integer_positions=True), _INTEGER_POSITIONS),
    ],
)
