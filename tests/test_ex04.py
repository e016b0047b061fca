"""Grader tests for ex04: the reference passes, each named mistake fails with its hint,
other correct routes pass, calling the reference is refused, a stub is "not implemented"."""

import math

import pytest
import torch

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
    positions = torch.arange(seq) if positions is None else positions
    angles = positions.to(torch.float64)[:, None] * frequencies(d)
    rotation = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(
        x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2).contiguous()
    )
    return torch.view_as_real(pairs * rotation).flatten(-2).to(x.dtype)


def rope_einsum(x, positions=None):
    """Correct: one 2x2 rotation matrix per (position, pair), applied with einsum."""
    seq, d = x.shape[-2], x.shape[-1]
    require_even(d)
    positions = torch.arange(seq) if positions is None else positions
    angles = positions.to(torch.float64)[:, None] * frequencies(d)  # (seq, d/2)
    c, s = angles.cos(), angles.sin()
    rot = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2)  # (seq, d/2, 2, 2)
    pairs = x.reshape(*x.shape[:-1], d // 2, 2)
    return torch.einsum("spab,...spb->...spa", rot.to(x.dtype), pairs).flatten(-2)


def rope_general(x, positions=None, *, halves_mixed=False, constant=False, square=False):
    seq, d = x.shape[-2], x.shape[-1]
    require_even(d)
    positions = torch.arange(seq) if positions is None else positions
    p = positions.to(torch.float64)
    p = torch.ones_like(p) if constant else (p * p if square else p)
    angles = p[:, None] * frequencies(d)
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
    + [("apply_rope", n) for n in ROPE_MISTAKES],
)
def test_mistakes_fail_with_their_hint(task, name):
    table = {
        "sinusoidal_positional_encoding": SINUSOIDAL_MISTAKES,
        "relative_shift_matrix": SHIFT_MISTAKES,
        "apply_rope": ROPE_MISTAKES,
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
