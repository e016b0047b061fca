"""Unit tests of course_lib.positional: sinusoidal encoding, shift matrix, RoPE, the modules."""

import math

import pytest
import torch

from course_lib.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    apply_rope,
    apply_rope_half,
    relative_shift_matrix,
    rope_half_permutation,
    sinusoid_frequencies,
    sinusoidal_positional_encoding,
)

D_MODELS = [2, 4, 6, 16, 64]


def formula_table(seq_len, d_model):
    """The paper's formula, one entry at a time, in plain Python floats."""
    rows = []
    for pos in range(seq_len):
        row = []
        for column in range(d_model):
            two_i = column - column % 2
            angle = pos / 10000 ** (two_i / d_model)
            row.append(math.sin(angle) if column % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


def rope_complex(x, positions):
    """RoPE as complex multiplication: pair (2i, 2i+1) is x_2i + j x_2i+1, times e^(j p w_i)."""
    d = x.shape[-1]
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    rotation = torch.polar(
        torch.ones(len(positions), d // 2, dtype=torch.float64), positions.double()[:, None] * w
    )
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * rotation).flatten(-2).to(x.dtype)


# ------------------------------------------------------------------ sinusoidal table


@pytest.mark.parametrize("d_model", D_MODELS)
@pytest.mark.parametrize("seq_len", [1, 9, 50])
def test_sinusoidal_matches_the_formula(seq_len, d_model):
    want = formula_table(seq_len, d_model)
    got32 = sinusoidal_positional_encoding(seq_len, d_model)
    got64 = sinusoidal_positional_encoding(seq_len, d_model, dtype=torch.float64)
    assert got32.shape == (seq_len, d_model) and got32.dtype == torch.float32
    assert torch.allclose(got32.double(), want, atol=1e-6)
    assert torch.allclose(got64, want, atol=1e-10)


def test_sinusoidal_first_row_and_layout():
    pe = sinusoidal_positional_encoding(3, 8)
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0] * 4))
    # column 0 turns by 1 radian per position: sin(1), cos(1) in row 1
    assert pe[1, 0].item() == pytest.approx(math.sin(1.0), abs=1e-6)
    assert pe[1, 1].item() == pytest.approx(math.cos(1.0), abs=1e-6)


def test_frequencies_vary_across_dimensions():
    w = sinusoid_frequencies(512)
    wavelengths = 2 * math.pi / w
    assert wavelengths[0].item() == pytest.approx(2 * math.pi)
    assert wavelengths[-1].item() < 10000 * 2 * math.pi
    assert wavelengths[-1].item() > 0.9 * 10000 * 2 * math.pi
    assert torch.all(w[1:] < w[:-1])


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((4, 5), ValueError, "d_model must be even"),
        ((0, 4), ValueError, "seq_len"),
        ((3.0, 4), ValueError, "seq_len"),
        ((4, 0), ValueError, "d_model"),
        ((True, 4), ValueError, "seq_len"),
    ],
)
def test_sinusoidal_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        sinusoidal_positional_encoding(*args)


# ------------------------------------------------------------------ shift matrix


@pytest.mark.parametrize("d_model", D_MODELS)
@pytest.mark.parametrize("offset", [0, 1, 3, -1, -7, 20])
def test_shift_matrix_moves_every_position(offset, d_model):
    seq_len = 60
    pe = sinusoidal_positional_encoding(seq_len, d_model, dtype=torch.float64)
    m = relative_shift_matrix(offset, d_model, dtype=torch.float64)
    lo, hi = max(0, -offset), min(seq_len, seq_len - offset)
    assert torch.allclose(pe[lo + offset : hi + offset], pe[lo:hi] @ m.T, atol=1e-10)
    m32 = relative_shift_matrix(offset, d_model)
    assert m32.dtype == torch.float32
    assert torch.allclose(
        pe[lo + offset : hi + offset].float(), pe[lo:hi].float() @ m32.T, atol=1e-5
    )


def test_shift_matrix_is_a_rotation_group():
    a, b = (
        relative_shift_matrix(5, 16, dtype=torch.float64),
        relative_shift_matrix(-2, 16, dtype=torch.float64),
    )
    eye = torch.eye(16, dtype=torch.float64)
    assert torch.allclose(a @ a.T, eye, atol=1e-12)
    assert torch.allclose(a @ b, relative_shift_matrix(3, 16, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(
        relative_shift_matrix(0, 8, dtype=torch.float64), torch.eye(8, dtype=torch.float64)
    )
    assert torch.allclose(relative_shift_matrix(-5, 16, dtype=torch.float64), a.T, atol=1e-12)
    off_block = a.clone()
    for i in range(0, 16, 2):
        off_block[i : i + 2, i : i + 2] = 0
    assert off_block.abs().max() == 0


@pytest.mark.parametrize(
    "args, error, match",
    [
        (("3", 8), TypeError, "offset"),
        ((True, 8), TypeError, "offset"),
        ((float("inf"), 8), ValueError, "offset"),
        ((1, 7), ValueError, "d_model"),
        ((1, -2), ValueError, "d_model"),
    ],
)
def test_shift_matrix_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        relative_shift_matrix(*args)


# ------------------------------------------------------------------ RoPE


@pytest.mark.parametrize(
    "shape, dtype, atol",
    [
        ((5, 4), torch.float32, 1e-5),
        ((2, 3, 7, 8), torch.float32, 1e-5),
        ((2, 6, 16), torch.float64, 1e-10),
        ((1, 2, 3, 5, 32), torch.float64, 1e-10),
    ],
)
def test_rope_matches_complex_multiplication(shape, dtype, atol):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen, dtype=dtype)
    positions = torch.randint(-50, 200, (shape[-2],), generator=gen)
    got = apply_rope(x, positions)
    assert got.dtype == dtype and got.shape == x.shape
    assert torch.allclose(got, rope_complex(x, positions), atol=atol)
    assert torch.allclose(got.norm(dim=-1), x.norm(dim=-1), atol=atol * 10)


def test_rope_default_positions_and_shift_matrix():
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    assert torch.equal(apply_rope(x), apply_rope(x, torch.arange(6)))
    # as a matrix: row p is rotated by relative_shift_matrix(p).T, i.e. x[p] @ M(p)
    for p in range(6):
        m = relative_shift_matrix(p, 8, dtype=torch.float64)
        assert torch.allclose(apply_rope(x)[:, p], x[:, p] @ m, atol=1e-12)


@pytest.mark.parametrize("d", [2, 8, 64])
def test_rope_scores_depend_only_on_offset(d):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(3, 1, d, generator=gen, dtype=torch.float64)
    k = torch.randn(3, 1, d, generator=gen, dtype=torch.float64)
    for offset in (-5, 0, 3):
        scores = [
            (apply_rope(q, torch.tensor([p + offset])) * apply_rope(k, torch.tensor([p]))).sum(-1)
            for p in (0, 7, 100, 1234)
        ]
        for s in scores[1:]:
            assert torch.allclose(s, scores[0], atol=1e-9)


def test_rope_gradient_flows():
    x = torch.randn(2, 4, 8, requires_grad=True)
    apply_rope(x).pow(2).sum().backward()
    # a rotation keeps the norm, so d|Rx|²/dx = 2x
    assert torch.allclose(x.grad, 2 * x.detach(), atol=1e-5)


@pytest.mark.parametrize(
    "x, positions, error, match",
    [
        (torch.randn(3, 5), None, ValueError, "even"),
        (torch.randn(4), None, ValueError, "x must have at least 2"),
        (torch.ones(3, 4, dtype=torch.long), None, TypeError, "x must be a floating"),
        ([[1.0, 2.0]], None, TypeError, "x must be a torch.Tensor"),
        (torch.randn(3, 4), torch.arange(4), ValueError, "positions has 4 entries"),
        (torch.randn(3, 4), torch.zeros(1, 3), ValueError, "positions must have 1"),
        (torch.randn(3, 4), [0, 1, 2], TypeError, "positions"),
        (torch.randn(3, 4), torch.ones(3, dtype=torch.bool), TypeError, "positions"),
    ],
)
def test_rope_bad_inputs(x, positions, error, match):
    with pytest.raises(error, match=match):
        apply_rope(x, positions)


# ------------------------------------------------------------------ modules


def test_sinusoidal_module_adds_the_table():
    module = SinusoidalPositionalEncoding(16, max_len=32)
    x = torch.randn(3, 10, 16)
    assert torch.allclose(module(x), x + sinusoidal_positional_encoding(10, 16))
    assert torch.allclose(
        module(x[:, :4], start_pos=6), x[:, :4] + sinusoidal_positional_encoding(10, 16)[6:]
    )
    assert list(module.parameters()) == [] and module.state_dict() == {}
    x64 = x.double().requires_grad_()
    out = module(x64)
    assert out.dtype == torch.float64
    out.sum().backward()
    assert torch.allclose(x64.grad, torch.ones_like(x64))


def test_sinusoidal_module_dropout():
    module = SinusoidalPositionalEncoding(8, max_len=16, dropout=0.5)
    x = torch.randn(2, 5, 8)
    module.eval()
    assert torch.allclose(module(x), x + sinusoidal_positional_encoding(5, 8))
    module.train()
    assert (module(x) == 0).any()


def test_learned_module():
    module = LearnedPositionalEmbedding(12, 8)
    assert module.embedding.weight.shape == (12, 8)
    x = torch.randn(2, 5, 8)
    assert torch.allclose(module(x), x + module.embedding.weight[:5])
    assert torch.allclose(module(x, start_pos=7), x + module.embedding.weight[7:12])
    module(x).sum().backward()
    grad = module.embedding.weight.grad
    assert torch.allclose(grad[:5], torch.full((5, 8), 2.0)) and grad[5:].abs().sum() == 0


@pytest.mark.parametrize("cls", [SinusoidalPositionalEncoding, LearnedPositionalEmbedding])
def test_modules_bad_inputs(cls):
    module = cls(8, max_len=6) if cls is SinusoidalPositionalEncoding else cls(6, 8)
    with pytest.raises(ValueError, match="max_len=6"):
        module(torch.randn(1, 7, 8))
    with pytest.raises(ValueError, match="max_len=6"):
        module(torch.randn(1, 3, 8), start_pos=4)
    with pytest.raises(ValueError, match="d_model=8"):
        module(torch.randn(1, 3, 4))
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        module(torch.randn(3, 8))
    with pytest.raises(ValueError, match="start_pos"):
        module(torch.randn(1, 3, 8), start_pos=-1)
    with pytest.raises(TypeError, match="x must be a floating"):
        module(torch.ones(1, 3, 8, dtype=torch.long))


def test_module_constructor_errors():
    with pytest.raises(ValueError, match="d_model must be even"):
        SinusoidalPositionalEncoding(7)
    with pytest.raises(ValueError, match="max_len"):
        SinusoidalPositionalEncoding(8, max_len=0)
    with pytest.raises(ValueError, match="dropout"):
        SinusoidalPositionalEncoding(8, dropout=1.0)
    with pytest.raises(ValueError, match="max_len"):
        LearnedPositionalEmbedding(0, 8)
    with pytest.raises(ValueError, match="d_model"):
        LearnedPositionalEmbedding(8, -1)


def test_rope_base_sets_the_frequencies():
    """base=10000 is the default; another base turns pair i by p * base^(-2i/d)."""
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(apply_rope(x), apply_rope(x, base=10000.0))
    got = apply_rope(x, base=500000.0)
    angles = torch.arange(5.0, dtype=torch.float64)[:, None] * 500000.0 ** (
        -torch.arange(0, 8, 2, dtype=torch.float64) / 8
    )
    x0, x1 = x[..., 0::2], x[..., 1::2]
    want = torch.stack(
        (x0 * angles.cos() - x1 * angles.sin(), x0 * angles.sin() + x1 * angles.cos()), dim=-1
    ).flatten(-2)
    torch.testing.assert_close(got, want)
    assert not torch.allclose(got, apply_rope(x))
    perm = rope_half_permutation(8)
    torch.testing.assert_close(
        apply_rope_half(x, base=500000.0)[..., perm], apply_rope(x[..., perm], base=500000.0)
    )
    with pytest.raises(ValueError, match="base"):
        apply_rope(x, base=1.0)
