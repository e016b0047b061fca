"""course_lib.multihead: split/merge, MultiHeadAttention = nn.MultiheadAttention, input checks."""

import pytest
import torch
from torch import nn

from course_lib.masking import causal_mask, to_torch_blocked
from course_lib.multihead import MultiHeadAttention, merge_heads, split_heads
from course_lib.positional import apply_rope

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


# --------------------------------------------------------------------------------------------
# split_heads / merge_heads
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,num_heads", [((2, 5, 12), 3), ((1, 3, 8), 2), ((3, 4, 6), 6), ((2, 7, 4), 1)]
)
def test_split_heads_puts_each_feature_block_in_its_head(shape, num_heads):
    x = torch.randn(*shape)
    out = split_heads(x, num_heads)
    batch, seq, d_model = shape
    d_head = d_model // num_heads
    assert out.shape == (batch, num_heads, seq, d_head)
    for head in range(num_heads):
        torch.testing.assert_close(
            out[:, head], x[..., head * d_head : (head + 1) * d_head], rtol=0, atol=0
        )


def test_split_heads_differs_from_a_plain_reshape():
    x = torch.randn(2, 5, 8)
    assert not torch.equal(split_heads(x, 2), x.reshape(2, 2, 5, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_merge_inverts_split_and_keeps_dtype(dtype):
    x = torch.randn(2, 5, 12, dtype=dtype)
    heads = split_heads(x, 4)
    assert heads.dtype == dtype
    merged = merge_heads(heads)
    assert merged.dtype == dtype
    assert torch.equal(merged, x)


def test_merge_heads_concatenates_the_heads():
    x = torch.randn(2, 3, 5, 4)  # (batch, heads, seq, d_head)
    concat = torch.cat([x[:, h] for h in range(3)], dim=-1)
    assert torch.equal(merge_heads(x), concat)


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda: split_heads(torch.randn(2, 3, 10), 4), ValueError, r"d_model=10.*num_heads=4"),
        (lambda: split_heads(torch.randn(3, 10), 2), ValueError, r"x must have 3 dimensions"),
        (lambda: split_heads([[1.0]], 1), TypeError, r"x must be a torch.Tensor"),
        (lambda: split_heads(torch.randn(2, 3, 8), 0), ValueError, r"num_heads"),
        (lambda: split_heads(torch.randn(2, 3, 8), 2.0), ValueError, r"num_heads"),
        (lambda: merge_heads(torch.randn(2, 3, 8)), ValueError, r"x must have 4 dimensions"),
        (lambda: merge_heads("heads"), TypeError, r"x must be a torch.Tensor"),
    ],
)
def test_split_merge_bad_inputs(call, error, match):
    with pytest.raises(error, match=match):
        call()


# --------------------------------------------------------------------------------------------
# MultiHeadAttention against nn.MultiheadAttention
# --------------------------------------------------------------------------------------------


def _pair(d_model, num_heads, dtype=torch.float32, bias=True):
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(d_model, num_heads, batch_first=True, bias=bias)
    theirs = theirs.to(dtype).eval()
    return MultiHeadAttention.from_torch(theirs).eval(), theirs


def _mask_case(kind, batch, n_q, n_k, num_heads):
    """(our mask True = may attend, kwargs for nn.MultiheadAttention True = blocked)."""
    if kind == "none":
        return None, {}
    if kind == "causal":
        mask = causal_mask(n_q)
        return mask, {"attn_mask": to_torch_blocked(mask)}
    if kind == "padding":
        lengths = torch.randint(1, n_k + 1, (batch,))
        real = torch.arange(n_k) < lengths[:, None]  # (batch, n_k)
        return real.unsqueeze(1), {"key_padding_mask": to_torch_blocked(real)}
    allowed = torch.rand(batch, n_q, n_k) > 0.5
    allowed[..., 0] = True
    if kind == "per_example":
        blocked = to_torch_blocked(allowed).repeat_interleave(num_heads, dim=0)
        return allowed, {"attn_mask": blocked}
    per_head = torch.rand(batch, num_heads, n_q, n_k) > 0.5  # kind == "per_head"
    per_head[..., 0] = True
    blocked = to_torch_blocked(per_head).reshape(batch * num_heads, n_q, n_k)
    return per_head, {"attn_mask": blocked}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "n_q,n_k,mask_kind",
    [
        (5, 5, "none"),
        (3, 7, "none"),
        (5, 5, "causal"),
        (3, 7, "padding"),
        (4, 6, "per_example"),
        (4, 6, "per_head"),
    ],
)
def test_matches_torch_multihead_attention(dtype, n_q, n_k, mask_kind):
    batch, d_model, num_heads = 3, 16, 4
    ours, theirs = _pair(d_model, num_heads, dtype)
    query = torch.randn(batch, n_q, d_model, dtype=dtype)
    memory = query if n_q == n_k else torch.randn(batch, n_k, d_model, dtype=dtype)
    mask, torch_kwargs = _mask_case(mask_kind, batch, n_q, n_k, num_heads)
    out, weights = ours(query, memory, memory, mask=mask)
    want_out, want_weights = theirs(
        query, memory, memory, average_attn_weights=False, **torch_kwargs
    )
    assert out.dtype == dtype and weights.shape == (batch, num_heads, n_q, n_k)
    torch.testing.assert_close(out, want_out, rtol=0, atol=TOL[dtype])
    torch.testing.assert_close(weights, want_weights, rtol=0, atol=TOL[dtype])
    fused, no_weights = ours(query, memory, memory, mask=mask, need_weights=False)
    assert no_weights is None
    torch.testing.assert_close(fused, want_out, rtol=0, atol=TOL[dtype])


def test_from_torch_without_bias():
    ours, theirs = _pair(8, 2, bias=False)
    assert ours.q_proj.bias is None
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(ours(x, x, x)[0], theirs(x, x, x)[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("num_heads", [1, 2, 8, 16])
def test_parameter_count_is_that_of_one_wide_head(num_heads):
    d_model = 64
    ours = sum(p.numel() for p in MultiHeadAttention(d_model, num_heads).parameters())
    theirs = sum(p.numel() for p in nn.MultiheadAttention(d_model, num_heads).parameters())
    assert ours == theirs == 4 * (d_model**2 + d_model)


def test_fully_masked_row_gives_zeros_not_nan():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    mask = torch.ones(1, 3, 3, dtype=torch.bool)
    mask[0, 1] = False  # query 1 may attend to nothing
    out, weights = mha(x, x, x, mask=mask)
    assert not torch.isnan(out).any()
    assert torch.equal(weights[0, :, 1], torch.zeros(2, 3))
    torch.testing.assert_close(out[0, 1], mha.out_proj.bias, rtol=0, atol=1e-6)


def test_gradients_reach_every_parameter_and_input():
    mha = MultiHeadAttention(8, 2)
    query = torch.randn(2, 3, 8, requires_grad=True)
    memory = torch.randn(2, 5, 8, requires_grad=True)
    out, _ = mha(query, memory, memory)
    out.square().sum().backward()
    for name, param in mha.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert query.grad.abs().sum() > 0 and memory.grad.abs().sum() > 0


def test_dropout_is_off_in_eval_mode():
    mha = MultiHeadAttention(8, 2, dropout=0.5).eval()
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(mha(x, x, x)[0], mha(x, x, x)[0], rtol=0, atol=0)


# --------------------------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"d_model": 10, "num_heads": 4}, r"d_model=10 is not divisible by num_heads=4"),
        ({"d_model": 8, "num_heads": 0}, r"num_heads must be a positive int"),
        ({"d_model": -8, "num_heads": 2}, r"d_model must be a positive int"),
        ({"d_model": 8, "num_heads": 2, "dropout": 1.0}, r"dropout must be in \[0, 1\)"),
    ],
)
def test_constructor_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(**kwargs)


def _forward(
    query_shape=(2, 3, 8),
    key_shape=(2, 5, 8),
    value_shape=(2, 5, 8),
    mask=None,
    dtype=torch.float32,
):
    mha = MultiHeadAttention(8, 2)
    q = torch.randn(*query_shape).to(dtype)
    k = torch.randn(*key_shape).to(dtype)
    v = torch.randn(*value_shape).to(dtype)
    return mha(q, k, v, mask=mask)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"query_shape": (2, 3, 6)}, ValueError, r"query has 6 features.*d_model=8"),
        ({"query_shape": (3, 8)}, ValueError, r"query must have 3 dimensions"),
        ({"key_shape": (2, 4, 8)}, ValueError, r"key \(2, 4, 8\) and value \(2, 5, 8\)"),
        ({"value_shape": (2, 5, 4)}, ValueError, r"value has 4 features"),
        ({"query_shape": (1, 3, 8)}, ValueError, r"query has batch=1 but key has batch=2"),
        ({"dtype": torch.int64}, TypeError, r"query must be a floating-point tensor"),
        ({"mask": torch.ones(2, 3, 5)}, TypeError, r"mask must have dtype bool"),
        ({"mask": torch.ones(2, 4, 5, dtype=torch.bool)}, ValueError, r"mask of shape \(2, 4, 5\)"),
        (
            {"mask": torch.ones(2, 3, 3, 5, dtype=torch.bool)},
            ValueError,
            r"mask of shape \(2, 3, 3, 5\).*\(batch, num_heads, n_q, n_k\)",
        ),
    ],
)
def test_forward_bad_inputs(kwargs, error, match):
    with pytest.raises(error, match=match):
        _forward(**kwargs)


@pytest.mark.parametrize(
    "module,error,match",
    [
        (nn.Linear(4, 4), TypeError, r"module must be nn.MultiheadAttention, got Linear"),
        (nn.MultiheadAttention(8, 2, kdim=4, vdim=4), ValueError, r"kdim = vdim = embed_dim"),
        (nn.MultiheadAttention(8, 2, add_bias_kv=True), ValueError, r"add_bias_kv"),
    ],
)
def test_from_torch_rejects_what_it_cannot_mirror(module, error, match):
    with pytest.raises(error, match=match):
        MultiHeadAttention.from_torch(module)


def test_rope_attention_rotates_queries_and_keys_by_position():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, bias=False, rope=True)
    x = torch.randn(3, 5, 8)
    out, weights = mha(x, x, x, is_causal=True)
    q = apply_rope(split_heads(mha.q_proj(x), 2))  # (3, 2, 5, 4), rotated by positions 0..4
    k = apply_rope(split_heads(mha.k_proj(x), 2))
    v = split_heads(mha.v_proj(x), 2)
    scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~torch.ones(5, 5).tril().bool(), -1e9)
    expected = mha.out_proj(merge_heads(scores.softmax(-1) @ v))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, scores.softmax(-1), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="even"):
        MultiHeadAttention(6, 2, rope=True)  # d_head 3 has no pairs to rotate


def test_relu_squared_feed_forward():
    from course_lib.blocks import FeedForward

    ff = FeedForward(4, 8, activation="relu2")
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(ff(x), ff.linear2(torch.relu(ff.linear1(x)) ** 2))
