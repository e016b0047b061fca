"""ex04.apply_rope_half (transfer: the rotate-half layout of GPT-NeoX and Llama)."""

from __future__ import annotations

import torch

from ...core import register
from . import _rope as rope
from ._shared import (
    F64,
    LESSON,
    _base_1000,
    _inverted,
    _linspace,
    _not_over_d,
    _pieces,
    _unbracketed,
)


@register
class ApplyRopeHalf(rope._RopeTask):
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
        "constant": rope._CONSTANT,
        "ignore_positions": rope._IGNORED_POSITIONS,
        "cos_sin_swapped": "cos and sin are swapped: x * cos + cat(-second_half, first_half) * "
        "sin (at position 0 nothing turns, so the first vector stays as it is)",
        "reflect": rope._REFLECTED.replace("x0", "x_i").replace("x1", "x_{i+d/2}"),
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
        **rope._POSITION_ROWS,
        "perm_not_inverted": "you read the result back through perm itself: apply_rope(x[..., "
        "perm]) lays the features out as perm does, and undoing that needs perm's inverse, "
        "torch.argsort(perm) ([0, 2, 4, ..., 1, 3, ...]); perm is its own inverse only for d = 4",
        "float_half": "d / 2 is a float (8 / 2 = 4.0) even when d is even, and a slice needs "
        "ints: x[..., : d // 2] and x[..., d // 2 :]",
        **rope._SCALE_ROWS,
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
        **rope._FREQUENCY_ROWS,
    }

    def cases(self, gen):
        return [
            rope._x(
                gen, "x (5, 4), positions=None (0, 1, ..., 4): pairs (0, 2) and (1, 3)", (5, 4)
            ),
            rope._x(
                gen,
                "x (3, 5, 8) with a batch of 3 and positions=None: the positions are "
                "0..4 along the sequence axis (dim -2), whatever the batch",
                (3, 5, 8),
            ),
            rope._x(
                gen,
                "x (1, 6, 2) (one pair (0, 1)), positions 0.5 apart",
                (1, 6, 2),
                torch.arange(6) * 0.5,
            ),
            *rope._positions_cases(gen),
            rope._x(
                gen,
                "float64 x (1, 2, 3, 12) (batch 1) with positions [40, 41, 42] given as floats",
                (1, 2, 3, 12),
                torch.tensor([40.0, 41.0, 42.0], dtype=F64),
                F64,
            ),
            rope._shift_case(
                gen,
                "q·k for q, k (2, 5, 16) float64 after your rotation, positions moved by "
                "0, 7, -3 and 50, compared with the expected scores",
            ),
            *rope._last_cases(gen, 12),
        ]
