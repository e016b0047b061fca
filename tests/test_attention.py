"""course_lib.attention: equal to PyTorch, stable, masked correctly, clear errors, gradients."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import scaled_dot_product_attention, self_attention, softmax
from course_lib.masking import causal_mask

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ------------------------------------------------------------------------------------ softmax


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_equals_torch(dtype, dim):
    x = randn(3, 4, 5, dtype=dtype) * 10
    ours = softmax(x, dim=dim)
    assert ours.dtype == dtype
    torch.testing.assert_close(ours, torch.softmax(x, dim=dim), atol=TOL[dtype], rtol=0)


@pytest.mark.parametrize("offset", [1000.0, -1000.0, 1e30])
def test_softmax_is_stable_for_large_inputs(offset):
    x = torch.tensor([[1.0, 2.0, 3.0]]) + offset
    naive = x.exp() / x.exp().sum(-1, keepdim=True)
    assert torch.isnan(naive).any(), "the naive softmax should overflow here (test is meaningful)"
    ours = softmax(x)
    assert torch.isfinite(ours).all()
    torch.testing.assert_close(ours.sum(-1), torch.ones(1))
    if abs(offset) < 1e6:  # at 1e30 the float32 spacing swallows the differences 1, 2, 3
        torch.testing.assert_close(ours, torch.softmax(torch.tensor([[1.0, 2.0, 3.0]]), -1))


def test_softmax_is_shift_invariant():
    x = randn(2, 6, dtype=torch.float64)
    torch.testing.assert_close(softmax(x), softmax(x + 123.0), atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    "x, dim, error, match",
    [
        ([1.0, 2.0], -1, TypeError, "x must be a torch.Tensor"),
        (torch.tensor([1, 2, 3]), -1, TypeError, "x must be a floating-point"),
        (torch.ones(2, 3), 2, ValueError, "dim=2 is out of range"),
        (torch.ones(2, 3), -3, ValueError, "dim=-3 is out of range"),
    ],
)
def test_softmax_rejects_bad_inputs(x, dim, error, match):
    with pytest.raises(error, match=match):
        softmax(x, dim=dim)


def test_softmax_gradient_flows_and_matches_torch():
    x = randn(3, 5, dtype=torch.float64).requires_grad_(True)
    upstream = randn(3, 5, dtype=torch.float64, seed=1)
    (softmax(x) * upstream).sum().backward()
    ours = x.grad.clone()
    x.grad = None
    (torch.softmax(x, -1) * upstream).sum().backward()
    torch.testing.assert_close(ours, x.grad, atol=1e-12, rtol=0)
    assert ours.abs().sum() > 0


# ------------------------------------------------------------------- scaled dot-product attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape",
    [
        ((5, 8), (7, 8), (7, 3)),
        ((2, 5, 8), (2, 7, 8), (2, 7, 4)),
        ((2, 3, 4, 16), (2, 3, 6, 16), (2, 3, 6, 5)),
    ],
)
def test_attention_equals_torch(dtype, use_mask, q_shape, k_shape, v_shape):
    q, k, v = (
        randn(*q_shape, dtype=dtype),
        randn(*k_shape, dtype=dtype, seed=1),
        randn(*v_shape, dtype=dtype, seed=2),
    )
    n_q, n_k = q_shape[-2], k_shape[-2]
    mask = causal_mask(n_k)[-n_q:] if use_mask else None  # no fully masked rows
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert output.dtype == weights.dtype == dtype
    assert output.shape == (*q_shape[:-1], v_shape[-1])
    assert weights.shape == (*q_shape[:-1], n_k)
    torch.testing.assert_close(output, expected, atol=TOL[dtype], rtol=0)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(weights, torch.softmax(scores, -1), atol=TOL[dtype], rtol=0)


def test_attention_weights_rows_sum_to_one_and_mask_gives_zero():
    q, k, v = randn(4, 6), randn(6, 6, seed=1), randn(6, 2, seed=2)
    mask = causal_mask(6)[:4]
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4))
    assert (weights[~mask] == 0).all()


def test_fully_masked_row_gives_zero_weights_output_and_finite_gradient():
    q = randn(2, 3, 4).requires_grad_(True)
    k, v = randn(2, 5, 4, seed=1), randn(2, 5, 2, seed=2)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = False
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    assert (weights[0, 1] == 0).all() and (output[0, 1] == 0).all()
    assert torch.isfinite(output).all()
    output.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_attention_is_stable_for_large_scores():
    q, k, v = randn(3, 8) * 100, randn(5, 8, seed=1) * 100, randn(5, 2, seed=2)
    output, weights = scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(output).all() and torch.isfinite(weights).all()
    expected = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(output, expected, atol=1e-4, rtol=1e-4)


def test_attention_gradients_match_torch():
    q, k, v = (randn(2, 3, 4, dtype=torch.float64, seed=s).requires_grad_(True) for s in range(3))
    scaled_dot_product_attention(q, k, v)[0].pow(2).sum().backward()
    ours = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    F.scaled_dot_product_attention(q, k, v).pow(2).sum().backward()
    for mine, theirs in zip(ours, (q.grad, k.grad, v.grad), strict=True):
        assert mine.abs().sum() > 0
        torch.testing.assert_close(mine, theirs, atol=1e-10, rtol=0)


@pytest.mark.parametrize(
    "q, k, v, mask, error, match",
    [
        ("q", torch.ones(3, 4), torch.ones(3, 2), None, TypeError, "q must be a torch.Tensor"),
        (
            torch.ones(4),
            torch.ones(3, 4),
            torch.ones(3, 2),
            None,
            ValueError,
            "q must have at least 2",
        ),
        (torch.ones(2, 4), torch.ones(3, 5), torch.ones(3, 2), None, ValueError, "d_k"),
        (
            torch.ones(2, 4),
            torch.ones(3, 4),
            torch.ones(4, 2),
            None,
            ValueError,
            "k has n_k=3 keys",
        ),
        (
            torch.ones(2, 4),
            torch.ones(3, 4, dtype=torch.float64),
            torch.ones(3, 2),
            None,
            TypeError,
            "q, k and v must share one dtype",
        ),
        (
            torch.ones(2, 4, dtype=torch.long),
            torch.ones(3, 4),
            torch.ones(3, 2),
            None,
            TypeError,
            "q must be a floating-point",
        ),
        (
            torch.ones(2, 2, 4),
            torch.ones(3, 3, 4),
            torch.ones(3, 3, 2),
            None,
            ValueError,
            "batch dimensions",
        ),
        (
            torch.ones(2, 4),
            torch.ones(3, 4),
            torch.ones(3, 2),
            torch.ones(2, 3),
            TypeError,
            "mask must have dtype bool",
        ),
        (
            torch.ones(2, 4),
            torch.ones(3, 4),
            torch.ones(3, 2),
            torch.ones(2, 4, dtype=torch.bool),
            ValueError,
            "mask of shape",
        ),
    ],
)
def test_attention_rejects_bad_inputs(q, k, v, mask, error, match):
    with pytest.raises(error, match=match):
        scaled_dot_product_attention(q, k, v, mask)


def test_attention_refuses_what_it_would_silently_get_wrong():
    q = randn(2, 5, 8)
    # a 4-D (batch, 1, n_q, n_k) mask with 3-D q broadcast the OUTPUT to (2, 2, 5, 8)
    with pytest.raises(
        ValueError, match=r"would enlarge the attention scores of shape \(2, 5, 5\)"
    ):
        scaled_dot_product_attention(q, q, q, torch.ones(2, 1, 5, 5, dtype=torch.bool))
    # dropout_p outside [0, 1): ValueError from inside F.dropout, or silently no dropout
    for p in (1.5, -0.1):
        with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\)"):
            scaled_dot_product_attention(q, q, q, dropout_p=p)
    # the right inputs still pass: broadcasting masks, fewer queries than keys, batch 1
    row = torch.ones(1, 5, dtype=torch.bool)
    for mask in (row, torch.ones(2, 1, 5, dtype=torch.bool), causal_mask(5)):
        assert scaled_dot_product_attention(q, q, q, mask)[0].shape == (2, 5, 8)
    assert scaled_dot_product_attention(q[:, 3:], q, q, is_causal=True)[0].shape == (2, 2, 8)
    # more queries than keys under is_causal: aligned bottom-right as tiled_attention, the first
    # queries have no allowed key, a fully masked row (lesson 05): zero output, by design
    out = scaled_dot_product_attention(q, q[:, :3], q[:, :3], is_causal=True)[0]
    assert out.shape == (2, 5, 8) and not out[:, :2].any() and out[:, 2:].all()
    heads = randn(1, 2, 5, 4)
    mask = torch.ones(1, 1, 5, 5, dtype=torch.bool)
    assert scaled_dot_product_attention(heads, heads, heads, mask)[0].shape == (1, 2, 5, 4)


# ------------------------------------------------------------------------------ self-attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_self_attention_is_attention_of_projections(dtype):
    x = randn(2, 5, 8, dtype=dtype)
    w_q, w_k, w_v = (randn(8, d, dtype=dtype, seed=s) for s, d in ((1, 4), (2, 4), (3, 6)))
    output, weights = self_attention(x, w_q, w_k, w_v)
    assert output.shape == (2, 5, 6) and weights.shape == (2, 5, 5)
    expected = F.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
    torch.testing.assert_close(output, expected, atol=TOL[dtype] * 10, rtol=TOL[dtype])


def test_self_attention_gradients_reach_every_weight():
    x = randn(3, 4)
    ws = [randn(4, 4, seed=s).requires_grad_(True) for s in (1, 2, 3)]
    self_attention(x, *ws)[0].pow(2).sum().backward()
    assert all(w.grad is not None and w.grad.abs().sum() > 0 for w in ws)


@pytest.mark.parametrize(
    "w_q, w_k, w_v, match",
    [
        (
            torch.ones(4, 2),
            torch.ones(4, 2),
            torch.ones(4, 2),
            "w_q has 4 rows but x has d_model=8",
        ),
        (torch.ones(8, 2), torch.ones(2, 8), torch.ones(8, 2), "w_k has 2 rows"),
        (torch.ones(8, 2), torch.ones(8, 2), torch.ones(8), "w_v must have 2 dimensions"),
    ],
)
def test_self_attention_rejects_bad_weights(w_q, w_k, w_v, match):
    with pytest.raises(ValueError, match=match):
        self_attention(torch.ones(3, 8), w_q, w_k, w_v)


def test_self_attention_names_a_dtype_mismatch():
    # before: "expected m1 and m2 to have the same dtype" from inside x @ w_q
    w = torch.ones(8, 2)
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        self_attention(torch.ones(3, 8, dtype=torch.long), w, w, w)
    with pytest.raises(TypeError, match="w_q has dtype float32 but x has float64"):
        self_attention(torch.ones(3, 8, dtype=torch.float64), w, w, w)
