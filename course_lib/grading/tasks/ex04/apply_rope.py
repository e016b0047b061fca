"""ex04.apply_rope."""

from __future__ import annotations

import torch

from ...core import register
from ..common import all_close
from . import _rope as rope
from ._shared import (
    F64,
    LESSON,
    _base_1000,
    _inverted,
    _linspace,
    _logspace,
    _not_over_d,
    _pieces,
)

_NO_MINUS = (
    "the first component lost its minus sign: (x0, x1) -> (x0 cos a - x1 sin a, x0 sin a + "
    "x1 cos a); with x0 cos a + x1 sin a the pair is not rotated (its length changes), so q·k "
    "no longer depends only on the offset"
)


@register
class ApplyRope(rope._RopeTask):
    id = "ex04.apply_rope"
    lesson = LESSON + "'RoPE: rotate the queries and keys'"
    reference = "course_lib.positional.apply_rope"
    backward = True  # q and k are learned through it: its gradients are judged too
    borrowable, forbidden = _pieces(reference)
    mistake_table = {
        "constant": rope._CONSTANT,
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
        "ignore_positions": rope._IGNORED_POSITIONS,
        "adjacent_out_halves": "the rotation is right but the output is laid out as two halves "
        "(all rotated first features, then all second ones): write each rotated pair back where "
        "it came from, features 2i and 2i+1 (torch.stack((r0, r1), -1).flatten(-2))",
        "base_1000": _base_1000("d"),
        "exponent_4i": "the frequency uses 10000^(-4i/d), the 2 counted twice (or 2i divided by "
        "d / 2); pair (2i, 2i+1) turns by 10000^(-2i/d) per position",
        "inverted": _inverted("d"),
        "not_over_d": _not_over_d("d"),
        "reflect": rope._REFLECTED,
        "no_minus": _NO_MINUS,
        **rope._POSITION_ROWS,
        **rope._SCALE_ROWS,
        "linspace": "with positions=None, " + _linspace("seq"),
        "cat_table": "your (seq, d) cos/sin table is the rotate-half layout's, cat((angles, "
        "angles), dim=-1) or angles.repeat(1, 2), so the two features of a pair (2i, 2i+1) turn "
        "by different angles. For adjacent pairs each angle is repeated in place: "
        "angles.repeat_interleave(2, dim=-1)",
        **rope._FREQUENCY_ROWS,
        "logspace": _logspace("d"),
    }

    def cases(self, gen):
        return [
            # The property that makes RoPE useful is checked first: its hint is the clearest.
            rope._shift_case(
                gen,
                "q·k for float64 q, k (2, 5, 16) after your rotation, at positions moved by 0, 7, "
                "-3, 50, compared with the expected scores",
            ),
            rope._shift_case(
                gen,
                "q·k for float32 q, k (3, 4, 8) after your rotation, at positions moved by 0, 2, "
                "11, compared with the expected scores",
                (3, 4, 8),
                (2, 0, 5, 6),
                (0, 2, 11),
                torch.float32,
            ),
            rope._x(gen, "x (5, 4), positions=None (0, 1, ..., 4)", (5, 4)),
            rope._x(
                gen,
                "x (3, 5, 8), positions=None: a batch of 3 sequences of 5 positions "
                "(0, 1, ..., 4; the sequence axis is x.shape[-2], not the first one)",
                (3, 5, 8),
            ),
            *rope._positions_cases(gen),
            rope._x(
                gen, "x (1, 6, 2) (one pair), positions 0.5 apart", (1, 6, 2), torch.arange(6) * 0.5
            ),
            rope._x(
                gen,
                "float64 x (2, 2, 3, 6) with positions [40, 41, 42] given as floats",
                (2, 2, 3, 6),
                torch.tensor([40.0, 41.0, 42.0], dtype=F64),
                F64,
            ),
            *rope._last_cases(gen, 8),
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
