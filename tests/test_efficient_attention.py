"""course_lib.efficient_attention and course_lib.cost against exact references."""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import scaled_dot_product_attention
from course_lib.cost import loglog_slope, median_seconds, peak_tensor_bytes
from course_lib.efficient_attention import (
    performer_attention,
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
            lambda: sliding_window_attention(
                torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 4), 1
            ),
            "self-attention",
        ),
        (lambda: performer_attention(*qkv(3, 4), projection=torch.randn(8, 5)), "columns"),
        (lambda: random_feature_projection(0, 4), "num_features"),
        (lambda: median_seconds(lambda: None, repeats=0), "repeats"),
        (lambda: loglog_slope([1], [1]), "length"),
    ],
)
def test_input_checks_name_the_argument(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_peak_memory_does_not_count_views_of_the_inputs():
    x = torch.zeros(1000)
    assert peak_tensor_bytes(lambda: (x[:10], x.view(10, 100), x.t())) == 0
    assert peak_tensor_bytes(lambda: x[:10] * 2) == 40
