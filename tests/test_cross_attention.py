"""course_lib.cross_attention: equal to PyTorch, masks respected, clear errors, gradients."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.attention import self_attention
from course_lib.cross_attention import CrossAttentionSublayer, cross_attention
from course_lib.masking import padding_mask
from course_lib.multihead import MultiHeadAttention

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def _inputs(dtype=torch.float32, batch=2, n_q=3, n_kv=5, d_model=8, d_k=4, d_v=6):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, n_q, d_model, generator=gen, dtype=dtype)
    memory = torch.randn(batch, n_kv, d_model, generator=gen, dtype=dtype)
    w_q = torch.randn(d_model, d_k, generator=gen, dtype=dtype)
    w_k = torch.randn(d_model, d_k, generator=gen, dtype=dtype)
    w_v = torch.randn(d_model, d_v, generator=gen, dtype=dtype)
    return x, memory, w_q, w_k, w_v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_torch_sdpa(dtype):
    x, memory, w_q, w_k, w_v = _inputs(dtype)
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]), 0)  # (2, 1, 5)
    out, weights = cross_attention(x, memory, w_q, w_k, w_v, memory_mask=mask)
    want = F.scaled_dot_product_attention(x @ w_q, memory @ w_k, memory @ w_v, attn_mask=mask)
    assert out.shape == (2, 3, 6) and weights.shape == (2, 3, 5)
    assert out.dtype == dtype
    torch.testing.assert_close(out, want, atol=TOL[dtype], rtol=TOL[dtype])
    assert (weights[1, :, 2:] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, dtype=dtype))


def test_padding_changes_nothing_for_the_short_sentence():
    x, memory, w_q, w_k, w_v = _inputs(torch.float64)
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]), 0)
    out, _ = cross_attention(x, memory, w_q, w_k, w_v, memory_mask=mask)
    alone, _ = cross_attention(x[1:], memory[1:, :3], w_q, w_k, w_v)
    torch.testing.assert_close(out[1:], alone, atol=1e-10, rtol=1e-10)
    unmasked, _ = cross_attention(x, memory, w_q, w_k, w_v)
    assert not torch.allclose(unmasked[1:], alone)


def test_queries_come_from_x():
    x, memory, w_q, w_k, w_v = _inputs(n_q=3, n_kv=7)
    out, weights = cross_attention(x, memory, w_q, w_k, w_v)
    assert out.shape[-2] == 3 and weights.shape[-2:] == (3, 7)
    # changing x changes only the queries; changing memory changes keys and values
    out2, _ = cross_attention(x, memory + 1.0, w_q, w_k, w_v)
    assert not torch.allclose(out, out2)


def test_self_attention_is_the_special_case():
    x, _, w_q, w_k, w_v = _inputs(torch.float64)
    torch.testing.assert_close(
        cross_attention(x, x, w_q, w_k, w_v)[0], self_attention(x, w_q, w_k, w_v)[0]
    )


def test_extra_batch_dimensions():
    gen = torch.Generator().manual_seed(1)
    x, memory = torch.randn(2, 3, 4, 8, generator=gen), torch.randn(2, 3, 6, 8, generator=gen)
    w = torch.randn(8, 8, generator=gen)
    out, weights = cross_attention(x, memory, w, w, w)
    assert out.shape == (2, 3, 4, 8) and weights.shape == (2, 3, 4, 6)
    torch.testing.assert_close(out[1, 2], cross_attention(x[1, 2], memory[1, 2], w, w, w)[0])


def test_gradients_flow():
    x, memory, w_q, w_k, w_v = _inputs(torch.float64)
    tensors = [t.requires_grad_() for t in (x, memory, w_q, w_k, w_v)]
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]), 0)
    cross_attention(*tensors, memory_mask=mask)[0].sum().backward()
    for t in tensors:
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
    # padded memory positions receive no gradient
    assert (memory.grad[1, 2:] == 0).all()


@pytest.mark.parametrize(
    "change, error, match",
    [
        (lambda a: {**a, "x": a["x"].tolist()}, TypeError, "x must be a torch.Tensor"),
        (lambda a: {**a, "memory": a["memory"][0, 0]}, ValueError, "memory must have at least 2"),
        (lambda a: {**a, "x": a["x"].long()}, TypeError, "x must be a floating-point"),
        (lambda a: {**a, "memory": a["memory"][:1]}, ValueError, "batch dimensions"),
        (lambda a: {**a, "w_q": a["w_q"][:5]}, ValueError, "w_q has 5 rows"),
        (lambda a: {**a, "w_k": a["w_k"][:, :3]}, ValueError, "w_q has d_k=4 columns but w_k"),
        (lambda a: {**a, "w_v": a["w_v"][0]}, ValueError, "w_v must have 2 dimensions"),
        (
            lambda a: {**a, "memory_mask": torch.ones(2, 1, 5)},
            TypeError,
            "memory_mask must have dtype bool",
        ),
        (
            lambda a: {**a, "memory_mask": torch.ones(2, 1, 4, dtype=torch.bool)},
            ValueError,
            "memory_mask of shape",
        ),
        (
            lambda a: {**a, "memory_mask": torch.ones(4, 2, 3, 5, dtype=torch.bool)},
            ValueError,
            "memory_mask of shape .* would enlarge",
        ),
        (  # before: "expected m1 and m2 to have the same dtype" from x @ w_q
            lambda a: {**a, "x": a["x"].double()},
            TypeError,
            "w_q has dtype float32 but x has float64",
        ),
        (
            lambda a: {**a, "w_v": a["w_v"].double()},
            TypeError,
            "w_v has dtype float64 but memory has float32",
        ),
    ],
)
def test_bad_inputs(change, error, match):
    x, memory, w_q, w_k, w_v = _inputs()
    args = change({"x": x, "memory": memory, "w_q": w_q, "w_k": w_k, "w_v": w_v})
    with pytest.raises(error, match=match):
        cross_attention(**args)


# ---------------------------------------------------------------------------------------------
# CrossAttentionSublayer
# ---------------------------------------------------------------------------------------------


def _decoder_layer(norm_first, dtype, d_model=16, num_heads=4):
    torch.manual_seed(0)
    layer = (
        nn.TransformerDecoderLayer(
            d_model,
            num_heads,
            dim_feedforward=32,
            dropout=0.0,
            batch_first=True,
            norm_first=norm_first,
        )
        .to(dtype)
        .eval()
    )
    with torch.no_grad():  # random LayerNorm weights: a misplaced norm must show
        layer.norm2.weight.normal_(1.0, 0.3)
        layer.norm2.bias.normal_(0.0, 0.3)
    sublayer = CrossAttentionSublayer(d_model, num_heads, norm_first=norm_first).to(dtype).eval()
    sublayer.attn = MultiHeadAttention.from_torch(layer.multihead_attn)
    sublayer.norm.load_state_dict(layer.norm2.state_dict())
    return layer, sublayer


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_sublayer_matches_torch_decoder_layer(norm_first, dtype):
    layer, sublayer = _decoder_layer(norm_first, dtype)
    gen = torch.Generator().manual_seed(2)
    x = 2 * torch.randn(3, 4, 16, generator=gen, dtype=dtype) + 1
    memory = torch.randn(3, 6, 16, generator=gen, dtype=dtype)
    mask = padding_mask(torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]]), 0)
    query = layer.norm2(x) if norm_first else x
    attended = layer.multihead_attn(query, memory, memory, key_padding_mask=~mask.squeeze(1))[0]
    want = x + attended if norm_first else layer.norm2(x + attended)
    got = sublayer(x, memory, mask)
    assert got.shape == (3, 4, 16) and got.dtype == dtype
    torch.testing.assert_close(got, want, atol=TOL[dtype], rtol=TOL[dtype])


def test_sublayer_state_dict_names():
    names = set(CrossAttentionSublayer(8, 2).state_dict())
    projections = {f"attn.{p}_proj.{w}" for p in ("q", "k", "v", "out") for w in ("weight", "bias")}
    assert names == projections | {"norm.weight", "norm.bias"}


def test_sublayer_does_not_normalise_memory():
    _, sublayer = _decoder_layer(True, torch.float64)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 16, generator=gen, dtype=torch.float64)
    memory = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    # a LayerNorm of memory would make the output invariant to shifting memory; ours is not
    shifted = memory + 3.0
    assert not torch.allclose(sublayer(x, memory), sublayer(x, shifted))


def test_sublayer_gradients_flow():
    _, sublayer = _decoder_layer(False, torch.float32)
    x = torch.randn(2, 3, 16, requires_grad=True)
    memory = torch.randn(2, 5, 16, requires_grad=True)
    sublayer(x, memory).pow(2).sum().backward()
    assert x.grad.abs().sum() > 0 and memory.grad.abs().sum() > 0
    assert all(p.grad is not None for p in sublayer.parameters())


@pytest.mark.parametrize(
    "x_shape, memory_shape, mask, error, match",
    [
        ((2, 3, 8), (3, 5, 8), None, ValueError, "x has batch=2 but memory has batch=3"),
        (
            (2, 3, 6),
            (2, 5, 8),
            None,
            ValueError,
            "x has 6 features but this sub-layer has d_model=8",
        ),
        ((2, 3, 8), (2, 5, 4), None, ValueError, "memory has 4 features"),
        ((3, 8), (2, 5, 8), None, ValueError, "x must have 3 dimensions"),
        (
            (2, 3, 8),
            (2, 5, 8),
            torch.ones(2, 1, 4, dtype=torch.bool),
            ValueError,
            "memory_mask of shape",
        ),
        ((2, 3, 8), (2, 5, 8), torch.ones(2, 1, 5), TypeError, "memory_mask must have dtype bool"),
    ],
)
def test_sublayer_bad_inputs(x_shape, memory_shape, mask, error, match):
    sublayer = CrossAttentionSublayer(8, 2)
    with pytest.raises(error, match=match):
        sublayer(torch.randn(*x_shape), torch.randn(*memory_shape), mask)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"d_model": 0, "num_heads": 2}, ValueError, "d_model must be a positive int"),
        ({"d_model": 8, "num_heads": 3}, ValueError, "not divisible by num_heads=3"),
        ({"d_model": 8, "num_heads": 2, "norm_first": "yes"}, TypeError, "norm_first"),
    ],
)
def test_sublayer_bad_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        CrossAttentionSublayer(**kwargs)


def test_attention_pool_names_a_dtype_mismatch():
    from course_lib.cross_attention import attention_pool

    x, queries, w = torch.randn(2, 5, 8), torch.randn(3, 4), torch.randn(8, 4)
    with pytest.raises(TypeError, match="w_k has dtype float32 but x has float64"):
        attention_pool(x.double(), queries, w, w)
    with pytest.raises(TypeError, match="queries has dtype float64 but x has float32"):
        attention_pool(x, queries.double(), w, w)
    pooled, _ = attention_pool(x.double(), queries.double(), w.double(), w.double())
    assert pooled.shape == (2, 3, 4) and pooled.dtype == torch.float64
