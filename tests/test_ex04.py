"""Grader tests for ex04: the reference passes, each named mistake fails with its hint,
other correct routes pass, calling the reference is refused, a stub is "not implemented"."""

import math

import numpy as np
import pytest
import torch
from helpers import task_statement

import course_lib.positional as positional
from course_lib.grading import check_result
from course_lib.grading.core import get_task, judge, run_cases

TASKS = ["sinusoidal_positional_encoding", "relative_shift_matrix", "apply_rope"]


def frequencies(d, exponent=2):
    return 10000.0 ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)


def require_even(d):
    if d % 2:
        raise ValueError(f"d must be even, got {d}")


# ------------------------------------------------------------------ sinusoidal: right and wrong


def pe_loops(seq_len, d_model):
    """Correct: the formula entry by entry, float32."""
    require_even(d_model)
    pe = torch.zeros(seq_len, d_model)
    for pos in range(seq_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


def pe_exp_log(seq_len, d_model):
    """Correct: the exp(-log(10000) * 2i / d) route of many tutorials, all in float32."""
    require_even(d_model)
    position = torch.arange(seq_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def pe_stack(seq_len, d_model):
    """Correct: stack (sin, cos) on a new last axis and flatten (interleaves them)."""
    require_even(d_model)
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * frequencies(d_model)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1).float()


def pe_general(seq_len, d_model, *, swap=False, exponent=2, halves=False, start=0):
    require_even(d_model)
    angles = torch.arange(start, start + seq_len, dtype=torch.float64)[:, None] * frequencies(
        d_model, exponent
    )
    a, b = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    if halves:
        return torch.cat((a, b), dim=1).float()
    return torch.stack((a, b), dim=-1).flatten(1).float()


SINUSOIDAL_MISTAKES = {
    "sin/cos swapped": (lambda n, d: pe_general(n, d, swap=True), "sin and cos are swapped"),
    "exponent i": (lambda n, d: pe_general(n, d, exponent=1), "the exponent uses the pair index"),
    "halves": (lambda n, d: pe_general(n, d, halves=True), "all the sines in the first half"),
    "positions from 1": (lambda n, d: pe_general(n, d, start=1), "positions start at 1"),
}


# ------------------------------------------------------------------ shift matrix: right and wrong


def shift_blocks(offset, d_model):
    """Correct: torch.block_diag of 2x2 blocks."""
    require_even(d_model)
    blocks = []
    for w in frequencies(d_model).tolist():
        c, s = math.cos(offset * w), math.sin(offset * w)
        blocks.append(torch.tensor([[c, s], [-s, c]]))
    return torch.block_diag(*blocks)


def shift_matrix_exp(offset, d_model):
    """Correct: the rotation as the exponential of offset times a skew-symmetric generator."""
    require_even(d_model)
    generator = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i, w in enumerate(frequencies(d_model).tolist()):
        generator[2 * i, 2 * i + 1], generator[2 * i + 1, 2 * i] = w, -w
    return torch.linalg.matrix_exp(offset * generator).float()


def shift_general(offset, d_model, *, transpose=False, angle_scale=None):
    require_even(d_model)
    w = frequencies(d_model) if angle_scale is None else angle_scale(d_model)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i, wi in enumerate(w.tolist()):
        c, s = math.cos(offset * wi), math.sin(offset * wi)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]])
    return (m.T if transpose else m).float()


SHIFT_MISTAKES = {
    "transposed (wrong sign)": (
        lambda k, d: shift_general(k, d, transpose=True),
        "shifts by -offset",
    ),
    "angle without frequency": (
        lambda k, d: shift_general(
            k, d, angle_scale=lambda d: torch.ones(d // 2, dtype=torch.float64)
        ),
        "every pair is rotated by the same angle",
    ),
    "angle with exponent i": (
        lambda k, d: shift_general(k, d, angle_scale=lambda d: frequencies(d, 1)),
        "the rotation angle uses 10000^(-i/d_model)",
    ),
}


# ------------------------------------------------------------------ RoPE: right and wrong


def rope_complex(x, positions=None):
    """Correct: pairs as complex numbers times e^(i p w)."""
    seq, d = x.shape[-2], x.shape[-1]
    require_even(d)
    positions = torch.arange(seq, device=x.device) if positions is None else positions
    angles = positions.to(torch.float64)[:, None] * frequencies(d).to(x.device)
    rotation = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(
        x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2).contiguous()
    )
    return torch.view_as_real(pairs * rotation).flatten(-2).to(x.dtype)


def rope_einsum(x, positions=None):
    """Correct: one 2x2 rotation matrix per (position, pair), applied with einsum."""
    seq, d = x.shape[-2], x.shape[-1]
    require_even(d)
    positions = torch.arange(seq, device=x.device) if positions is None else positions
    angles = positions.to(torch.float64)[:, None] * frequencies(d).to(x.device)  # (seq, d/2)
    c, s = angles.cos(), angles.sin()
    rot = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2)  # (seq, d/2, 2, 2)
    pairs = x.reshape(*x.shape[:-1], d // 2, 2)
    return torch.einsum("spab,...spb->...spa", rot.to(x.dtype), pairs).flatten(-2)


def rope_general(x, positions=None, *, halves_mixed=False, constant=False, square=False):
    seq, d = x.shape[-2], x.shape[-1]
    require_even(d)
    positions = torch.arange(seq, device=x.device) if positions is None else positions
    p = positions.to(torch.float64)
    p = torch.ones_like(p) if constant else (p * p if square else p)
    angles = p[:, None] * frequencies(d).to(x.device)
    if halves_mixed:
        full = angles.repeat_interleave(2, dim=-1)
        rotated = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), -1)
        return x * full.cos().to(x.dtype) + rotated * full.sin().to(x.dtype)
    c, s = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2)


ROPE_MISTAKES = {
    "halves with the wrong frequency": (
        lambda x, p=None: rope_general(x, p, halves_mixed=True),
        "the two features of a pair turn by different angles",
    ),
    "constant rotation": (
        lambda x, p=None: rope_general(x, p, constant=True),
        "every position gets the same rotation",
    ),
    # not in the task's list: caught by the offset-only check
    "angle grows with position squared": (
        lambda x, p=None: rope_general(x, p, square=True),
        "depends only on the offset",
    ),
}


# ------------------------------------------------------------------ single mistakes, written as a
# learner would (loops, the exp/log route, block_diag, complex numbers): before they had their
# hints, each got "more than one thing may be wrong"


def pe_exp_route(seq_len, d_model, *, log=math.log, base=10000.0, scale_outside=False):
    require_even(d_model)
    position = torch.arange(seq_len, dtype=torch.float32).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2).float()
    if scale_outside:  # exp(...) / d_model
        div_term = torch.exp(two_i * -log(base)) / d_model
    else:
        div_term = torch.exp(two_i * (-log(base) / d_model))
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def pe_loop(seq_len, d_model, angle):
    require_even(d_model)
    pe = torch.zeros(seq_len, d_model)
    for pos in range(seq_len):
        for i in range(d_model // 2):
            a = angle(pos, i, seq_len, d_model)
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(a), math.cos(a)
    return pe


def pe_sin_twice(seq_len, d_model):
    require_even(d_model)
    angles = torch.arange(seq_len)[:, None] * frequencies(d_model).float()
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.sin(angles)  # copied from the line above
    return pe


SINUSOIDAL_MISTAKES.update(
    {
        "base 1000": (lambda n, d: pe_exp_route(n, d, base=1000.0), "the base is 10000, not 1000"),
        "exponent not over d_model": (
            lambda n, d: pe_loop(n, d, lambda p, i, s, d: p / 10000 ** (2 * i)),
            "the exponent is not divided by d_model",
        ),
        "exp(...) / d_model": (
            lambda n, d: pe_exp_route(n, d, scale_outside=True),
            "the division by d_model belongs inside the exponent",
        ),
        "log10 for ln": (
            lambda n, d: pe_exp_route(n, d, log=math.log10),
            "math.log10(10000) = 4 is not the natural logarithm",
        ),
        "integer division in the exponent": (
            lambda n, d: pe_loop(n, d, lambda p, i, s, d: p / 10000 ** (2 * i // d)),
            "2 * i // d_model is integer division",
        ),
        "exponent over seq_len": (
            lambda n, d: pe_loop(n, d, lambda p, i, s, d: p / 10000 ** (2 * i / s)),
            "the exponent is divided by seq_len",
        ),
        "position and pair swapped": (
            lambda n, d: pe_loop(n, d, lambda p, i, s, d: i / 10000 ** (2 * p / d)),
            "the position and the pair index trade places",
        ),
        "sin in the odd columns too": (pe_sin_twice, "the odd columns hold sin too"),
    }
)


def shift_block_diag(offset, d_model, block=lambda c, s: [[c, s], [-s, c]], two_i_scale=None):
    require_even(d_model)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    w = 10000.0 ** (-two_i / d_model) if two_i_scale is None else two_i_scale(two_i, d_model)
    blocks = []
    for wi in w.tolist():
        c, s = math.cos(offset * wi), math.sin(offset * wi)
        blocks.append(torch.tensor(block(c, s)))
    return torch.block_diag(*blocks)


SHIFT_MISTAKES.update(
    {
        "no minus sign in the block": (
            lambda k, d: shift_block_diag(k, d, block=lambda c, s: [[c, s], [s, c]]),
            "the block has no minus sign",
        ),
        "cos and sin swapped in the block": (
            lambda k, d: shift_block_diag(k, d, block=lambda c, s: [[s, c], [-c, s]]),
            "cos and sin are swapped in the block",
        ),
        "base 1000": (
            lambda k, d: shift_block_diag(k, d, two_i_scale=lambda t, d: 1000.0 ** (-t / d)),
            "the base is 10000, not 1000",
        ),
        "no minus sign in the exponent": (
            lambda k, d: shift_block_diag(k, d, two_i_scale=lambda t, d: 10000.0 ** (t / d)),
            "the frequency grows with the pair index",
        ),
        "exponent not over d_model": (
            lambda k, d: shift_block_diag(k, d, two_i_scale=lambda t, d: 10000.0 ** (-t)),
            "the exponent is not divided by d_model",
        ),
        "2 counted twice": (
            lambda k, d: shift_block_diag(k, d, two_i_scale=lambda t, d: 10000.0 ** (-2 * t / d)),
            "the 2 counted twice",
        ),
        # L15: at d_model=2, the first case then, about the identity as with the angle times
        # 2 pi, whose hint it got
        "pair index counted from 1": (
            lambda k, d: shift_block_diag(k, d, two_i_scale=lambda t, d: 10000.0 ** (-(t + 2) / d)),
            "the pair index counts from 1",
        ),
    }
)


def rope_by_complex(
    x, positions=None, *, two_i_scale=None, first=0, as_int=False, conjugate_cos=False
):
    """RoPE with complex numbers, with one thing changed (as a learner might get it wrong)."""
    seq, d = x.shape[-2], x.shape[-1]
    require_even(d)
    if positions is None:
        positions = torch.arange(first, first + seq)
    if as_int:
        positions = positions.int()
    two_i = torch.arange(0, d, 2, dtype=torch.float64)
    w = 10000.0 ** (-two_i / d) if two_i_scale is None else two_i_scale(two_i, d)
    angles = positions.double()[:, None] * w
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    if conjugate_cos:  # cos and sin trade places: e^{i(pi/2 - a)}
        angles = math.pi / 2 - angles
    return (
        torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles))
        .flatten(-2)
        .to(x.dtype)
    )


def rope_reflected(x, positions=None):
    seq, d = x.shape[-2], x.shape[-1]
    require_even(d)
    positions = torch.arange(seq, device=x.device) if positions is None else positions
    angles = positions.double()[:, None] * frequencies(d).to(x.device)
    c, s = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 0::2] * s - x[..., 1::2] * c  # the sign of the last term
    return out


ROPE_MISTAKES.update(
    {
        "base 1000": (
            lambda x, p=None: rope_by_complex(x, p, two_i_scale=lambda t, d: 1000.0 ** (-t / d)),
            "the base is 10000, not 1000",
        ),
        "2i over d/2": (
            lambda x, p=None: rope_by_complex(
                x, p, two_i_scale=lambda t, d: 10000.0 ** (-t / (d // 2))
            ),
            "the 2 counted twice (or 2i divided by d / 2)",
        ),
        "no minus sign in the exponent": (
            lambda x, p=None: rope_by_complex(x, p, two_i_scale=lambda t, d: 10000.0 ** (t / d)),
            "the frequency grows with the pair index",
        ),
        "exponent not over d": (
            lambda x, p=None: rope_by_complex(x, p, two_i_scale=lambda t, d: 10000.0 ** (-t)),
            "the exponent is not divided by d",
        ),
        "positions from 1": (
            lambda x, p=None: rope_by_complex(x, p, first=1),
            "with positions=None your positions start at 1",
        ),
        "positions cut to integers": (
            lambda x, p=None: rope_by_complex(x, p, as_int=True),
            "converting them to integers",
        ),
        "reflected pair": (rope_reflected, "the pair is reflected, not rotated"),
        # the same q·k as rotating the other way, so the hint names both
        "cos and sin swapped": (
            lambda x, p=None: rope_by_complex(x, p, conjugate_cos=True),
            "or swapped cos and sin",
        ),
    }
)


def rope_half_learner(
    x,
    positions=None,
    *,
    base=10000.0,
    two=2,
    over=None,
    first=0,
    as_int=False,
    swap_cos_sin=False,
    reflect=False,
    interleave_out=False,
    per_column=False,
):
    """The rotate-half layout written out pair by pair, with one thing changed."""
    seq, d = x.shape[-2], x.shape[-1]
    require_even(d)
    if positions is None:
        positions = torch.arange(first, first + seq)
    pos = (positions.long() if as_int else positions).to(torch.float64)
    if per_column:
        w = base ** (-torch.arange(d, dtype=torch.float64) / d)
        c, s = (pos[:, None] * w).cos().to(x.dtype), (pos[:, None] * w).sin().to(x.dtype)
        rotated = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), -1)
        return x * c + rotated * s
    i = torch.arange(d // 2, dtype=torch.float64)
    w = base ** (-two * i / (d if over is None else over(d)))
    a = pos[:, None] * w
    c, s = a.cos().to(x.dtype), a.sin().to(x.dtype)
    if swap_cos_sin:
        c, s = s, c
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    y1, y2 = x1 * c - x2 * s, (x1 * s - x2 * c) if reflect else (x1 * s + x2 * c)
    if interleave_out:
        return torch.stack((y1, y2), -1).flatten(-2)
    return torch.cat((y1, y2), -1)


ROPE_HALF_MISTAKES = {
    "cos and sin swapped": (
        lambda x, p=None: rope_half_learner(x, p, swap_cos_sin=True),
        "cos and sin are swapped",
    ),
    "reflected pair": (
        lambda x, p=None: rope_half_learner(x, p, reflect=True),
        "the pair is reflected, not rotated",
    ),
    "halves in, interleaved out": (
        lambda x, p=None: rope_half_learner(x, p, interleave_out=True),
        "wrote the rotated pairs back interleaved",
    ),
    "a frequency per column": (
        lambda x, p=None: rope_half_learner(x, p, per_column=True),
        "each feature got its own frequency",
    ),
    "base 1000": (
        lambda x, p=None: rope_half_learner(x, p, base=1000.0),
        "the base is 10000, not 1000",
    ),
    "2i over d/2": (
        lambda x, p=None: rope_half_learner(x, p, over=lambda d: d // 2),
        "the 2 counted twice",
    ),
    "no minus sign in the exponent": (
        lambda x, p=None: rope_half_learner(x, p, two=-2),
        "the frequency grows with the pair index",
    ),
    "exponent not over d": (
        lambda x, p=None: rope_half_learner(x, p, over=lambda d: 1),
        "the exponent is not divided by d",
    ),
    "positions from 1": (
        lambda x, p=None: rope_half_learner(x, p, first=1),
        "with positions=None your positions start at 1",
    ),
    "positions cut to integers": (
        lambda x, p=None: rope_half_learner(x, p, as_int=True),
        "converting them to integers",
    ),
}


# ------------------------------------------------------------------ tests


def status(task, obj):
    result = check_result(f"ex04.{task}", obj)
    assert not isinstance(result, str), result
    return result


@pytest.mark.parametrize("task", TASKS)
def test_reference_passes(task):
    t = get_task(f"ex04.{task}")
    cases = t.cases(torch.Generator().manual_seed(0))
    run = run_cases(t, getattr(positional, task), cases)
    run["seen"] = []  # the reference calls itself; here we only check its outcomes
    result = judge(t, cases, run)
    assert result.status == "passed", result.feedback
    assert result.score == t.points


@pytest.mark.parametrize("task", TASKS)
def test_calling_the_reference_is_forbidden(task):
    reference = getattr(positional, task)
    result = status(task, lambda *args, **kwargs: reference(*args, **kwargs))
    assert result.status == "forbidden" and result.score == 0
    assert "finished version" in result.feedback


@pytest.mark.parametrize("task", TASKS)
def test_stub_is_not_implemented(task):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    result = status(task, stub)
    assert result.status == "not implemented" and result.score == 0


@pytest.mark.parametrize(
    "task, impl",
    [
        ("sinusoidal_positional_encoding", pe_loops),
        ("sinusoidal_positional_encoding", pe_exp_log),
        ("sinusoidal_positional_encoding", pe_stack),
        ("relative_shift_matrix", shift_blocks),
        ("relative_shift_matrix", shift_matrix_exp),
        ("apply_rope", rope_complex),
        ("apply_rope", rope_einsum),
        ("apply_rope", rope_general),
    ],
)
def test_alternative_correct_implementations_pass(task, impl):
    result = status(task, impl)
    assert result.status == "passed", result.feedback


@pytest.mark.parametrize(
    "task, name",
    [("sinusoidal_positional_encoding", n) for n in SINUSOIDAL_MISTAKES]
    + [("relative_shift_matrix", n) for n in SHIFT_MISTAKES]
    + [("apply_rope", n) for n in ROPE_MISTAKES]
    + [("apply_rope_half", n) for n in ROPE_HALF_MISTAKES],
)
def test_mistakes_fail_with_their_hint(task, name):
    table = {
        "sinusoidal_positional_encoding": SINUSOIDAL_MISTAKES,
        "relative_shift_matrix": SHIFT_MISTAKES,
        "apply_rope": ROPE_MISTAKES,
        "apply_rope_half": ROPE_HALF_MISTAKES,
    }[task]
    wrong, hint = table[name]
    result = status(task, wrong)
    assert result.status == "failed", result.feedback
    assert result.score < 1
    assert hint in result.feedback, result.feedback
    assert "lesson 04" in result.feedback


def test_odd_d_model_must_raise():
    def no_check(seq_len, d_model):
        return (
            pe_stack(seq_len, d_model - d_model % 2)[:, :d_model]
            if d_model % 2
            else pe_stack(seq_len, d_model)
        )

    result = status("sinusoidal_positional_encoding", no_check)
    assert result.status == "failed" and "ValueError" in result.feedback


def test_float32_result_expected_for_the_table():
    result = status("sinusoidal_positional_encoding", lambda n, d: pe_stack(n, d).double())
    assert result.status == "failed" and "expected float32" in result.feedback


def test_rope_must_keep_dtype():
    result = status("apply_rope", lambda x, p=None: rope_complex(x, p).float())
    assert result.status == "failed" and "dtype" in result.feedback


def test_shift_matrix_not_block_diagonal_is_explained():
    def dense(offset, d_model):
        m = shift_blocks(offset, d_model)
        m[0, -1] += 0.1 if d_model > 2 else 0.0  # couples the first pair to the last one
        return m

    result = status("relative_shift_matrix", dense)
    assert result.status == "failed" and "block-diagonal" in result.feedback


def test_rope_positions_none_reads_the_sequence_axis():
    def seq_from_first_axis(x, positions=None):
        if positions is None:
            positions = torch.arange(x.shape[0])
        return rope_general(x, positions)

    result = status("apply_rope", seq_from_first_axis)
    assert result.status == "failed"
    assert "seq = x.shape[-2]" in result.feedback, result.feedback


def test_rope_that_writes_into_x_is_told_so_first():
    # the q·k case ran on the case's own tensors, so the change gave a q·k message instead
    def in_place(x, positions=None):
        d, seq = x.shape[-1], x.shape[-2]
        if d % 2:
            raise ValueError("the last dimension must be even")
        pos = torch.arange(seq, dtype=x.dtype) if positions is None else positions.to(x.dtype)
        angle = pos[..., None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
        x0, x1 = x[..., 0::2].clone(), x[..., 1::2].clone()
        x[..., 0::2] = x0 * angle.cos() - x1 * angle.sin()
        x[..., 1::2] = x0 * angle.sin() + x1 * angle.cos()
        return x

    result = check_result("ex04.apply_rope", in_place)
    assert result.status == "failed" and "changed its input `x` in place" in result.feedback


# ---- #33: slips a learner makes, written as a learner would; each gets its own hint ---------


def _sinusoid_from_the_blog(seq_len, d_model):
    # the loop of a popular blog post: i steps over the even columns, and 2 * i is used again
    if d_model % 2:
        raise ValueError("d_model must be even")
    pe = torch.zeros(seq_len, d_model)
    for pos in range(seq_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (10000 ** ((2 * i) / d_model)))
            pe[pos, i + 1] = math.cos(pos / (10000 ** ((2 * (i + 1)) / d_model)))
    return pe


def _rope(slip="", half=False):
    """A learner's RoPE, adjacent pairs (or the halves with `half`): right, or with the one slip
    named, or a right variant ("numpy angles")."""

    def apply_rope(x, positions=None):
        seq, d = x.shape[1 if slip == "x.shape[1] as seq" else -2], x.shape[-1]
        if d % 2 and slip != "no odd check":
            raise ValueError(f"the last dimension must be even, got {d}")
        positions = torch.arange(seq, device=x.device) if positions is None else positions
        i = torch.arange(d // 2, dtype=torch.float64, device=x.device) + (slip == "pair from 1")
        omega = 10000.0 ** (-2 * i / (d - 1 if slip == "d - 1" else d))
        if slip == "numpy angles":  # right: np.outer of the positions as float64, then torch
            angles = torch.from_numpy(np.outer(np.asarray(positions, np.float64), omega.numpy()))
        elif slip == "row":  # positions[None, :]: a row, not a column
            angles = positions.double()[None, :] * omega
        else:
            column = positions.double()[:, None]
            angles = (column / seq if slip == "positions / seq" else column) * omega
        angles = angles * {"times pi": math.pi, "2 pi": 2 * math.pi}.get(slip, 1)
        cos, sin = angles.cos(), angles.sin()
        if slip == "x cast to float32":  # as some libraries do
            x, cos, sin = x.float(), cos.float(), sin.float()
        elif slip != "cos, sin kept float64":
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        if slip == "cat(dim=0)":  # Hugging Face's table, joined on the wrong axis
            table = torch.cat((angles, angles), dim=0)
            first, second = x.chunk(2, dim=-1)
            return x * table.cos() + torch.cat((-second, first), -1) * table.sin()
        if half:
            x0, x1 = x.chunk(2) if slip == "chunk" else x.chunk(2, dim=-1)
        else:
            x0, x1 = x[..., 0::2], x[..., 1::2]
        if slip == "not swapped":  # rotate_half as cat((-x1, x2)), the halves left in place
            cos2, sin2 = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
            return x * cos2 + torch.cat((-x0, x1), -1) * sin2
        r0 = x0 * cos + x1 * sin if slip == "no minus" else x0 * cos - x1 * sin
        r1 = x0 * sin + x1 * cos
        return torch.cat((r0, r1), -1) if half else torch.stack((r0, r1), -1).flatten(-2)

    return apply_rope


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex04.sinusoidal_positional_encoding", _sinusoid_from_the_blog, "a well-known blog"),
        ("ex04.apply_rope", _rope("x.shape[1] as seq"), "x.shape[1] is seq only"),
        ("ex04.apply_rope_half", _rope("x.shape[1] as seq", half=True), "x.shape[1] is seq only"),
    ],
)
def test_a_learners_slip_fails_the_notebook_check_with_its_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and result.score < result.max_score, result.feedback
    assert words in result.feedback, result.feedback


def test_an_odd_d_without_a_valueerror_is_not_sent_to_the_positions_hint():
    # it raised RuntimeError on the odd case and was told about positions=None (misleading)
    result = check_result("ex04.apply_rope", _rope("no odd check"))
    assert result.status == "failed", result.feedback
    assert "expected a ValueError" in result.feedback, result.feedback
    assert "positions=None" not in result.feedback.split("raised", 1)[1], result.feedback


# ---- second hunt: slips a learner makes, written as a learner would -------------------------


def _sinusoid_with_1d_positions(seq_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    positions = torch.arange(seq_len)  # (seq_len,): the [:, None] forgotten
    angles = positions * 10000 ** (-torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = angles.sin(), angles.cos()
    return pe


def _rope_slip(slip, half=False):
    def apply_rope(x, positions=None):
        d = x.shape[-1]
        if d % 2:
            raise ValueError("the last dimension must be even")
        shape = x.shape
        if slip == "batch axes flattened with view":
            x = x.view(-1, *shape[-2:])  # (batch, seq, d), whatever axes came first
        if slip == "positions or arange":
            positions = positions or torch.arange(x.shape[-2], device=x.device)
        elif positions is None and slip != "positions=None forgotten":  # rope_by_hand copied
            positions = torch.arange(x.shape[-2], device=x.device)
        frequencies = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
        positions = positions.double() if slip == "1-D positions" else positions[:, None].double()
        angles = positions * frequencies
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        h = d / 2 if slip == "d / 2 in the slices" else d // 2
        a, b = (slice(None, h), slice(h, None)) if half else (slice(0, d, 2), slice(1, d, 2))
        out = x.clone()
        if slip == "written in place, then read":
            out[..., a] = out[..., a] * cos - out[..., b] * sin
            out[..., b] = out[..., a] * sin + out[..., b] * cos
        else:
            out[..., a] = x[..., a] * cos - x[..., b] * sin
            out[..., b] = x[..., a] * sin + x[..., b] * cos
        return out.reshape(shape)

    return apply_rope


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex04.sinusoidal_positional_encoding", _sinusoid_with_1d_positions, "positions[:, None]"),
        ("ex04.apply_rope", _rope_slip(""), None),
        ("ex04.apply_rope_half", _rope_slip("", half=True), None),
        ("ex04.apply_rope", _rope_slip("1-D positions"), "positions[:, None]"),
        ("ex04.apply_rope_half", _rope_slip("1-D positions", half=True), "positions[:, None]"),
        ("ex04.apply_rope", _rope_slip("positions or arange"), "if positions is None"),
        ("ex04.apply_rope_half", _rope_slip("positions or arange", True), "if positions is None"),
        ("ex04.apply_rope", _rope_slip("written in place, then read"), "already rotated"),
        ("ex04.apply_rope", _rope_slip("batch axes flattened with view"), "cannot regroup"),
        ("ex04.apply_rope_half", _rope_slip("d / 2 in the slices", True), "d // 2"),
        # hunt 3: 'your code raised TypeError: 'NoneType' object is not subscriptable', no hint
        ("ex04.apply_rope", _rope_slip("positions=None forgotten"), "positions=None means"),
        ("ex04.apply_rope_half", _rope_slip("positions=None forgotten", True), "None means"),
        (
            "ex04.apply_rope_half",
            _rope_slip("batch axes flattened with view", True),
            "cannot regroup",
        ),
        (
            "ex04.apply_rope_half",
            _rope_slip("written in place, then read", True),
            "already rotated",
        ),
    ],
)
def test_a_second_hunt_slip_fails_the_notebook_check_with_its_own_hint(task_id, learner, words):
    # each raised a bare PyTorch error, or got a hint about the angles or 'None of the usual'
    result = check_result(task_id, learner)
    if words is None:
        assert result.status == "passed", result.feedback
        return
    assert result.status == "failed", result.feedback
    assert words in result.feedback, result.feedback


def _half_through_course_rope(x, positions=None):
    """The permutation the notebook shows, around the course's apply_rope."""
    from course_lib.positional import apply_rope

    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    order = torch.arange(d).view(2, d // 2).t().reshape(d)  # [0, d/2, 1, d/2 + 1, ...]
    return apply_rope(x[..., order], positions)[..., torch.argsort(order)]


def _rope_through_course_shift(x, positions=None):
    """Each position's vector times the course's shift matrix: x @ M(p) turns it by p."""
    from course_lib.positional import relative_shift_matrix

    if x.shape[-1] % 2:
        raise ValueError("d must be even")
    positions = torch.arange(x.shape[-2], device=x.device) if positions is None else positions
    m = torch.stack([relative_shift_matrix(float(p), x.shape[-1]) for p in positions])
    return (x.unsqueeze(-2) @ m.to(x.dtype)).squeeze(-2)


def _table_through_course_shift(seq_len, d_model):
    """Row p = row 0 @ M(p).T: the course's task-2 answer builds the task-1 table."""
    from course_lib.positional import relative_shift_matrix

    if d_model % 2:
        raise ValueError("d_model must be even")
    row_0 = torch.tensor([0.0, 1.0] * (d_model // 2))  # sin 0, cos 0, ...
    return torch.stack([row_0 @ relative_shift_matrix(p, d_model).T for p in range(seq_len)])


@pytest.mark.parametrize(
    "task_id, learner, score, words",
    [
        ("ex04.apply_rope_half", _half_through_course_rope, 0.5, "positional.apply_rope, borrowed"),
        ("ex04.apply_rope", _rope_through_course_shift, 0.5, "relative_shift_matrix, borrowed"),
        ("ex04.sinusoidal_positional_encoding", _table_through_course_shift, 0.0, "not to use"),
    ],
)
def test_the_course_positional_pieces_are_borrowed_or_not_allowed(task_id, learner, score, words):
    # hunt 3: full marks, though ex04 says 'not the finished versions in course_lib.positional';
    # an earlier task's piece stands in at half marks, a later one's scores 0
    result = check_result(task_id, learner)
    assert result.score == score * result.max_score, result.feedback
    assert words in result.feedback, result.feedback


def rope_half_with_the_lessons_pairs(x, positions=None):
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"d must be even, got {d}")
    if positions is None:
        positions = torch.arange(x.shape[-2])
    angles = positions.to(torch.float64)[:, None] * 10000.0 ** (-torch.arange(0, d, 2) / d)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., 0::2], x[..., 1::2]  # copied from apply_rope
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


def test_rope_half_reading_strided_pairs_gets_its_hint():
    result = check_result("ex04.apply_rope_half", rope_half_with_the_lessons_pairs)
    assert result.status == "failed", result.feedback
    assert "you read the pairs with a stride" in result.feedback, result.feedback


# ---- fifth hunt: slips that got 'None of the usual single mistakes' ------------------------
_own_rope = _rope()  # the learner's task-3 answer


def _half_through_perm(x, positions=None):
    """Task 4 through task 3, as the cell under it suggests, undone with perm itself."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"d must be even, got {d}")
    perm = torch.arange(d).view(2, d // 2).t().reshape(d)
    return _own_rope(x[..., perm], positions)[..., perm]  # the slip: torch.argsort(perm)


def _shift_blocks_at_pair_index(offset, d_model):
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    m = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        a = offset * 10000 ** (-2 * i / d_model)
        block = torch.tensor([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])
        m[i : i + 2, i : i + 2] = block  # the slip: 2 * i
    return m


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex04.apply_rope_half", _half_through_perm, "you read the result back through perm"),
        ("ex04.relative_shift_matrix", _shift_blocks_at_pair_index, "rows and columns 2i and 2i+1"),
    ],
)
def test_a_fifth_hunt_slip_fails_the_notebook_check_with_its_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed", result.feedback
    assert words in result.feedback, result.feedback


_POSITIONS = torch.arange(16)  # a block_size's positions, made once


@pytest.mark.parametrize("task", ["apply_rope", "apply_rope_half"])
def test_positions_cut_from_a_fixed_length_table_fail_on_a_long_x(task):
    def rope_from_table(x, positions=None):
        if positions is None:
            positions = _POSITIONS[: x.shape[-2]]  # the slip: too short past 16 positions
        return _rope(half=task == "apply_rope_half")(x, positions)

    result = check_result(f"ex04.{task}", rope_from_table)
    assert result.status == "failed", result.feedback
    assert "too short for a longer x" in result.feedback, result.feedback


# ---- hunt T10: every case is one the statement announces ----------------------------------------


def test_the_rope_statement_says_x_may_be_a_view_that_is_not_contiguous():
    # the check passes a transposed x (split heads); the statement named only its shape, so
    # x.view(-1, seq, d) lost a case no sentence of the task announced
    result = check_result("ex04.apply_rope", _rope_slip("batch axes flattened with view"))
    assert result.status == "failed" and "not contiguous" in result.feedback, result.feedback
    statement = task_statement("04_positional_encoding.ipynb", "Task 3: rotary")
    assert "a view that is not contiguous" in statement
    assert "use `reshape`, not `view`" in statement
    # task 4 takes "the same inputs" as apply_rope, this one included
    assert "same inputs, output and errors as `apply_rope`" in task_statement(
        "04_positional_encoding.ipynb", "Task 4: RoPE in the rotate-half layout"
    )


# ---- hunt F11: a fresh learner's slips ----------------------------------------------------------


def _shift_by_hand(offset, d_model, dtype=torch.float64, upper_sign=1.0):
    """Lesson 04's shift_matrix_by_hand (float64), with a ValueError for an odd d_model."""
    require_even(d_model)
    matrix = torch.zeros(d_model, d_model, dtype=dtype)
    for i, angle in enumerate((offset * frequencies(d_model)).tolist()):
        cos, sin = math.cos(angle), math.sin(angle)
        block = [[cos, upper_sign * sin], [-sin, cos]]
        matrix[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(block, dtype=dtype)
    return matrix


def _rotate_half_without_minus(x, positions=None):
    """Hugging Face's x * cos + rotate_half(x) * sin with rotate_half = cat((x2, x1)): the
    minus of -x2 forgotten."""
    require_even(x.shape[-1])
    positions = torch.arange(x.shape[-2], device=x.device) if positions is None else positions
    angles = positions.double()[:, None] * frequencies(x.shape[-1]).to(x.device)
    table = torch.cat((angles, angles), dim=-1)
    x1, x2 = x.chunk(2, dim=-1)
    return x * table.cos().to(x.dtype) + torch.cat((x2, x1), dim=-1) * table.sin().to(x.dtype)


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        # the lesson's float64 function copied verbatim: the generic dtype hint spoke of
        # tensors created without dtype=, which is not what the learner wrote
        ("ex04.relative_shift_matrix", _shift_by_hand, "leave that dtype= out"),
        (
            "ex04.sinusoidal_positional_encoding",
            lambda n, d: pe_stack(n, d).double(),
            "return the result .float()",
        ),
        ("ex04.apply_rope", _rope("cos, sin kept float64"), "convert them with .to(x.dtype)"),
        ("ex04.apply_rope", _rope("x cast to float32"), "a cast such as .float() on x"),
        ("ex04.apply_rope_half", _rotate_half_without_minus, "lost its minus sign"),
        ("ex04.apply_rope", _rope("no minus"), "lost its minus sign"),
        (
            "ex04.relative_shift_matrix",
            lambda o, d: _shift_by_hand(o, d, torch.float32, upper_sign=-1.0),
            "both sin entries of the block have a minus sign",
        ),
    ],
)
def test_a_fresh_learners_slip_fails_the_notebook_check_with_its_own_hint(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed", result.feedback
    assert words in result.feedback, result.feedback
    assert "None of the usual" not in result.feedback, result.feedback


def test_an_integer_table_keeps_the_generic_dtype_hint():
    # .float() would not mend a table whose sines were cut to integers: the task's float64
    # hint is for float results only
    def int_table(seq_len, d_model):
        return (pe_stack(seq_len, d_model) * 2).long()

    result = check_result("ex04.sinusoidal_positional_encoding", int_table)
    assert result.status == "failed", result.feedback
    assert "int64 for integers" in result.feedback, result.feedback
    assert "return the result .float()" not in result.feedback, result.feedback


# ---- hunt R12: rarer slips that got 'None of the usual single mistakes' ----------------------


def _table(slip=""):
    """A learner's sinusoidal table: right, or with the one slip named, or a right variant
    ("logspace right")."""

    def sinusoidal_positional_encoding(seq_len, d_model):
        if d_model % 2:
            raise ValueError(f"d_model must be even, got {d_model}")
        positions = torch.arange(seq_len, dtype=torch.float64)[:, None]
        positions = positions / seq_len if slip == "positions / seq_len" else positions
        positions = positions.T if slip == "row" else positions  # unsqueeze(0): (1, seq)
        i = torch.arange(d_model // 2, dtype=torch.float64) + (slip == "pair from 1")
        omega = 10000.0 ** (-2 * i / (d_model - 1 if slip == "d - 1" else d_model))
        if slip == "logspace":
            omega = torch.logspace(0, -4, d_model // 2, dtype=torch.float64)
        if slip == "logspace right":  # exponents 0 .. -4 (d - 2) / d: the right frequencies
            omega = torch.logspace(
                0, -4 * (d_model - 2) / d_model, d_model // 2, dtype=torch.float64
            )
        angles = positions * omega * {"times pi": math.pi, "2 pi": 2 * math.pi}.get(slip, 1)
        pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = angles.sin()
        pe[:, 1::2] = -angles.cos() if slip == "-cos" else angles.cos()
        return pe.float()

    return sinusoidal_positional_encoding


@pytest.mark.parametrize(
    "task_id, learner, words",
    [
        ("ex04.sinusoidal_positional_encoding", _table("times pi"), "multiplied by pi"),
        (
            "ex04.sinusoidal_positional_encoding",
            _table("positions / seq_len"),
            "divided the positions by seq_len",
        ),
        ("ex04.apply_rope", _rope("times pi"), "multiplied by pi"),
        ("ex04.apply_rope", _rope("positions / seq"), "divided the positions by seq"),
        ("ex04.apply_rope_half", _rope("times pi", half=True), "multiplied by pi"),
        ("ex04.apply_rope_half", _rope("positions / seq", half=True), "divided the positions"),
        ("ex04.apply_rope_half", _rope("cat(dim=0)", half=True), "dim=0 stacks them below"),
        (
            "ex04.relative_shift_matrix",
            lambda o, d: _shift_by_hand(math.pi * o, d, torch.float32),
            "multiplied by pi",
        ),
    ],
)
def test_an_r12_slip_is_named(task_id, learner, words):
    result = check_result(task_id, learner)
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "None of the usual" not in result.feedback, result.feedback


@pytest.mark.parametrize(
    "task_id, learner",
    [
        ("ex04.sinusoidal_positional_encoding", _table("")),
        ("ex04.apply_rope", _rope("")),
        ("ex04.apply_rope_half", _rope("", half=True)),
        ("ex04.relative_shift_matrix", lambda o, d: _shift_by_hand(o, d, torch.float32)),
    ],
)
def test_the_r12_learners_pass_without_their_slip(task_id, learner):
    result = check_result(task_id, learner)
    assert result.status == "passed", result.feedback


# ---- d12: an answer whose values are right but whose gradient is cut --------------------------


@pytest.mark.parametrize(
    "task_id, half", [("ex04.apply_rope", False), ("ex04.apply_rope_half", True)]
)
def test_d12_a_rotation_cut_from_the_graph_fails(task_id, half):
    # full marks before: the values alone were compared; RoPE sits between q_proj/k_proj and
    # the scores, so a rebuilt result (torch.tensor of its values, .detach()) starves them both
    rope = _rope(half=half)
    assert check_result(task_id, rope).score == 1.0

    def rebuilt(x, positions=None):
        return torch.tensor(rope(x, positions).tolist(), dtype=x.dtype)

    result = check_result(task_id, rebuilt)
    assert result.status == "failed", result.feedback
    assert "no gradient reaches x" in result.feedback, result.feedback


# ---- f04: the gradient pass judges x alone; new rows for slips that got no name ---------------


@pytest.mark.parametrize(
    "task_id, half", [("ex04.apply_rope", False), ("ex04.apply_rope_half", True)]
)
def test_rope_reading_float_positions_with_numpy_passes(task_id, half):
    # the gradient pass made float positions require grad, so np.asarray(positions) raised
    # "Can't call numpy() on Tensor that requires grad" (10/12, with an in-place hint); the
    # positions are not learned (the reference detaches them): only x is judged
    result = check_result(task_id, _rope("numpy angles", half=half))
    assert result.status == "passed", result.feedback


def _f04_shift(slip):
    def relative_shift_matrix(offset, d_model):
        require_even(d_model)
        denominator = d_model - 1 if slip == "d - 1" else d_model
        omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / denominator)
        angles = offset * omega * (2 * math.pi if slip == "2 pi" else 1)
        cos, sin = angles.cos(), angles.sin()
        diagonal = cos.repeat(2) if slip == "repeat" else cos.repeat_interleave(2)
        m = torch.diag(diagonal)
        even = torch.arange(0, d_model, 2)
        m[even, even + 1], m[even + 1, even] = sin, -sin
        return m.float()

    return relative_shift_matrix


_F04_SLIPS = [
    ("ex04.sinusoidal_positional_encoding", _table, "d - 1", "divided by d_model - 1"),
    ("ex04.sinusoidal_positional_encoding", _table, "2 pi", "multiplied by 2 pi"),
    ("ex04.relative_shift_matrix", _f04_shift, "d - 1", "divided by d_model - 1"),
    ("ex04.relative_shift_matrix", _f04_shift, "2 pi", "multiplied by 2 pi"),
    ("ex04.relative_shift_matrix", _f04_shift, "repeat", "cos.repeat_interleave(2)"),
    ("ex04.apply_rope", _rope, "d - 1", "divided by d - 1"),
    ("ex04.apply_rope", _rope, "2 pi", "multiplied by 2 pi"),
    ("ex04.apply_rope_half", lambda s: _rope(s, half=True), "d - 1", "divided by d - 1"),
    ("ex04.apply_rope_half", lambda s: _rope(s, half=True), "2 pi", "multiplied by 2 pi"),
    ("ex04.apply_rope_half", lambda s: _rope(s, half=True), "chunk", "x.chunk(2, dim=-1)"),
    ("ex04.sinusoidal_positional_encoding", _table, "row", "your positions are a row"),
    ("ex04.apply_rope", _rope, "row", "your positions are a row"),
    ("ex04.apply_rope_half", lambda s: _rope(s, half=True), "row", "your positions are a row"),
    ("ex04.apply_rope_half", lambda s: _rope(s, half=True), "not swapped", "Swap them too"),
]


@pytest.mark.parametrize("task_id, make, slip, words", _F04_SLIPS)
def test_an_f04_slip_is_named(task_id, make, slip, words):
    # each got 'None of the usual single mistakes' (x.chunk(2) with no dim: the hint of a cos/sin
    # table joined on dim 0, which raises the same error, with nothing about chunk)
    result = check_result(task_id, make(slip))
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "None of the usual" not in result.feedback, result.feedback
    assert check_result(task_id, make("")).status == "passed"  # right without the slip


# ---- L14: the pair index from 1, -cos in the odd columns, logspace for the frequencies -------

SINUSOIDAL = "ex04.sinusoidal_positional_encoding"
F64 = torch.float64


def _l14_graded(impl, seed):
    task = get_task(SINUSOIDAL)
    cases = task.cases(torch.Generator().manual_seed(seed))
    return judge(task, cases, run_cases(task, impl, cases))


@pytest.mark.parametrize(
    ("slip", "hint"),
    [
        ("pair from 1", "the pair index counts from 1"),
        ("-cos", "the odd columns hold -cos"),
        ("logspace", "torch.logspace(0, -4, d_model // 2) spreads"),
    ],
)
def test_l14_sinusoidal_slips_are_named_and_fail_under_every_seed(slip, hint):
    # before: 'None of the usual single mistakes' for the first two; logspace was told 'the
    # exponent counts the 2 twice', which it ties with at d_model=4, then the first failing case
    impl = _table(slip)
    result = check_result(SINUSOIDAL, impl)
    assert result.status == "failed" and hint in result.feedback, result.feedback
    assert "counts the 2 twice" not in result.feedback, result.feedback
    for seed in (1, 2, 3, 4, 5):
        graded = _l14_graded(impl, seed)
        assert graded.status == "failed" and hint in graded.feedback, (seed, graded.feedback)


def test_l14_the_2_counted_twice_keeps_its_hint():
    def table(seq_len, d_model):
        two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
        angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * 10000.0 ** (
            -2 * two_i / d_model
        )
        pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = angles.sin(), angles.cos()
        return pe.float()

    result = check_result(SINUSOIDAL, table)
    assert result.status == "failed" and "counts the 2 twice" in result.feedback, result.feedback


def _table_by_python_loops(seq_len, d_model):
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    rows = []
    for p in range(seq_len):
        row = []
        for i in range(d_model // 2):
            angle = p * 10000.0 ** (-2 * i / d_model)
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32).reshape(seq_len, d_model)


@pytest.mark.parametrize(
    "impl",
    [
        _table("logspace right"),
        _table(""),
        _table_by_python_loops,
    ],
    ids=["logspace to -4 (d - 2) / d", "arange from 0", "python loops"],
)
def test_l14_right_variants_keep_full_marks(impl):
    for seed in (0, 1, 2, 3, 4, 5):
        graded = _l14_graded(impl, seed)
        assert graded.status == "passed", (seed, graded.feedback)


@pytest.mark.parametrize(
    ("task_id", "layout"), [("ex04.apply_rope", "adjacent"), ("ex04.apply_rope_half", "halves")]
)
def test_l14_rope_with_the_pair_index_from_1_is_named(task_id, layout):
    # the same slip as in the table, in RoPE's frequencies: 'None of the usual single mistakes'
    impl = _rope("pair from 1", half=layout == "halves")
    result = check_result(task_id, impl)
    assert result.status == "failed", result.feedback
    assert "the pair index counts from 1" in result.feedback, result.feedback
    task = get_task(task_id)
    for seed in (1, 2, 3, 4, 5):
        cases = task.cases(torch.Generator().manual_seed(seed))
        assert judge(task, cases, run_cases(task, impl, cases)).status == "failed", seed


# ---- f16: slips of order and grouping, a cached table, a table indexed by the positions -------


def _f16_angles(positions, d, slip=""):
    """(seq, d/2) float64 angles, or with `slip` the ungrouped exponent 10000 ** -2 * i / d."""
    i = torch.arange(d // 2, dtype=torch.float64, device=positions.device)
    omega = 10000**-2 * i / d if slip == "unbracketed" else 10000.0 ** (-2 * i / d)
    return positions.double()[:, None] * omega


def _f16_table(slip=""):
    cache = {}

    def sinusoidal_positional_encoding(seq_len, d_model):
        require_even(d_model)
        if slip == "cached by d_model":  # built at the first length, then sliced
            if d_model not in cache:
                cache[d_model] = _f16_table()(seq_len, d_model)
            return cache[d_model][:seq_len]
        ends_at_seq_len = torch.linspace(0, seq_len, seq_len)  # the slip: the end included
        angles = _f16_angles(
            ends_at_seq_len if slip == "linspace" else torch.arange(seq_len), d_model, slip
        )
        if slip == "stack dim 0":
            return torch.stack((angles.sin(), angles.cos())).reshape(seq_len, d_model).float()
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1).float()

    return sinusoidal_positional_encoding


def _f16_shift(slip=""):
    def relative_shift_matrix(offset, d_model):
        require_even(d_model)
        angles = _f16_angles(torch.tensor([offset]), d_model, slip)[0]
        m = torch.zeros(d_model, d_model)
        pairs = d_model // 2 - (slip == "range(d // 2 - 1)")
        for i in range(pairs):
            c, s = angles[i].cos(), angles[i].sin()
            m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.stack(
                (torch.stack((c, s)), torch.stack((-s, c)))
            )
        return m

    return relative_shift_matrix


def _f16_rope(slip="", half=False):
    def apply_rope(x, positions=None):
        d = x.shape[-1]
        require_even(d)
        seq = x.shape[-2]
        if positions is None:
            ends = torch.linspace(0, seq, seq, device=x.device)  # the slip: the end included
            positions = ends if slip == "linspace" else torch.arange(seq, device=x.device)
        if slip == "table[positions]":  # a Hugging Face style cache, indexed by the positions
            angles = _f16_angles(torch.arange(128, device=x.device), d)[positions.long()]
        else:
            angles = _f16_angles(positions, d, slip)
        if half:
            table = torch.cat((angles, angles), -1)
            first, second = x.chunk(2, dim=-1)
            turned = torch.cat((-second, first), -1)
        else:  # rotate_every_two: the table repeated in place, or (the slip) as two halves
            table = (
                angles.repeat(1, 2) if slip == "repeat(1, 2)" else angles.repeat_interleave(2, -1)
            )
            turned = torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)
        return x * table.cos().to(x.dtype) + turned * table.sin().to(x.dtype)

    return apply_rope


_F16_SLIPS = [
    ("ex04.sinusoidal_positional_encoding", _f16_table, "unbracketed", "** binds tighter"),
    ("ex04.sinusoidal_positional_encoding", _f16_table, "stack dim 0", "on a new first axis"),
    ("ex04.relative_shift_matrix", _f16_shift, "unbracketed", "** binds tighter"),
    ("ex04.relative_shift_matrix", _f16_shift, "range(d // 2 - 1)", "last pair's block"),
    ("ex04.apply_rope", _f16_rope, "repeat(1, 2)", "repeat_interleave(2, dim=-1)"),
    ("ex04.apply_rope", _f16_rope, "table[positions]", "reads a negative position"),
    ("ex04.apply_rope_half", lambda s: _f16_rope(s, True), "unbracketed", "** binds tighter"),
    ("ex04.sinusoidal_positional_encoding", _f16_table, "linspace", "use torch.arange(seq_len)"),
    ("ex04.apply_rope", _f16_rope, "linspace", "use torch.arange(seq)"),
    ("ex04.apply_rope_half", lambda s: _f16_rope(s, True), "linspace", "use torch.arange(seq)"),
]


@pytest.mark.parametrize("task_id, make, slip, words", _F16_SLIPS)
def test_an_f16_slip_is_named(task_id, make, slip, words):
    # before: 'None of the usual single mistakes' (the grouping, the stack on dim 0, the missing
    # last block), or only 'your q·k changes ... when moved' (the table repeated as halves, a
    # cos/sin table indexed by the positions, where -3 reads the table's end)
    result = check_result(task_id, make(slip))
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "None of the usual" not in result.feedback, result.feedback
    assert check_result(task_id, make("")).status == "passed"  # right without the slip


SINUSOIDAL_F16 = "ex04.sinusoidal_positional_encoding"


def test_f16_a_table_cached_by_d_model_at_its_first_length_fails():
    # before: 7/7, full marks: every case had another d_model, so a table kept per d_model and
    # sliced to seq_len was never asked for more rows than it had
    result = check_result(SINUSOIDAL_F16, _f16_table("cached by d_model"))
    assert result.status == "failed", result.feedback
    assert "is too short" in result.feedback and "(20, 6)" in result.feedback, result.feedback
    task = get_task(SINUSOIDAL_F16)
    for seed in (1, 2, 3):
        cases = task.cases(torch.Generator().manual_seed(seed))
        impl = _f16_table("cached by d_model")
        assert judge(task, cases, run_cases(task, impl, cases)).status == "failed", seed


@pytest.mark.parametrize(
    "task_id, impl",
    [
        (SINUSOIDAL_F16, _f16_table()),
        ("ex04.relative_shift_matrix", _f16_shift()),
        ("ex04.apply_rope", _f16_rope()),
        ("ex04.apply_rope_half", _f16_rope(half=True)),
    ],
    ids=["stack(-1).flatten", "2x2 blocks of stacks", "rotate_every_two", "rotate_half"],
)
def test_f16_right_variants_keep_full_marks_under_hidden_seeds(task_id, impl):
    task = get_task(task_id)
    for seed in (0, 1, 2, 3):
        cases = task.cases(torch.Generator().manual_seed(seed))
        graded = judge(task, cases, run_cases(task, impl, cases))
        assert graded.status == "passed", (seed, graded.feedback)


@pytest.mark.parametrize("route", ["lesson, minus dropped", "p / div_term"])
def test_f16_the_frequency_growing_is_named_in_float32_too(route):
    # the lesson builds its table in float32; with the minus dropped its angles reach thousands
    # of radians, whose float32 sines miss the float64 'inverted' row by more than 1e-4: 'None of
    # the usual single mistakes' (the float64 blog loop got the hint)
    def sinusoidal_positional_encoding(seq_len, d_model):
        require_even(d_model)
        positions = torch.arange(seq_len, dtype=torch.float32).unsqueeze(1)
        two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
        if route == "p / div_term":  # the exp-log div_term, divided by instead of multiplied
            angles = positions / torch.exp(two_i * (-math.log(10000.0) / d_model))
        else:
            angles = positions * 10000.0 ** (two_i / d_model)
        pe = torch.zeros(seq_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)
        return pe

    result = check_result(SINUSOIDAL_F16, sinusoidal_positional_encoding)
    assert result.status == "failed", result.feedback
    assert "the frequency grows with the dimension" in result.feedback, result.feedback


def test_f16_rope_half_through_apply_rope_with_the_permutations_swapped_is_named():
    # gather with [0, 2, 4, ..., 1, 3, ...] (the inverse) and undo with [0, d/2, 1, ...]: 'None
    # of the usual single mistakes' (perm applied twice was named, this order was not)
    def apply_rope_half(x, positions=None):
        d = x.shape[-1]
        require_even(d)
        evens_first = torch.arange(d).view(d // 2, 2).t().reshape(d)  # [0, 2, 4, ..., 1, 3, ...]
        return _f16_rope()(x[..., evens_first], positions)[..., torch.argsort(evens_first)]

    result = check_result("ex04.apply_rope_half", apply_rope_half)
    assert result.status == "failed", result.feedback
    assert "your two permutations are swapped" in result.feedback, result.feedback


# ------------------------------------------------------------------ HUNT17: state kept between
# calls, and slips that read 'None of the usual single mistakes' or another cause's hint


def _pe_cached(key):
    """A right table kept between calls: by seq_len alone, with functools.lru_cache (one
    tensor for every caller), built at the first call and sliced, or 5000 rows at the first
    d_model; with "lru_cache, cloned" a copy is returned (right)."""
    kept = {}

    def sinusoidal_positional_encoding(seq_len, d_model):
        require_even(d_model)
        if key == "seq_len":
            if seq_len not in kept:
                kept[seq_len] = pe_stack(seq_len, d_model)
            return kept[seq_len]
        if key in ("lru_cache", "lru_cache, cloned"):
            if (seq_len, d_model) not in kept:
                kept[seq_len, d_model] = pe_stack(seq_len, d_model)
            table = kept[seq_len, d_model]
            return table.clone() if key.endswith("cloned") else table
        if key == "first call":
            kept.setdefault("table", pe_stack(max(seq_len, 1), d_model))
            return kept["table"][:seq_len, :d_model]
        kept.setdefault("table", pe_stack(5000, d_model))  # "5000 rows"
        return kept["table"][:seq_len]

    return sinusoidal_positional_encoding


def _graded_under_seeds(task_id, make, seeds=(1, 2, 3)):
    task = get_task(task_id)
    for seed in seeds:
        cases = task.cases(torch.Generator().manual_seed(seed))
        yield seed, judge(task, cases, run_cases(task, make(), cases))


@pytest.mark.parametrize(
    "key, words",
    [
        ("seq_len", "(10, 4), where this call asks for (10, 8)"),
        ("lru_cache", "your function returned the same tensor at both calls"),
        ("first call", "your result is the table of another size, (1, 2)"),
        ("5000 rows", "your result is the table of another size, (7, 2)"),
    ],
)
def test_h17_a_table_kept_between_calls_fails_and_is_named(key, words):
    # before: by seq_len alone and with lru_cache 8/8, full marks (no case asked a seq_len twice
    # with another d_model, and nothing edited a result); sliced from the first call's table,
    # only 'your result has shape (1, 2), expected (7, 6)'
    result = check_result(SINUSOIDAL_F16, _pe_cached(key))
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "keeps a table from an earlier call" in result.feedback or key == "lru_cache"
    for seed, graded in _graded_under_seeds(SINUSOIDAL_F16, lambda: _pe_cached(key)):
        assert graded.status == "failed", seed


def test_h17_a_cache_that_returns_a_copy_keeps_full_marks():
    assert check_result(SINUSOIDAL_F16, _pe_cached("lru_cache, cloned")).status == "passed"
    for seed, graded in _graded_under_seeds(
        SINUSOIDAL_F16, lambda: _pe_cached("lru_cache, cloned")
    ):
        assert graded.status == "passed", (seed, graded.feedback)


def test_h17_a_table_of_a_wider_first_call_sliced_is_named():
    # a notebook cell that plotted (50, 16) first: the (7, 6) case got 16-wide columns
    impl = _pe_cached("first call")
    impl(50, 16)
    result = check_result(SINUSOIDAL_F16, impl)
    assert "(7, 16) cut to 6 columns" in result.feedback, result.feedback


@pytest.mark.parametrize(
    "slip, words",
    [
        ("p / (10000 ** two_i / d)", "your brackets hold 10000 ** two_i / d_model"),
        ("rad2deg", "your angles are in degrees"),
    ],
)
def test_h17_a_misplaced_bracket_and_degrees_are_named(slip, words):
    # before: 'None of the usual single mistakes gives this result'
    def sinusoidal_positional_encoding(seq_len, d_model):
        require_even(d_model)
        p = torch.arange(seq_len, dtype=torch.float32)[:, None]
        two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
        if slip == "rad2deg":
            angles = torch.rad2deg(p * 10000 ** (-two_i / d_model))
        else:
            angles = p / (10000**two_i / d_model)
        pe = torch.zeros(seq_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)
        return pe

    result = check_result(SINUSOIDAL_F16, sinusoidal_positional_encoding)
    assert result.status == "failed" and words in result.feedback, result.feedback


def test_h17_angles_cut_to_integers_in_the_shift_matrix_are_named():
    # before: 'the exponent is not divided by d_model' alone; at offset=1, d_model=8 both give
    # the same matrix, and the hint now names both
    def relative_shift_matrix(offset, d_model):
        require_even(d_model)
        m = torch.zeros(d_model, d_model, dtype=torch.float64)
        for i, a in enumerate((offset * frequencies(d_model)).tolist()):
            c, s = math.cos(int(a)), math.sin(int(a))
            m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]])
        return m.float()

    result = check_result("ex04.relative_shift_matrix", relative_shift_matrix)
    assert result.status == "failed", result.feedback
    assert "int(offset * frequency)" in result.feedback, result.feedback


def _rope_cached(half=False):
    """RoPE with cos and sin kept by (seq, d) from the first call: later positions ignored."""
    kept = {}

    def rope(x, positions=None):
        seq, d = x.shape[-2], x.shape[-1]
        require_even(d)
        positions = torch.arange(seq, device=x.device) if positions is None else positions
        if (seq, d) not in kept:
            angles = positions.to(torch.float64)[:, None] * frequencies(d).to(x.device)
            kept[seq, d] = angles.cos(), angles.sin()
        cos, sin = (t.to(x.dtype) for t in kept[seq, d])
        if half:
            x0, x1 = x[..., : d // 2], x[..., d // 2 :]
            return torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)

    return rope


@pytest.mark.parametrize("task_id", ["ex04.apply_rope", "ex04.apply_rope_half"])
def test_h17_cos_and_sin_kept_by_shape_fail_and_are_named(task_id):
    # before: 12/12 and 11/11, full marks: the q·k checks move every position alike, which
    # leaves q·k unchanged, and no other case repeated a shape with other positions
    half = task_id.endswith("half")
    result = check_result(task_id, _rope_cached(half))
    assert result.status == "failed", result.feedback
    assert "rotated by the positions of the call before" in result.feedback, result.feedback
    for seed, graded in _graded_under_seeds(task_id, lambda: _rope_cached(half)):
        assert graded.status == "failed", seed


@pytest.mark.parametrize("task_id", ["ex04.apply_rope", "ex04.apply_rope_half"])
def test_h17_the_evenness_check_on_the_sequence_axis_is_named(task_id):
    # before: 'your code raised ValueError: ... To see the line that fails, ...'
    right = _f16_rope(half=task_id.endswith("half"))

    def rope(x, positions=None):
        if x.shape[-2] % 2:
            raise ValueError(f"d must be even, got {x.shape[-2]}")
        return right(x, positions)

    result = check_result(task_id, rope)
    assert result.status == "failed", result.feedback
    assert "x.shape[-2] = 5 is odd: test the last axis" in result.feedback, result.feedback


def test_h17_rope_half_with_the_output_halves_swapped_is_named():
    # before: 'None of the usual single mistakes gives this result'
    def apply_rope_half(x, positions=None):
        y = _f16_rope(half=True)(x, positions)
        h = x.shape[-1] // 2
        return torch.cat((y[..., h:], y[..., :h]), -1)

    result = check_result("ex04.apply_rope_half", apply_rope_half)
    assert result.status == "failed", result.feedback
    assert "the rotated halves are in each other's place" in result.feedback, result.feedback


# ---- h04: task 1's frequency slips, written into the shift matrix and RoPE ---------------


def _h04_frequencies(d, slip):
    """(d / 2,) float64 frequencies as a learner writes them, with the named slip."""
    two_i = torch.arange(0, d, 2, dtype=torch.float64)
    if slip == "integer division":  # torch.arange(0, d, 2) // d: all 0
        return 10000.0 ** -(torch.arange(0, d, 2) // d).double()
    if slip == "exp / d":
        return torch.exp(-two_i * math.log(10000.0)) / d
    if slip == "log10":
        return torch.exp(-two_i * math.log10(10000.0) / d)
    if slip == "llama brackets":  # 1.0 / (10000 ** (two_i / d)) with the brackets misplaced
        return 1.0 / (10000.0**two_i / d)
    if slip == "degrees":
        return torch.rad2deg(10000.0 ** (-two_i / d))
    if slip == "logspace":
        return torch.logspace(0, -4, d // 2, dtype=torch.float64)
    return 10000.0 ** (-two_i / d)


def _h04_shift(slip):
    def relative_shift_matrix(offset, d_model):
        require_even(d_model)
        angles = offset * _h04_frequencies(d_model, slip)
        cos, sin = angles.cos().tolist(), angles.sin().tolist()
        blocks = [torch.tensor([[c, s], [-s, c]]) for c, s in zip(cos, sin, strict=True)]
        return torch.block_diag(*blocks).float()

    return relative_shift_matrix


def _h04_rope(slip, half=False):
    def rope(x, positions=None):
        seq, d = x.shape[-2], x.shape[-1]
        require_even(d)
        positions = torch.arange(seq, device=x.device) if positions is None else positions
        angles = positions.double()[:, None] * _h04_frequencies(d, slip).to(x.device)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        if half:
            x0, x1 = x[..., : d // 2], x[..., d // 2 :]
            return torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)

    return rope


_H04_WORDS = {
    "integer division": "2 * i // d is integer division",
    "exp / d": "belongs inside the exponent",
    "log10": "math.log10(10000) = 4 is not the natural logarithm",
    "llama brackets": "with the exponent in brackets of its own",
    "degrees": "your angles are in degrees",
    "logspace": "torch.logspace(0, -4, d // 2)",
}
_H04_SLIPS = [
    *(
        ("ex04.relative_shift_matrix", _h04_shift, slip, words.replace(" d ", " d_model "))
        for slip, words in _H04_WORDS.items()
        if slip != "integer division"  # 'every pair is rotated by the same angle' names it
    ),
    *(("ex04.apply_rope", _h04_rope, slip, words) for slip, words in _H04_WORDS.items()),
    *(
        ("ex04.apply_rope_half", lambda s: _h04_rope(s, half=True), slip, words)
        for slip, words in _H04_WORDS.items()
        if slip != "logspace"  # at d = 4 it is the 2 counted twice, whose hint it gets
    ),
]


@pytest.mark.parametrize("task_id, make, slip, words", _H04_SLIPS)
def test_h04_a_frequency_slip_of_the_table_is_named_in_the_later_tasks_too(
    task_id, make, slip, words
):
    # before: 'None of the usual single mistakes gives this result' (task 1 named each of them)
    result = check_result(task_id, make(slip))
    assert result.status == "failed" and words in result.feedback, result.feedback
    assert "None of the usual" not in result.feedback, result.feedback
    assert check_result(task_id, make("")).status == "passed"  # right without the slip


def _rope_made_on(where):
    """A right RoPE whose frequencies are made on the CPU ("cpu": a GPU's device mismatch), or
    on x's device after reading a number back with .item() (right on a GPU; meta cannot)."""

    def apply_rope(x, positions=None):
        seq, d = x.shape[-2], x.shape[-1]
        require_even(d)
        device = None if where == "cpu" else x.device
        positions = torch.arange(seq, device=x.device) if positions is None else positions
        if where == "item" and positions.numel():
            _ = int(positions.max().item()) + 1  # a table's length, say
        angles = positions.double()[:, None] * frequencies(d).to(device)
        c, s = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2)

    return apply_rope


def test_a_rope_that_makes_its_frequencies_on_the_cpu_fails_as_it_would_on_a_gpu():
    # #hunt19: every case ran on the CPU, so frequencies made without device= had full marks,
    # and exercise 09's GPT with positions='rope' crashed on a GPU only
    assert check_result("ex04.apply_rope", _rope_made_on("x")).status == "passed"
    assert check_result("ex04.apply_rope", _rope_made_on("item")).status == "passed"
    result = check_result("ex04.apply_rope", _rope_made_on("cpu"))
    assert result.status == "failed" and result.passed == result.total - 1, result.feedback
    assert "on a GPU your code would raise" in result.feedback, result.feedback
    assert "device=x.device" in result.feedback
