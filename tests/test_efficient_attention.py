"""course_lib.efficient_attention and course_lib.cost against exact references."""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import scaled_dot_product_attention
from course_lib.cost import loglog_slope, median_seconds, peak_tensor_bytes
from course_lib.efficient_attention import (
    performer_attention,
    performer_features,
    random_feature_projection,
    sliding_window_attention,
    sliding_window_mask,
    tiled_attention,
)
from course_lib.masking import causal_mask


def qkv(*shape, dtype=torch.float32, seed=0, scale=1.0, d_v=None):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape, generator=gen, dtype=dtype) * scale
    k = torch.randn(*shape, generator=gen, dtype=dtype) * scale
    v_shape = shape if d_v is None else (*shape[:-1], d_v)
    v = torch.randn(*v_shape, generator=gen, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,block", [(37, 8), (64, 16), (5, 128), (20, 1)])
def test_tiled_equals_full_attention(dtype, atol, causal, n, block):
    q, k, v = qkv(2, 3, n, 16, dtype=dtype, scale=3.0, d_v=7)  # large scores: the max moves
    want, _ = scaled_dot_product_attention(q, k, v, causal_mask(n) if causal else None)
    got = tiled_attention(q, k, v, causal=causal, block_size=block)
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, atol=atol, rtol=0)


def test_tiled_handles_unequal_lengths_and_broadcast_batches():
    q, _, _ = qkv(2, 1, 9, 8)
    _, k, v = qkv(1, 4, 23, 8, seed=1)
    want, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(tiled_attention(q, k, v, block_size=4), want, atol=1e-5, rtol=0)


def test_tiled_never_stores_the_n_by_n_matrix():
    n = 2048
    q, k, v = qkv(n, 32)
    full = peak_tensor_bytes(lambda: scaled_dot_product_attention(q, k, v))
    tiled = peak_tensor_bytes(lambda: tiled_attention(q, k, v, block_size=128))
    assert full >= n * n * 4  # at least one float32 (n, n) matrix
    assert tiled < n * n * 4 / 8
    assert full / tiled > 8


def test_sliding_window_mask_small_cases():
    mask = sliding_window_mask(5, 1)
    want = torch.tensor(
        [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1], [0, 0, 0, 1, 1]],
        dtype=torch.bool,
    )
    assert torch.equal(mask, want)
    assert torch.equal(sliding_window_mask(5, 1, causal=True), want.tril())
    assert torch.equal(sliding_window_mask(4, 0), torch.eye(4, dtype=torch.bool))
    assert sliding_window_mask(6, 10).all()
    glob = sliding_window_mask(6, 1, global_tokens=[0])
    assert glob[0].all() and glob[:, 0].all() and not glob[5, 2]
    assert torch.equal(
        sliding_window_mask(6, 1, causal=True, global_tokens=[0]), glob & causal_mask(6)
    )


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [0, 1, 4, 50])
def test_banded_equals_masked_full_attention(dtype, atol, causal, window):
    q, k, v = qkv(2, 3, 20, 8, dtype=dtype, d_v=5)
    mask = sliding_window_mask(20, window, causal=causal)
    want, _ = scaled_dot_product_attention(q, k, v, mask)
    got = sliding_window_attention(q, k, v, window, causal=causal)
    torch.testing.assert_close(got, want, atol=atol, rtol=0)


def test_banded_memory_grows_linearly():
    peaks = []
    for n in (512, 1024, 2048):
        q, k, v = qkv(n, 16)
        peaks.append(peak_tensor_bytes(lambda q=q, k=k, v=v: sliding_window_attention(q, k, v, 8)))
    assert 0.9 < loglog_slope([512, 1024, 2048], peaks) < 1.1


def test_performer_error_falls_as_features_grow():
    q, k, v = qkv(1, 256, 32, dtype=torch.float64, scale=0.5)
    want, _ = scaled_dot_product_attention(q, k, v)
    errors = []
    for m in (16, 256, 4096):
        projection = random_feature_projection(
            m, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64
        )
        errors.append((performer_attention(q, k, v, projection=projection) - want).abs().mean())
    assert errors[0] > errors[1] > errors[2]
    assert errors[0] / errors[2] > 5


def test_performer_features_are_positive_and_orthogonal_blocks():
    projection = random_feature_projection(
        20, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    directions = projection[:8] / projection[:8].norm(dim=-1, keepdim=True)
    torch.testing.assert_close(directions @ directions.T, torch.eye(8, dtype=torch.float64))
    q, k, v = qkv(2, 10, 8)
    out = performer_attention(q, k, v, 20, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 10, 8) and torch.isfinite(out).all()


def test_cost_helpers():
    assert loglog_slope([1, 2, 4], [3, 12, 48]) == pytest.approx(2.0)
    assert median_seconds(lambda: None, repeats=3) >= 0
    assert peak_tensor_bytes(lambda: torch.zeros(1000)) == 4000
    # two tensors alive at once count twice; one freed before the next counts once
    assert peak_tensor_bytes(lambda: (torch.zeros(100), torch.zeros(100))) == 800

    def sequential():
        a = torch.zeros(100)
        del a
        return torch.zeros(100)

    assert peak_tensor_bytes(sequential) == 400


@pytest.mark.parametrize(
    "call,words",
    [
        (lambda: tiled_attention(torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 4)), "d_k"),
        (lambda: tiled_attention(*qkv(3, 4), block_size=0), "block_size"),
        (lambda: sliding_window_mask(0, 1), "n must be"),
        (lambda: sliding_window_mask(4, -1), "window"),
        (lambda: sliding_window_mask(4, 1, global_tokens=[4]), "global_tokens"),
        (lambda: sliding_window_attention(*qkv(3, 4), window=-2), "window"),
        (
            lambda: tiled_attention(*qkv(2, 3, 4), key_padding_mask=torch.ones(2, 4).bool()),
            "key_padding_mask",
        ),
        (lambda: sliding_window_mask(3, 1, n_k=5, global_tokens=[0]), "global_tokens"),
        (lambda: sliding_window_mask(3, 1, n_k=0), "n_k"),
        (lambda: performer_attention(*qkv(3, 4), projection=torch.randn(8, 5)), "columns"),
        (lambda: random_feature_projection(0, 4), "num_features"),
        (lambda: median_seconds(lambda: None, repeats=0), "repeats"),
        (lambda: loglog_slope([1], [1]), "length"),
    ],
)
def test_input_checks_name_the_argument(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_what_is_timed_or_measured_must_be_a_function():
    # before: "'Tensor' object is not callable" when a learner passed model(x) for lambda: ...
    from course_lib.cost import minor_page_faults

    for measure in (median_seconds, peak_tensor_bytes, minor_page_faults):
        with pytest.raises(TypeError, match="fn must be a function to call.* got Tensor"):
            measure(torch.zeros(3))


def test_a_switch_must_be_true_or_false():
    with pytest.raises(TypeError, match="stabilize must be True or False, got 1"):
        performer_features(torch.randn(3, 4), torch.randn(8, 4), stabilize=1)
    with pytest.raises(TypeError, match="causal must be True or False, got None"):
        tiled_attention(torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4), causal=None)


@pytest.mark.parametrize(
    "x, projection, error, words",
    [
        ((2, 5, 8), (16, 6), ValueError, "projection has 6 columns but x has d_k=8"),
        ((2, 5, 8), (8, 16), ValueError, "projection has 16 columns but x has d_k=8"),
        ((2, 5, 8), (8,), ValueError, r"projection must have 2 dimensions \(num_features, d_k\)"),
        ((8,), (16, 8), ValueError, r"x must have at least 2 dimensions \(..., n, d_k\)"),
        ((2, 5, 8, "int64"), (16, 8), TypeError, "x must be a floating-point tensor"),
        ((2, 5, 8, "float64"), (16, 8), TypeError, "projection has dtype float32 but x has"),
    ],
)
def test_performer_features_names_a_projection_that_does_not_fit(x, projection, error, words):
    # before: "mat1 and mat2 shapes cannot be multiplied (10x8 and 6x16)", "expected m1 and m2
    # to have the same dtype", or a broadcast error, from the matrix multiply inside
    def tensor(spec):
        *shape, dtype = spec if isinstance(spec[-1], str) else (*spec, "float32")
        return torch.randn(shape).to(getattr(torch, dtype))

    with pytest.raises(error, match=words):
        performer_features(tensor(x), tensor(projection))
    with pytest.raises(TypeError, match="is_query must be True or False, got 'no'"):
        performer_features(torch.randn(5, 8), torch.randn(16, 8), is_query="no")


def test_peak_memory_does_not_count_views_of_the_inputs():
    x = torch.zeros(1000)
    assert peak_tensor_bytes(lambda: (x[:10], x.view(10, 100), x.t())) == 0
    assert peak_tensor_bytes(lambda: x[:10] * 2) == 40


# --------------------------------------------------------------------------------------------
# FlashAttention: forward with lse, backward recomputed from lse, causal bottom-right, padding
# --------------------------------------------------------------------------------------------


def full_reference(q, k, v, causal=False, key_padding_mask=None):
    """course_lib's full attention with the same causal alignment and padding."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    mask = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q) if causal else None
    if key_padding_mask is not None:
        pad = key_padding_mask[..., None, :]
        mask = pad if mask is None else mask & pad
    return scaled_dot_product_attention(q, k, v, mask)[0]


@pytest.mark.parametrize("n_q,n_k", [(10, 10), (3, 10), (1, 9), (10, 4), (37, 37)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_tiled_values_and_gradients_equal_full_attention(n_q, n_k, causal, padded):
    q, _, _ = qkv(2, n_q, 8, dtype=torch.float64, seed=n_q, scale=2.0)
    _, k, v = qkv(2, n_k, 8, dtype=torch.float64, seed=n_k + 100, scale=2.0, d_v=5)
    mask = None
    if padded:  # every row keeps its first key, loses some others
        mask = torch.rand(2, n_k, generator=torch.Generator().manual_seed(1)) > 0.4
        mask[:, 0] = True
    for t in (q, k, v):
        t.requires_grad_(True)
    want = full_reference(q, k, v, causal, mask)
    got, lse = tiled_attention(
        q, k, v, causal=causal, block_size=4, key_padding_mask=mask, return_lse=True
    )
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    grad = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for a, b in zip(
        torch.autograd.grad(got, (q, k, v), grad),
        torch.autograd.grad(want, (q, k, v), grad),
        strict=True,
    ):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    # lse is the log-sum-exp of each query's allowed scores (-inf where there is none)
    scores = q @ k.transpose(-2, -1) / 8**0.5
    allowed = torch.ones(n_q, n_k, dtype=torch.bool)
    allowed = allowed.tril(n_k - n_q) if causal else allowed
    allowed = allowed & mask[:, None, :] if padded else allowed
    torch.testing.assert_close(lse, scores.masked_fill(~allowed, float("-inf")).logsumexp(-1))


def test_causal_is_aligned_bottom_right_like_is_causal():
    """One new query after 9 cached keys sees all 10 keys (it used to see key 0 only)."""
    q, _, _ = qkv(1, 1, 8, seed=3)
    _, k, v = qkv(1, 10, 8, seed=4)
    want, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    got = tiled_attention(q, k, v, causal=True, block_size=4)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    assert not torch.allclose(got, v[:, :1])


@pytest.mark.parametrize(
    "causal,padded", [(False, False), (True, False), (False, True), (True, True)]
)
def test_tiled_gradcheck_float64(causal, padded):
    q, k, v = qkv(2, 7, 4, dtype=torch.float64, seed=5, d_v=3)
    mask = torch.tensor([[True] * 7, [True, False, True, True, False, True, False]])
    for t in (q, k, v):
        t.requires_grad_(True)

    def fn(q, k, v):  # both outputs, so that a gradient on lse is checked too
        return tiled_attention(
            q,
            k,
            v,
            causal=causal,
            block_size=3,
            key_padding_mask=mask if padded else None,
            return_lse=True,
        )

    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_rows_without_keys_give_zero_output_and_zero_gradient():
    q, k, v = qkv(1, 4, 8, dtype=torch.float64, seed=6)
    q.requires_grad_(True)
    mask = torch.tensor([False, False, False, False])
    out, lse = tiled_attention(q, k, v, key_padding_mask=mask, return_lse=True)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isinf(lse).all()
    out.sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q))


def test_autograd_saves_only_q_k_v_output_and_lse():
    q, k, v = qkv(2, 64, 16, seed=7)
    for t in (q, k, v):
        t.requires_grad_(True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out, lse = tiled_attention(q, k, v, block_size=8, return_lse=True)
    assert sum(t.numel() for t in saved) == sum(t.numel() for t in (q, k, v, out, lse))


def test_forward_and_backward_memory_is_linear_and_far_below_full():
    def step(fn, n):
        q, k, v, d_out = (
            torch.randn(n, 32, generator=torch.Generator().manual_seed(n + i)) for i in range(4)
        )
        for t in (q, k, v):
            t.requires_grad_(True)
        return peak_tensor_bytes(
            lambda: torch.autograd.grad(fn(q, k, v), (q, k, v), d_out), grad=True
        )

    tiled = [
        step(lambda q, k, v: tiled_attention(q, k, v, block_size=64), n) for n in (512, 1024, 2048)
    ]
    full = step(lambda q, k, v: scaled_dot_product_attention(q, k, v)[0], 2048)
    assert 0.9 < loglog_slope([512, 1024, 2048], tiled) < 1.1
    assert full >= 2 * 2048 * 2048 * 4  # at least two float32 (n, n) matrices
    assert full / tiled[-1] > 8


def test_tiled_backward_function_matches_autograd_with_broadcast_batches():
    from course_lib.efficient_attention import tiled_attention_backward, tiled_attention_forward

    q, _, _ = qkv(3, 5, 4, dtype=torch.float64, seed=8)
    _, k, v = qkv(2, 3, 9, 4, dtype=torch.float64, seed=9)
    d_out = torch.randn(2, 3, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    out, lse = tiled_attention_forward(q, k, v, causal=True, block_size=2)
    got = tiled_attention_backward(q, k, v, out, lse, d_out, causal=True, block_size=2)
    for t in (q, k, v):
        t.requires_grad_(True)
    want = torch.autograd.grad(full_reference(q, k, v, causal=True), (q, k, v), d_out)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_cost_counts_the_backward_pass_and_page_faults():
    from course_lib.cost import minor_page_faults

    x = torch.randn(1000, requires_grad=True)
    # forward: y (4000 bytes) and the saved x.exp() of exp's backward; backward: the gradient
    assert peak_tensor_bytes(lambda: torch.autograd.grad(x.exp().sum(), x), grad=True) >= 8000
    assert peak_tensor_bytes(lambda: x.exp().sum()) == 4004
    assert minor_page_faults(lambda: None) >= 0
    with pytest.raises(TypeError, match="grad must be True or False"):
        peak_tensor_bytes(lambda: None, grad=1)


# --------------------------------------------------------------------------------------------
# sliding windows with more keys than queries; Performer features without the constant
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_q,n_k", [(3, 10), (1, 7), (10, 3), (6, 6)])
@pytest.mark.parametrize("window", [0, 2, 30])
@pytest.mark.parametrize("causal", [False, True])
def test_sliding_window_with_unequal_lengths(n_q, n_k, window, causal):
    q, _, _ = qkv(2, n_q, 8, dtype=torch.float64, seed=n_q)
    _, k, v = qkv(2, n_k, 8, dtype=torch.float64, seed=n_k + 50, d_v=4)
    mask = sliding_window_mask(n_q, window, causal, n_k=n_k)
    assert mask.shape == (n_q, n_k)
    # query i is token n_k - n_q + i: its distance to key j is measured from there
    query_pos = torch.arange(n_q)[:, None] + n_k - n_q
    keys = torch.arange(n_k)
    want_mask = ((query_pos - keys).abs() <= window) & ((keys <= query_pos) | (not causal))
    assert torch.equal(mask, want_mask)
    want, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(
        sliding_window_attention(q, k, v, window, causal=causal), want, atol=1e-12, rtol=0
    )


def test_performer_features_without_the_constant_are_unbiased():
    gen = torch.Generator().manual_seed(0)
    q = 0.3 * torch.randn(5, 8, dtype=torch.float64, generator=gen)
    k = 0.3 * torch.randn(7, 8, dtype=torch.float64, generator=gen)
    want = (q @ k.T).exp()
    estimates, stabilized = [], []
    for _ in range(300):
        w = random_feature_projection(256, 8, generator=gen, dtype=torch.float64)
        estimates.append(
            performer_features(q, w, stabilize=False) @ performer_features(k, w, stabilize=False).T
        )
        stabilized.append(performer_features(q, w) @ performer_features(k, w, is_query=False).T)
    mean = torch.stack(estimates).mean(0)
    assert ((mean - want) / want).abs().max() < 0.03  # unbiased: E[phi(q).phi(k)] = exp(q.k)
    # the stabilising constants scale every estimate: far from exp(q.k), same ratios per row
    biased = torch.stack(stabilized).mean(0)
    assert ((biased - want) / want).abs().max() > 0.5
    ratio = estimates[0] / stabilized[0]
    torch.testing.assert_close(ratio, ratio[:, :1].expand_as(ratio))


def test_orthogonal_directions_are_unbiased_rotations():
    """Each orthogonal block, like a Gaussian matrix, has no preferred direction: the mean of
    many projections' rows is 0 (QR without the sign fix leans toward the diagonal)."""
    gen = torch.Generator().manual_seed(1)
    blocks = torch.stack(
        [random_feature_projection(8, 8, generator=gen, dtype=torch.float64) for _ in range(2000)]
    )
    diagonal = torch.diagonal(blocks, dim1=-2, dim2=-1)  # (2000, 8)
    assert diagonal.mean().abs() < 0.1
