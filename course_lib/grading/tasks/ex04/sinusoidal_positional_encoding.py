"""ex04.sinusoidal_positional_encoding."""

from __future__ import annotations

import torch

from ...core import Case, GradingError, register
from ..common import all_close
from . import _shared as shared


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
    positions = torch.arange(seq_len, dtype=shared.F64)[:, None]
    angles = positions * shared._frequencies(d_model)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1).float()


@register
class SinusoidalPositionalEncoding(shared._PositionalTask):
    id = "ex04.sinusoidal_positional_encoding"
    lesson = shared.LESSON + "'The sinusoidal encoding'"
    reference = "course_lib.positional.sinusoidal_positional_encoding"
    borrowable, forbidden = shared._pieces(reference)
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
        "base_1000": shared._base_1000(),
        "not_over_d": shared._not_over_d(),
        "divided_outside": shared._divided_outside(),
        "base_e4": shared._base_e4(),
        "positions_1d": shared._POSITIONS_1D,
        "positions_row": shared._POSITIONS_ROW,
        "zero": shared._zero(),
        "over_seq_len": "the exponent is divided by seq_len; it is divided by d_model, "
        "10000^(-2i/d_model): the frequencies do not depend on the length of the sequence",
        "position_and_pair_swapped": "the position and the pair index trade places: the angle "
        "in row p, pair i is p * 10000^(-2i/d_model), the position times the pair's frequency",
        "odd_sin": "the odd columns hold sin too: column 2i+1 is cos(p * w_i), so pe[:, 1::2] = "
        "torch.cos(angles)",
        "times_pi": shared._times_pi(),
        "positions_over_len": shared._positions_over_len(),
        "times_2pi": shared._times_2pi(),
        "d_minus_1": shared._d_minus_1(),
        "pair_from_1": shared._pair_from_1(),
        "minus_cos": "the odd columns hold -cos; they hold cos(p * w_i) itself, so row 0 is [0, 1, "
        "0, 1, ...]: pe[:, 1::2] = torch.cos(angles), with no minus sign",
        "logspace": shared._logspace(),
        "blog_loop": "this is a well-known blog's loop: with i = 0, 2, 4, ... already the even "
        "column, sin(p / 10000^(2i/d_model)) counts the 2 twice and cos(p / 10000^(2(i+1)/"
        "d_model)) takes the next pair's frequency. With the column index i = 2k the exponent "
        "is i/d_model, the same for sin in column i and cos in column i+1",
        "unbracketed": shared._unbracketed(
            "your angles are all close to 0 (every row is nearly [0, 1, 0, 1, ...])"
        ),
        "linspace": shared._linspace(),
        "stack_dim0": "you stacked sin and cos on a new first axis, (2, seq_len, d_model/2), "
        "and reshaped to (seq_len, d_model): a reshape reads the values in memory order, so "
        "the rows get mixed up. Stack them on a new last axis, torch.stack((sin, cos), "
        "dim=-1), of shape (seq_len, d_model/2, 2), then .flatten(1) interleaves each pair",
        "divisor_bracketed": shared._divisor_bracketed(),
        "degrees": shared._degrees(),
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
        positions = torch.arange(seq_len, dtype=shared.F64)[:, None]  # (seq, 1)
        positions = positions + (mistake == "from_1")
        positions = positions / seq_len if mistake == "positions_over_len" else positions
        if mistake == "linspace":  # torch.linspace(0, seq_len, seq_len): the end included
            positions = torch.linspace(0, seq_len, seq_len, dtype=shared.F64)[:, None]
        pair = torch.arange(d_model // 2, dtype=shared.F64)[None, :]  # (1, d_model / 2)
        if mistake == "over_seq_len":
            angles = positions * 10000.0 ** (-2 * pair / seq_len)
        elif mistake == "position_and_pair_swapped":
            angles = pair * 10000.0 ** (-2 * positions / d_model)
        else:
            positions = positions[:, 0] if mistake == "positions_1d" else positions  # (seq,)
            positions = positions.T if mistake == "positions_row" else positions  # (1, seq)
            angles = positions * shared._frequencies(d_model, mistake)  # (seq, d_model / 2)
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
        pe = torch.empty(seq_len, d_model, dtype=shared.F64)
        pe[:, 0::2], pe[:, 1::2] = even, odd
        return pe.float()
