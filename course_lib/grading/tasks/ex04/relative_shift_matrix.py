"""ex04.relative_shift_matrix."""

from __future__ import annotations

import torch

from ...core import Case, register
from . import _shared as shared


@register
class RelativeShiftMatrix(shared._PositionalTask):
    id = "ex04.relative_shift_matrix"
    lesson = shared.LESSON + "'A shift in position is a rotation'"
    reference = "course_lib.positional.relative_shift_matrix"
    borrowable, forbidden = shared._pieces(reference)
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
        "base_1000": shared._base_1000(),
        "inverted": shared._inverted(),
        # at offset=1, d_model=8, the first case either fails, angles cut to integers give the
        # same matrix (pair 0 by 1 radian, the others by 0, or 1e-8): one hint names both
        "not_over_d": shared._not_over_d()
        + ". Or your angles were cut to whole radians, int(offset * frequency) (math.floor, "
        "//, .long()), which at offset 1 leaves every pair but the first unturned too: keep the "
        "angle offset * 10000^(-2i/d_model) a float",
        "exponent_4i": "the rotation angle uses 10000^(-4i/d_model), the 2 counted twice; pair "
        "(2i, 2i+1) turns by offset * 10000^(-2i/d_model), the same frequency as in the encoding",
        "times_pi": shared._times_pi(),
        "times_2pi": shared._times_2pi(),
        "d_minus_1": shared._d_minus_1(),
        "pair_from_1": shared._pair_from_1(pairs="its block rotates by the offset itself"),
        "diagonal_repeat": "the diagonal holds each pair's cos a twice, side by side: [cos a0, "
        "cos a0, cos a1, cos a1, ...] is cos.repeat_interleave(2); cos.repeat(2) lays it out as "
        "[cos a0, cos a1, ..., cos a0, cos a1, ...], the pairs' cosines in the wrong places",
        "block_at_pair_index": "pair i's 2x2 block goes at rows and columns 2i and 2i+1, "
        "M[2*i : 2*i + 2, 2*i : 2*i + 2]; at M[i : i + 2, i : i + 2] the blocks overlap and the "
        "last rows stay 0",
        "unbracketed": shared._unbracketed(
            "your rotation angles are all close to 0 (M is nearly the identity)"
        ),
        "last_block_missing": "the last pair's block is missing: rows and columns d_model - 2 "
        "and d_model - 1 stay 0. There are d_model // 2 pairs, i = 0 .. d_model // 2 - 1: loop "
        "over range(d_model // 2), not range(d_model // 2 - 1)",
        "divided_outside": shared._divided_outside(),
        "base_e4": shared._base_e4(),
        "logspace": shared._logspace(),
        "divisor_bracketed": shared._divisor_bracketed(),
        "degrees": shared._degrees(),
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
        frequencies = shared._frequencies(d_model, mistake)  # (d_model / 2,)
        cos, sin = torch.cos(offset * frequencies), torch.sin(offset * frequencies)
        if mistake == "cos_sin_swapped":
            cos, sin = sin, cos
        m = torch.zeros(d_model, d_model, dtype=shared.F64)
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
