"""What ex04's tasks share: one source of wrong frequencies, `_frequencies(d, mistake)` (a
frequency formula slightly off is the same slip in the table, the shift matrix and both RoPE
layouts), the hints those slips get, the set's pieces (borrowable, forbidden) and the base
task that compares within 1e-4."""

from __future__ import annotations

import torch

from ...core import Task, compare_values
from ..common import all_close

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


def _divided_outside(d="d_model"):
    return (
        f"the division by {d} belongs inside the exponent: exp(-2i * math.log(10000) / {d}), "
        f"not exp(-2i * math.log(10000)) / {d}"
    )


def _base_e4(d="d_model"):
    return (
        "math.log10(10000) = 4 is not the natural logarithm: with exp, the frequency is "
        f"exp(-2i * math.log(10000) / {d}) (math.log is ln)"
    )


def _zero(d="d_model", what="every pair has the frequency 1"):
    return (
        f"{what}, so the exponent 2i/{d} became 0: 2 * i // {d} is integer division; use /, "
        f"10000 ** (-2 * i / {d})"
    )


def _divisor_bracketed(d="d_model"):
    return (
        f"your brackets hold 10000 ** two_i / {d}, which is (10000 ** two_i) / {d}, since ** "
        f"binds tighter than /: the angle is p / 10000 ** (two_i / {d}), with the exponent in "
        f"brackets of its own (or p * 10000 ** (-two_i / {d}))"
    )


def _degrees(d="d_model"):
    return (
        "your angles are in degrees (torch.rad2deg, or * 180 / math.pi): torch.sin and "
        f"torch.cos take radians, and p * 10000^(-2i/{d}) is already in radians; pass the "
        "angles on as they are, with no conversion"
    )


def _logspace(d="d_model"):
    return (
        f"torch.logspace(0, -4, {d} // 2) spreads the exponents evenly from 0 to -4, so the "
        f"last pair turns at 1e-4 exactly: 10000^(-2i/({d} - 2)); the frequencies are "
        f"10000^(-2i/{d}), whose last is 10000^(-({d} - 2)/{d}), just above 1e-4: "
        f"10000.0 ** (-torch.arange(0, {d}, 2) / {d})"
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
