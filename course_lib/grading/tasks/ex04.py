"""ex04, positional encoding: the sinusoidal table, a shift as a rotation, and RoPE.

The four tasks share one source of wrong frequencies, `_frequencies(d, mistake)`: a frequency
formula slightly off is the same slip in the table, the shift matrix and both RoPE layouts.
"""

from __future__ import annotations

import torch

from ..core import (
    Case,
    GradingError,
    Task,
    changed_message,
    compare_values,
    register,
)
from .common import all_close, randn, randns

LESSON = "lesson 04, section "
F64 = torch.float64


def _frequencies(d: int, mistake: str = "") -> torch.Tensor:
    """(d / 2,) float64 frequencies 10000^(-2i/d), or the ones a named mistake gives."""
    pair = torch.arange(d // 2, dtype=F64) + (mistake == "pair_from_1")  # 1, 2, ..., d / 2
    if mistake == "logspace":  # torch.logspace(0, -4, d // 2): 10000^(-2i/(d - 2)), 1 to 1e-4
        return torch.logspace(0.0, -4.0, d // 2, dtype=F64)
    if mistake == "base_1000":
        return 1000.0 ** (-2 * pair / d)
    if mistake == "base_e4":  # math.log10(10000) taken for ln
        return torch.exp(-2 * pair * 4.0 / d)
    if mistake == "inverted":  # the minus sign dropped
        return 10000.0 ** (2 * pair / d)
    if mistake == "not_over_d":
        return 10000.0 ** (-2 * pair)
    if mistake == "divided_outside":  # exp(...) / d
        return 10000.0 ** (-2 * pair) / d
    if mistake == "times_pi":  # math.pi * position * frequency: radians taken for turns
        return torch.pi * 10000.0 ** (-2 * pair / d)
    if mistake == "times_2pi":  # 2 * math.pi * frequency: omega read as turns per position
        return 2 * torch.pi * 10000.0 ** (-2 * pair / d)
    if mistake == "d_minus_1":  # 10000 ** (-2i / (d - 1))
        return 10000.0 ** (-2 * pair / (d - 1))
    if mistake == "unbracketed":  # 10000 ** -2 * i / d: ** binds first, (10000 ** -2) * i / d
        return 10000.0**-2 * pair / d
    if mistake == "divisor_bracketed":  # p / (10000 ** two_i / d): the brackets misplaced
        return d / 10000.0 ** (2 * pair)
    if mistake == "degrees":  # torch.rad2deg(angles), or angles * 180 / math.pi
        return 180.0 / torch.pi * 10000.0 ** (-2 * pair / d)
    if mistake in ("zero", "no_frequency"):  # zero: 2 * i // d, integer division, 0
        return torch.ones_like(pair)
    power = {"exponent_i": pair, "exponent_4i": 4 * pair, "blog_loop": 4 * pair}.get(
        mistake, 2 * pair
    )
    return 10000.0 ** (-power / d)


def _base_1000(d="d_model"):
    return f"the base is 10000, not 1000: pair i turns at the frequency 10000^(-2i/{d})"


def _times_pi(d="d_model"):
    return (
        "your angles are multiplied by pi: pair i at position p turns by p * 10000^(-2i/"
        f"{d}) radians, with no pi (torch.sin and torch.cos take radians as they are)"
    )


def _times_2pi(d="d_model"):
    return (
        f"your angles are multiplied by 2 pi: 10000^(-2i/{d}) is already an angle per position, "
        f"in radians, not a number of turns; the angle is p * 10000^(-2i/{d}), with no 2 pi "
        "(torch.sin and torch.cos take radians as they are)"
    )


def _d_minus_1(d="d_model"):
    return (
        f"the exponent is divided by {d} - 1; divide it by {d} itself: 10000^(-2i/{d}), so the "
        f"last pair's exponent is ({d} - 2)/{d}, just short of 1"
    )


def _pair_from_1(d="d_model", pairs="column 0 is sin(p), column 1 cos(p)"):
    return (
        "the pair index counts from 1; it starts at 0, so the first pair turns at 10000^0 = 1 "
        f"({pairs}); counted from 1, each pair takes the next one's frequency: i = "
        f"torch.arange({d} // 2), or 2i = torch.arange(0, {d}, 2)"
    )


def _unbracketed(what, d="d_model"):
    return (
        f"{what}: ** binds tighter than * and /, so 10000 ** -2 * i / {d} is "
        f"(10000 ** -2) * i / {d}, about 1e-8 * i / {d}; put the whole exponent in "
        f"parentheses, 10000 ** (-2 * i / {d}) (the same for p / 10000 ** 2 * i / {d})"
    )


def _linspace(seq="seq_len"):
    return (
        f"torch.linspace(0, {seq}, {seq}) spreads its {seq} points from 0 to {seq} itself, "
        f"{seq}/({seq} - 1) apart, so the positions are not 0, 1, 2, ...: use "
        f"torch.arange({seq}), which stops at {seq} - 1 (or linspace(0, {seq} - 1, {seq}))"
    )


def _positions_over_len(seq="seq_len"):
    return (
        f"you divided the positions by {seq}: the angle is the position itself, p = 0, 1, 2, "
        "..., times the pair's frequency; scaled by the length, one position would be encoded "
        "differently in sequences of different lengths"
    )


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


_POSITIONS_1D = (
    "the positions and the frequencies are both 1-D, so * pairs them element by element: make "
    "the positions a column, positions[:, None] of shape (seq, 1), which times the (d/2,) "
    "frequencies broadcasts to the (seq, d/2) angles"
)


_POSITIONS_ROW = (
    "your positions are a row, (1, seq) (unsqueeze(0), [None, :]), and a row times the (d/2,) "
    "frequencies does not broadcast to the (seq, d/2) angles; make them a column, "
    "positions[:, None] or positions.unsqueeze(1), of shape (seq, 1)"
)


_FINISHED = tuple(
    f"course_lib.positional.{name}"
    for name in (
        "sinusoidal_positional_encoding",
        "relative_shift_matrix",
        "apply_rope",
        "apply_rope_half",
    )
)


def _pieces(reference: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(borrowable, forbidden): the course's pieces of the set's earlier tasks stand in for the
    learner's own at half marks; those of its later tasks are not allowed."""
    i = _FINISHED.index(reference)
    return _FINISHED[:i], _FINISHED[i + 1 :]


class _PositionalTask(Task):
    """Compared within 1e-4, which allows float32 angles computed another way (sin of
    p * frequency loses a few 1e-6 at the positions tested); wrong answers are O(1) off."""

    def compare(self, got, want, case):
        if all_close(got, want, 1e-4):
            return None
        message = compare_values(got, want)
        if (
            isinstance(got, torch.Tensor)
            and got.is_floating_point()  # an integer table keeps the generic hint (int64 ...)
            and got.shape == want.shape
            and got.dtype != want.dtype
        ):  # the generic dtype hint speaks of tensors created without dtype=; these slips pass
            # dtype=torch.float64 (the lesson's copies) or cast x with .float() (Llama's code)
            return f"{message}. Hint: {self.dtype_hint(got.dtype, want.dtype)}"
        return message

    def dtype_hint(self, got, want):
        lesson = (
            "; the lesson's by-hand versions are float64 (built with dtype=torch.float64): leave "
            "that dtype= out, or"
        )
        return f"the task returns float32{lesson if got == F64 else ':'} return the result .float()"


def _same_memory(a, b) -> bool:
    """Whether tensors `a` and `b` are one tensor, or views of one (the same storage)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


_SHARED_TABLE = (
    "your function returned the same tensor at both calls (or views of one): a table kept "
    "between calls (functools.lru_cache, a dict of tables, a global) is shared by every caller, "
    "so the first caller's in-place edit (here += 1, as pe += ... or pe.mul_(...) do) changed "
    "what the second call returned. Return a new tensor at every call: build it, or return the "
    "kept one's .clone()"
)


def _kept_table(got, want) -> str | None:
    """The hint for a table that is a correct one of another size, sliced to this call's or not
    (a table kept from an earlier call: built at the first call, or cached by seq_len alone or
    by d_model alone), else None."""
    if not (isinstance(got, torch.Tensor) and got.dim() == 2 and got.is_floating_point()):
        return None
    rows, columns = got.shape
    if rows == 0 or columns == 0:
        return None
    for d_model in range(columns + columns % 2, max(columns, 128) + 1, 2):
        if (rows, d_model) == tuple(want.shape):
            continue  # the right table (or its first columns): another hint's business
        table = _sinusoidal(rows, d_model)[:, :columns]
        if got.dtype == table.dtype and torch.allclose(got, table, rtol=1e-4, atol=1e-4):
            size = f"({rows}, {d_model})" + (f" cut to {columns} columns" * (d_model > columns))
            return (
                f"your result is the table of another size, {size}, where this call asks for "
                f"{tuple(want.shape)}: your function keeps a table from an earlier call (built "
                "at the first call and sliced, pe[:seq_len, :d_model], or cached by seq_len "
                "alone or by d_model alone). Build the table from this call's seq_len and "
                "d_model (a cache needs both in its key, and must return a copy)"
            )
    return None


def _sinusoidal(seq_len: int, d_model: int) -> torch.Tensor:
    positions = torch.arange(seq_len, dtype=F64)[:, None]
    angles = positions * _frequencies(d_model)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1).float()


# --- sinusoidal_positional_encoding
@register
class SinusoidalPositionalEncoding(_PositionalTask):
    id = "ex04.sinusoidal_positional_encoding"
    lesson = LESSON + "'The sinusoidal encoding'"
    reference = "course_lib.positional.sinusoidal_positional_encoding"
    borrowable, forbidden = _pieces(reference)
    mistake_table = {
        "cos_sin_swapped": "sin and cos are swapped: sin goes on the even columns (0, 2, ...), "
        "cos on the odd ones, so row 0 is [0, 1, 0, 1, ...]",
        "exponent_i": "the exponent uses the pair index i; it is 2i/d_model, i.e. "
        "10000^(-2i/d_model), so the slowest pair has wavelength close to 10000·2π",
        "exponent_4i": "the exponent counts the 2 twice: with the even column index 2i = 0, 2, "
        "4, ... the frequency is 10000^(-2i/d_model), not 10000^(-2·2i/d_model) (dividing 2i by "
        "d_model / 2 instead of d_model does the same)",
        "column_index_exponent": "the exponent uses each column's own index, so cos in column "
        "2i+1 gets a different frequency from sin in column 2i; both columns of a pair share "
        "10000^(-2i/d_model)",
        "halves": "you put all the sines in the first half and all the cosines in the second "
        "half; here they are interleaved: sin in column 2i, cos in column 2i+1 (use pe[:, 0::2] "
        "and pe[:, 1::2])",
        "from_1": "positions start at 1; they start at 0, so the first row is sin(0)=0, cos(0)=1",
        "inverted": "the frequency grows with the dimension; it must shrink: "
        "10000^(-2i/d_model) (note the minus sign)",
        "base_1000": _base_1000(),
        "not_over_d": _not_over_d(),
        "divided_outside": "the division by d_model belongs inside the exponent: "
        "exp(-2i * math.log(10000) / d_model), not exp(-2i * math.log(10000)) / d_model",
        "base_e4": "math.log10(10000) = 4 is not the natural logarithm: with exp, the frequency "
        "is exp(-2i * math.log(10000) / d_model) (math.log is ln)",
        "positions_1d": _POSITIONS_1D,
        "positions_row": _POSITIONS_ROW,
        "zero": "every pair has the frequency 1, so the exponent 2i/d_model became 0: 2 * i // "
        "d_model is integer division; use /, 10000 ** (-2 * i / d_model)",
        "over_seq_len": "the exponent is divided by seq_len; it is divided by d_model, "
        "10000^(-2i/d_model): the frequencies do not depend on the length of the sequence",
        "position_and_pair_swapped": "the position and the pair index trade places: the angle "
        "in row p, pair i is p * 10000^(-2i/d_model), the position times the pair's frequency",
        "odd_sin": "the odd columns hold sin too: column 2i+1 is cos(p * w_i), so pe[:, 1::2] = "
        "torch.cos(angles)",
        "times_pi": _times_pi(),
        "positions_over_len": _positions_over_len(),
        "times_2pi": _times_2pi(),
        "d_minus_1": _d_minus_1(),
        "pair_from_1": _pair_from_1(),
        "minus_cos": "the odd columns hold -cos; they hold cos(p * w_i) itself, so row 0 is [0, 1, "
        "0, 1, ...]: pe[:, 1::2] = torch.cos(angles), with no minus sign",
        "logspace": "torch.logspace(0, -4, d_model // 2) spreads the exponents evenly from 0 to "
        "-4, so the last pair turns at 1e-4 exactly: 10000^(-2i/(d_model - 2)); the frequencies "
        "are 10000^(-2i/d_model), whose last is 10000^(-(d_model - 2)/d_model), just above 1e-4: "
        "10000.0 ** (-torch.arange(0, d_model, 2) / d_model)",
        "blog_loop": "this is a well-known blog's loop: with i = 0, 2, 4, ... already the even "
        "column, sin(p / 10000^(2i/d_model)) counts the 2 twice and cos(p / 10000^(2(i+1)/"
        "d_model)) takes the next pair's frequency. With the column index i = 2k the exponent "
        "is i/d_model, the same for sin in column i and cos in column i+1",
        "unbracketed": _unbracketed(
            "your angles are all close to 0 (every row is nearly [0, 1, 0, 1, ...])"
        ),
        "linspace": _linspace(),
        "stack_dim0": "you stacked sin and cos on a new first axis, (2, seq_len, d_model/2), "
        "and reshaped to (seq_len, d_model): a reshape reads the values in memory order, so "
        "the rows get mixed up. Stack them on a new last axis, torch.stack((sin, cos), "
        "dim=-1), of shape (seq_len, d_model/2, 2), then .flatten(1) interleaves each pair",
        "divisor_bracketed": "your brackets hold 10000 ** two_i / d_model, which is (10000 ** "
        "two_i) / d_model, since ** binds tighter than /: the angle is p / 10000 ** (two_i / "
        "d_model), with the exponent in brackets of its own (or p * 10000 ** (-two_i / d_model))",
        "degrees": "your angles are in degrees (torch.rad2deg, or * 180 / math.pi): torch.sin "
        "and torch.cos take radians, and p * 10000^(-2i/d_model) is already in radians; pass "
        "the angles on as they are, with no conversion",
    }

    def cases(self, gen):
        # (seq_len, d_model); d_model=6 first: at 4, 10000^(-4i/d) and logspace(0, -4, d // 2)
        # give the same two frequencies, 1 and 1e-4, and the first row that fits names the slip
        sizes = [(7, 6), (10, 4), (33, 10), (50, 16), (64, 64)]
        return [
            Case("seq_len=1, d_model=2 (position 0 only)", (1, 2)),
            *(Case(f"seq_len={n}, d_model={d}", (n, d)) for n, d in sizes),
            Case(  # a table cached by d_model at the first length returned 7 rows here
                "seq_len=20, d_model=6 again, longer than before (a table kept from an earlier "
                "call and sliced, pe[:seq_len], is too short: build it for this seq_len)",
                (20, 6),
            ),
            Case(
                "an odd d_model=5 (must raise ValueError: features come in pairs)",
                (4, 5),
                raises=ValueError,
            ),
            Case(  # a table cached by seq_len alone returned the (10, 4) table here
                "seq_len=10 again, now with d_model=8 (a table kept from an earlier call of this "
                "seq_len has that call's d_model: build it for this d_model too)",
                (10, 8),
            ),
            Case(  # functools.lru_cache, or any cache, returned one tensor to every caller
                "seq_len=12, d_model=8 called twice, the first result changed in place (+= 1, "
                "as a caller may do) before the second call, which must still be the table "
                "(return a new tensor at every call)",
                (12, 8),
                data={"twice": True},
            ),
        ]

    def call(self, obj, case):
        if not case.data.get("twice"):
            return super().call(obj, case)
        first = obj(*case.args, **case.kwargs)
        try:  # the caller edits its table in place (pe += ..., pe.mul_(...))
            with torch.no_grad():
                first += 1
        except Exception:  # noqa: BLE001, S110  (not a tensor, an inference tensor: judged below)
            pass
        second = obj(*case.args, **case.kwargs)
        if _same_memory(first, second):
            raise GradingError(_SHARED_TABLE)
        return second

    def diagnose(self, got, want, case):
        stale = _kept_table(got, want)
        if stale is not None:
            return stale
        # the minus sign dropped in float32, as the lesson's table is built: angles of thousands
        # of radians lose more than the 1e-4 that 'inverted' is matched to, but row 1's do not
        seq_len, d_model = case.args
        if isinstance(got, torch.Tensor) and got.shape == want.shape and min(seq_len, d_model) > 2:
            if all_close(got[1], self.wrong(2, d_model, mistake="inverted")[1], 1e-4):
                return self.mistake_table["inverted"]
        return None

    def wrong(self, seq_len, d_model, *, mistake):
        positions = torch.arange(seq_len, dtype=F64)[:, None] + (mistake == "from_1")  # (seq, 1)
        positions = positions / seq_len if mistake == "positions_over_len" else positions
        if mistake == "linspace":  # torch.linspace(0, seq_len, seq_len): the end included
            positions = torch.linspace(0, seq_len, seq_len, dtype=F64)[:, None]
        pair = torch.arange(d_model // 2, dtype=F64)[None, :]  # (1, d_model / 2)
        if mistake == "over_seq_len":
            angles = positions * 10000.0 ** (-2 * pair / seq_len)
        elif mistake == "position_and_pair_swapped":
            angles = pair * 10000.0 ** (-2 * positions / d_model)
        else:
            positions = positions[:, 0] if mistake == "positions_1d" else positions  # (seq,)
            positions = positions.T if mistake == "positions_row" else positions  # (1, seq)
            angles = positions * _frequencies(d_model, mistake)  # (seq, d_model / 2)
        odd_angles = angles
        if mistake == "column_index_exponent":  # column 2i + 1 at 10000^(-(2i + 1)/d_model)
            odd_angles = positions * 10000.0 ** (-(2 * pair + 1) / d_model)
        elif mistake == "blog_loop":  # i = 2k: sin at 10000^(-4k/d), cos at 10000^(-(4k+2)/d)
            odd_angles = positions * 10000.0 ** (-(4 * pair + 2) / d_model)
        even, odd = torch.sin(angles), torch.cos(odd_angles)
        if mistake == "cos_sin_swapped":
            even, odd = torch.cos(angles), torch.sin(angles)
        elif mistake in ("odd_sin", "minus_cos"):  # sin, or -cos, in the odd columns
            odd = torch.sin(angles) if mistake == "odd_sin" else -odd
        if mistake == "halves":
            return torch.cat((even, odd), dim=-1).float()
        if mistake == "stack_dim0":  # torch.stack((sin, cos)).reshape(seq_len, d_model)
            return torch.stack((even, odd)).reshape(seq_len, d_model).float()
        pe = torch.empty(seq_len, d_model, dtype=F64)
        pe[:, 0::2], pe[:, 1::2] = even, odd
        return pe.float()


# --- relative_shift_matrix
@register
class RelativeShiftMatrix(_PositionalTask):
    id = "ex04.relative_shift_matrix"
    lesson = LESSON + "'A shift in position is a rotation'"
    reference = "course_lib.positional.relative_shift_matrix"
    borrowable, forbidden = _pieces(reference)
    mistake_table = {
        # abs(offset) is right for positive offsets and looks like the transpose for negative
        # ones: it comes first, or the transpose hint would break the positive offsets
        "abs_offset": "your matrix is right for positive offsets only: for a negative offset it "
        "shifts by |offset|. Use the offset with its sign in the angle offset * frequency (no "
        "abs)",
        "transposed": "your matrix shifts by -offset (it is the transpose, a rotation the other "
        "way): with row vectors, PE[p + k] = PE[p] @ M.T needs the block [[cos a, sin a], "
        "[-sin a, cos a]]; check sin(p+k) = sin p cos k + cos p sin k",
        "no_frequency": "every pair is rotated by the same angle (offset radians); pair i turns "
        "by offset * 10000^(-2i/d_model)",
        "exponent_i": "the rotation angle uses 10000^(-i/d_model); the frequency of pair (2i, "
        "2i+1) is 10000^(-2i/d_model), the same as in the encoding",
        "no_minus": "the block has no minus sign: it is [[cos a, sin a], [-sin a, cos a]], from "
        "cos(x+a) = cos x cos a - sin x sin a; with two plus signs it is not a rotation",
        "two_minus": "both sin entries of the block have a minus sign; only the lower one should: "
        "[[cos a, sin a], [-sin a, cos a]], from sin(x+a) = sin x cos a + cos x sin a (a + in the "
        "first row) and cos(x+a) = cos x cos a - sin x sin a; with two minus signs the block is "
        "symmetric, not a rotation",
        "cos_sin_swapped": "cos and sin are swapped in the block: cos a goes on the diagonal and "
        "±sin a off it, [[cos a, sin a], [-sin a, cos a]] (at offset 0 M is the identity)",
        "base_1000": _base_1000(),
        "inverted": _inverted(),
        # at offset=1, d_model=8, the first case either fails, angles cut to integers give the
        # same matrix (pair 0 by 1 radian, the others by 0, or 1e-8): one hint names both
        "not_over_d": _not_over_d()
        + ". Or your angles were cut to whole radians, int(offset * frequency) (math.floor, "
        "//, .long()), which at offset 1 leaves every pair but the first unturned too: keep the "
        "angle offset * 10000^(-2i/d_model) a float",
        "exponent_4i": "the rotation angle uses 10000^(-4i/d_model), the 2 counted twice; pair "
        "(2i, 2i+1) turns by offset * 10000^(-2i/d_model), the same frequency as in the encoding",
        "times_pi": _times_pi(),
        "times_2pi": _times_2pi(),
        "d_minus_1": _d_minus_1(),
        "pair_from_1": _pair_from_1(pairs="its block rotates by the offset itself"),
        "diagonal_repeat": "the diagonal holds each pair's cos a twice, side by side: [cos a0, "
        "cos a0, cos a1, cos a1, ...] is cos.repeat_interleave(2); cos.repeat(2) lays it out as "
        "[cos a0, cos a1, ..., cos a0, cos a1, ...], the pairs' cosines in the wrong places",
        "block_at_pair_index": "pair i's 2x2 block goes at rows and columns 2i and 2i+1, "
        "M[2*i : 2*i + 2, 2*i : 2*i + 2]; at M[i : i + 2, i : i + 2] the blocks overlap and the "
        "last rows stay 0",
        "unbracketed": _unbracketed(
            "your rotation angles are all close to 0 (M is nearly the identity)"
        ),
        "last_block_missing": "the last pair's block is missing: rows and columns d_model - 2 "
        "and d_model - 1 stay 0. There are d_model // 2 pairs, i = 0 .. d_model // 2 - 1: loop "
        "over range(d_model // 2), not range(d_model // 2 - 1)",
    }

    def cases(self, gen):
        sizes = [(5, 16), (-3, 16), (25, 32), (-17, 64), (100, 6)]  # (offset, d_model)
        # offset=1, d_model=8 before d_model=2: there the pair counted from 1 (angle 1e-4) and
        # the angle times 2 pi (2 pi) both give about the identity, and the first failure named
        # the 2 pi; the identity stays first (the blocks at M[i : i + 2] fail it, by that row)
        return [
            Case("offset=0, d_model=4 (no shift: the identity)", (0, 4)),
            Case("offset=1, d_model=8", (1, 8)),
            Case("offset=1, d_model=2 (one pair)", (1, 2)),
            *(Case(f"{'a negative ' * (o < 0)}offset={o}, d_model={d}", (o, d)) for o, d in sizes),
            Case("an odd d_model=7 (must raise ValueError)", (2, 7), raises=ValueError),
        ]

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

    def wrong(self, offset, d_model, *, mistake):
        offset = abs(offset) if mistake == "abs_offset" else offset
        frequencies = _frequencies(d_model, mistake)  # (d_model / 2,)
        cos, sin = torch.cos(offset * frequencies), torch.sin(offset * frequencies)
        if mistake == "cos_sin_swapped":
            cos, sin = sin, cos
        m = torch.zeros(d_model, d_model, dtype=F64)
        even = torch.arange(0, d_model, 2)
        if mistake == "block_at_pair_index":  # M[i : i + 2, i : i + 2] with i the pair index
            even = torch.arange(d_model // 2)
        m[even, even], m[even, even + 1] = cos, -sin if mistake == "two_minus" else sin
        m[even + 1, even], m[even + 1, even + 1] = sin if mistake == "no_minus" else -sin, cos
        if mistake == "diagonal_repeat":  # torch.diag(cos.repeat(2)), not repeat_interleave
            m.diagonal().copy_(cos.repeat(2))
        elif mistake == "last_block_missing":  # for i in range(d_model // 2 - 1)
            m[-2:, -2:] = 0
        return (m.T if mistake == "transposed" else m).float()


# --- apply_rope and apply_rope_half (transfer: the layout of GPT-NeoX and Llama)
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
        positions = torch.arange(x.shape[1 if mistake == "seq_axis_1" else -2])
        positions = positions + (mistake == "from_1")
        if mistake == "linspace":  # torch.linspace(0, seq, seq): the end included
            positions = torch.linspace(0, len(positions), len(positions))
    elif mistake == "integer_positions":  # .long() rounds 0.5 towards 0
        positions = positions.long()
    positions = positions.to(F64) if mistake == "positions_1d" else positions.to(F64)[:, None]
    positions = positions.T if mistake == "positions_row" else positions  # (1, seq): raises
    if mistake == "constant":
        positions = torch.ones_like(positions)
    if mistake == "positions_over_len":  # positions / seq, seq = x.shape[-2]
        positions = positions / x.shape[-2]
    if mistake == "table_cat_dim0":  # cat((angles, angles), dim=0): a (2 seq, d / 2) table
        return x * torch.cat((positions * _frequencies(d), positions * _frequencies(d)), 0).cos()
    angles = positions * _frequencies(d, mistake)  # (seq, d / 2)
    first = second = angles  # the angles of each pair's first and second feature
    if mistake in ("mixed_frequencies", "halves_mixed_frequencies"):  # repeat_interleave'd table
        first, second = angles.repeat_interleave(2, dim=-1).chunk(2, dim=-1)
    elif mistake == "cat_table":  # the rotate-half table, cat((angles, angles), -1), read in pairs
        first, second = torch.cat((angles, angles), -1).unflatten(-1, (-1, 2)).unbind(-1)
    elif mistake == "column_frequencies":  # feature j at its own 10000^(-j/d)
        first, second = (positions * 10000.0 ** (-torch.arange(d, dtype=F64) / d)).chunk(2, -1)
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
_NO_MINUS = (
    "the first component lost its minus sign: (x0, x1) -> (x0 cos a - x1 sin a, x0 sin a + "
    "x1 cos a); with x0 cos a + x1 sin a the pair is not rotated (its length changes), so q·k "
    "no longer depends only on the offset"
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


class _RopeTask(_PositionalTask):
    layout = "adjacent"  # pairs (2i, 2i+1); "halves": pairs (i, i + d/2)
    data_inputs = ("positions",)  # not learned: a float tensor of them needs no gradient

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


@register
class ApplyRope(_RopeTask):
    id = "ex04.apply_rope"
    lesson = LESSON + "'RoPE: rotate the queries and keys'"
    reference = "course_lib.positional.apply_rope"
    backward = True  # q and k are learned through it: its gradients are judged too
    borrowable, forbidden = _pieces(reference)
    mistake_table = {
        "constant": _CONSTANT,
        "halves_mixed_frequencies": "you paired feature i with feature i + d/2 but took the "
        "frequencies of adjacent pairs, so the two features of a pair turn by different angles: "
        "that is not a rotation and q·k no longer depends only on the offset. Rotate adjacent "
        "pairs (2i, 2i+1) by position * 10000^(-2i/d)",
        "halves": "you paired feature i with feature i + d/2 (the 'rotate_half' layout of some "
        "libraries); this task rotates adjacent pairs (2i, 2i+1): x[..., 0::2], x[..., 1::2]",
        "sign": "you rotated the other way, or swapped cos and sin (both give these q·k scores); "
        "(x0, x1) -> (x0 cos a - x1 sin a, x0 sin a + x1 cos a)",
        "exponent_i": "the frequency uses 10000^(-i/d); pair (2i, 2i+1) turns by 10000^(-2i/d) "
        "per position",
        "ignore_positions": _IGNORED_POSITIONS,
        "adjacent_out_halves": "the rotation is right but the output is laid out as two halves "
        "(all rotated first features, then all second ones): write each rotated pair back where "
        "it came from, features 2i and 2i+1 (torch.stack((r0, r1), -1).flatten(-2))",
        "base_1000": _base_1000("d"),
        "exponent_4i": "the frequency uses 10000^(-4i/d), the 2 counted twice (or 2i divided by "
        "d / 2); pair (2i, 2i+1) turns by 10000^(-2i/d) per position",
        "inverted": _inverted("d"),
        "not_over_d": _not_over_d("d"),
        "reflect": _REFLECTED,
        "no_minus": _NO_MINUS,
        "from_1": _START_AT_1,
        "integer_positions": _INTEGER_POSITIONS,
        "seq_axis_1": _SEQ_AXIS_1,
        "positions_1d": _POSITIONS_1D,
        "positions_row": _POSITIONS_ROW,
        "positions_or": _POSITIONS_OR,
        "overwritten": _OVERWRITTEN,
        "view": _VIEW,
        "times_pi": _times_pi("d"),
        "positions_over_len": _positions_over_len("seq"),
        "times_2pi": _times_2pi("d"),
        "d_minus_1": _d_minus_1("d"),
        "pair_from_1": _pair_from_1("d", "the first pair rotates by the position itself"),
        "linspace": "with positions=None, " + _linspace("seq"),
        "cat_table": "your (seq, d) cos/sin table is the rotate-half layout's, cat((angles, "
        "angles), dim=-1) or angles.repeat(1, 2), so the two features of a pair (2i, 2i+1) turn "
        "by different angles. For adjacent pairs each angle is repeated in place: "
        "angles.repeat_interleave(2, dim=-1)",
    }

    def cases(self, gen):
        return [
            # The property that makes RoPE useful is checked first: its hint is the clearest.
            _shift_case(
                gen,
                "q·k for float64 q, k (2, 5, 16) after your rotation, at positions moved by 0, 7, "
                "-3, 50, compared with the expected scores",
            ),
            _shift_case(
                gen,
                "q·k for float32 q, k (3, 4, 8) after your rotation, at positions moved by 0, 2, "
                "11, compared with the expected scores",
                (3, 4, 8),
                (2, 0, 5, 6),
                (0, 2, 11),
                torch.float32,
            ),
            _x(gen, "x (5, 4), positions=None (0, 1, ..., 4)", (5, 4)),
            _x(
                gen,
                "x (3, 5, 8), positions=None: a batch of 3 sequences of 5 positions "
                "(0, 1, ..., 4; the sequence axis is x.shape[-2], not the first one)",
                (3, 5, 8),
            ),
            *_positions_cases(gen),
            _x(
                gen, "x (1, 6, 2) (one pair), positions 0.5 apart", (1, 6, 2), torch.arange(6) * 0.5
            ),
            _x(
                gen,
                "float64 x (2, 2, 3, 6) with positions [40, 41, 42] given as floats",
                (2, 2, 3, 6),
                torch.tensor([40.0, 41.0, 42.0], dtype=F64),
                F64,
            ),
            _x(gen, _ODD, (2, 3, 5), raises=ValueError),
            _x(gen, "x (2, 40, 4), positions=None: 40 positions, 0, 1, ..., 39", (2, 40, 4)),
            _after_other_positions(
                gen,
                "x (2, 6, 8) at random positions, after a first call on another x (2, 6, 8) at "
                "these positions moved by 3: the rotated values themselves (cos and sin come "
                "from the positions of each call)",
                (2, 6, 8),
            ),
        ]

    def diagnose(self, got, want, case):
        if "shifts" in case.data and isinstance(got, torch.Tensor) and got.shape == want.shape:
            shifts = case.data["shifts"]
            wrong = [
                s for s, g, w in zip(shifts, got, want, strict=True) if not all_close(g, w, 1e-4)
            ]
            if (
                wrong and min(shifts) < 0 and all(s < 0 for s in wrong)
            ):  # table[positions]: -3 reads the end
                return (
                    f"your q·k is right while every position is 0 or more, but not at the "
                    f"positions moved by {wrong[0]}, some of which are negative: the angle is "
                    "position * 10000^(-2i/d) for a negative position too. A cos/sin table made "
                    "for positions 0 .. max_len - 1 and indexed with them, table[positions], "
                    "reads a negative position from its end: compute the angles from the "
                    "positions themselves, positions[:, None] * frequencies"
                )
            change = (got - got[0]).abs().max().item()
            if change > 1e-4:
                return (
                    f"your q·k changes by up to {change:.3g} when q and k are both moved by "
                    "the same number of positions; with RoPE it depends only on the offset. "
                    "Rotate each pair (2i, 2i+1) of a vector at position p by the angle "
                    "p * 10000^(-2i/d), the same angles for q and k"
                )
        return super().diagnose(got, want, case)


@register
class ApplyRopeHalf(_RopeTask):
    layout = "halves"
    id = "ex04.apply_rope_half"
    lesson = LESSON + "'RoPE: rotate the queries and keys'"
    reference = "course_lib.positional.apply_rope_half"
    backward = True  # q and k are learned through it: its gradients are judged too
    borrowable, forbidden = _pieces(reference)
    mistake_table = {
        "adjacent": "you rotated adjacent pairs (2i, 2i+1), the lesson's interleaved layout; "
        "this task pairs feature i with feature i + d/2: first half x[..., :d//2], second half "
        "x[..., d//2:]",
        "sign": "you rotated the other way (the sign of sin is flipped): (x_i, x_{i+d/2}) -> "
        "(x_i cos - x_{i+d/2} sin, x_i sin + x_{i+d/2} cos), i.e. x * cos + cat(-second_half, "
        "first_half) * sin",
        "mixed_frequencies": "feature i and feature i + d/2 must turn by the same angle p * "
        "10000^(-2i/d): the cos/sin table of shape (seq, d) is the (seq, d/2) table twice, "
        "cat((angles, angles), dim=-1), not each angle repeated in place (repeat_interleave "
        "belongs to the interleaved layout)",
        "exponent_i": "the frequency uses 10000^(-i/d); pair i turns by 10000^(-2i/d) per position",
        "constant": _CONSTANT,
        "ignore_positions": _IGNORED_POSITIONS,
        "cos_sin_swapped": "cos and sin are swapped: x * cos + cat(-second_half, first_half) * "
        "sin (at position 0 nothing turns, so the first vector stays as it is)",
        "reflect": _REFLECTED.replace("x0", "x_i").replace("x1", "x_{i+d/2}"),
        "no_minus": "the first component lost its minus sign: (x_i, x_{i+d/2}) -> (x_i cos a - "
        "x_{i+d/2} sin a, x_i sin a + x_{i+d/2} cos a), i.e. x * cos + cat(-second_half, "
        "first_half) * sin, with the second half negated; with x_i cos a + x_{i+d/2} sin a the "
        "pair is not rotated (its length changes)",
        "adjacent_in_halves_out": "you read the pairs with a stride, x[..., 0::2] and "
        "x[..., 1::2] (the lesson's adjacent pairs), and wrote them back as halves: here pair i "
        "is (x_i, x_{i+d/2}), read from the halves x[..., :d//2] and x[..., d//2:] too",
        "halves_out_adjacent": "you paired feature i with feature i + d/2, right, but wrote the "
        "rotated pairs back interleaved (x_i', x_{i+d/2}' side by side): the rotated first "
        "features go back to the first half, the second ones to the second half",
        "column_frequencies": "each feature got its own frequency 10000^(-j/d), j = 0 .. d-1; "
        "pair i (features i and i + d/2) turns by one angle, p * 10000^(-2i/d): the (seq, d) "
        "table is cat((angles, angles), dim=-1) of the (seq, d/2) one",
        "base_1000": _base_1000("d"),
        "exponent_4i": "the frequency uses 10000^(-4i/d), the 2 counted twice (or 2i divided by "
        "d / 2); pair i turns by 10000^(-2i/d) per position",
        "inverted": _inverted("d"),
        "not_over_d": _not_over_d("d"),
        "from_1": _START_AT_1,
        "integer_positions": _INTEGER_POSITIONS,
        "seq_axis_1": _SEQ_AXIS_1,
        "positions_1d": _POSITIONS_1D,
        "positions_row": _POSITIONS_ROW,
        "positions_or": _POSITIONS_OR,
        "overwritten": _OVERWRITTEN,
        "view": _VIEW,
        "perm_not_inverted": "you read the result back through perm itself: apply_rope(x[..., "
        "perm]) lays the features out as perm does, and undoing that needs perm's inverse, "
        "torch.argsort(perm) ([0, 2, 4, ..., 1, 3, ...]); perm is its own inverse only for d = 4",
        "float_half": "d / 2 is a float (8 / 2 = 4.0) even when d is even, and a slice needs "
        "ints: x[..., : d // 2] and x[..., d // 2 :]",
        "times_pi": _times_pi("d"),
        "positions_over_len": _positions_over_len("seq"),
        "times_2pi": _times_2pi("d"),
        "d_minus_1": _d_minus_1("d"),
        "pair_from_1": _pair_from_1("d", "the first pair rotates by the position itself"),
        # x.chunk(2) with no dim= raises the same error on the first case: one hint for both
        "not_swapped": "your rotate_half negates the first half but keeps the halves in place, "
        "cat((-first_half, second_half)): each feature is then mixed with itself, not with its "
        "partner. Swap them too: x * cos + cat((-second_half, first_half)) * sin",
        "table_cat_dim0": "the (seq, d) cos/sin table joins the (seq, d/2) angles side by side, "
        "torch.cat((angles, angles), dim=-1), so that features i and i + d/2 share an angle; "
        "dim=0 stacks them below each other, (2 seq, d/2), which does not match x. The same "
        "goes for the halves of x: x.chunk(2) with no dim= splits the sequence (dim 0), so "
        "split the features with x.chunk(2, dim=-1)",
        "unbracketed": _unbracketed("your angles are all close to 0 (hardly anything turns)", "d"),
        "linspace": "with positions=None, " + _linspace("seq"),
        "out_halves_swapped": "the rotated halves are in each other's place: the first half "
        "of the result holds x_i cos - x_{i+d/2} sin, the second x_i sin + x_{i+d/2} cos, so "
        "put them back in that order, torch.cat((first_rotated, second_rotated), dim=-1) (at "
        "position 0 nothing turns: the vector stays as it is)",
        "perm_swapped": "your two permutations are swapped: [0, 2, 4, ..., 1, 3, ...] puts the "
        "even features first, so apply_rope pairs features 0 and 2, not i and i + d/2. Gather "
        "with perm = [0, d/2, 1, d/2 + 1, ...] (torch.arange(d).view(2, d // 2).t().reshape(d)), "
        "which makes each pair (i, i + d/2) adjacent, and undo it with torch.argsort(perm)",
    }

    def cases(self, gen):
        return [
            _x(gen, "x (5, 4), positions=None (0, 1, ..., 4): pairs (0, 2) and (1, 3)", (5, 4)),
            _x(
                gen,
                "x (3, 5, 8) with a batch of 3 and positions=None: the positions are "
                "0..4 along the sequence axis (dim -2), whatever the batch",
                (3, 5, 8),
            ),
            _x(
                gen,
                "x (1, 6, 2) (one pair (0, 1)), positions 0.5 apart",
                (1, 6, 2),
                torch.arange(6) * 0.5,
            ),
            *_positions_cases(gen),
            _x(
                gen,
                "float64 x (1, 2, 3, 12) (batch 1) with positions [40, 41, 42] given as floats",
                (1, 2, 3, 12),
                torch.tensor([40.0, 41.0, 42.0], dtype=F64),
                F64,
            ),
            _shift_case(
                gen,
                "q·k for q, k (2, 5, 16) float64 after your rotation, positions moved by "
                "0, 7, -3 and 50, compared with the expected scores",
            ),
            _x(gen, _ODD, (2, 3, 5), raises=ValueError),
            _x(gen, "x (2, 40, 4), positions=None: 40 positions, 0, 1, ..., 39", (2, 40, 4)),
            _after_other_positions(
                gen,
                "x (2, 6, 12) at random positions, after a first call on another x (2, 6, 12) "
                "at these positions moved by 3: the rotated values themselves (cos and sin come "
                "from the positions of each call)",
                (2, 6, 12),
            ),
        ]
