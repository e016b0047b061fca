"""course_lib.masking: masks agree with PyTorch's (in both of its conventions), bad inputs get
clear errors, and a causal MultiHeadAttention never looks at the future."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.attention import scaled_dot_product_attention
from course_lib.masking import (
    causal_mask,
    combine_masks,
    from_torch_blocked,
    padding_mask,
    to_additive,
    to_torch_blocked,
)
from course_lib.multihead import MultiHeadAttention

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def test_causal_mask_values():
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(3), expected)
    assert causal_mask(1).dtype == torch.bool and causal_mask(1).item() is True


def test_causal_mask_is_the_opposite_of_torchs_float_mask():
    torch_mask = nn.Transformer.generate_square_subsequent_mask(6)  # 0 / -inf
    assert torch.equal(from_torch_blocked(torch_mask), causal_mask(6))
    assert torch.equal(to_additive(causal_mask(6)), torch_mask)


@pytest.mark.parametrize("bad", [0, -2, 2.0, True, "4"])
def test_causal_mask_rejects_bad_n(bad):
    with pytest.raises(ValueError, match="n must be a positive int"):
        causal_mask(bad)


def test_padding_mask_shape_and_values():
    ids = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0]])
    mask = padding_mask(ids, pad_id=0)
    assert mask.shape == (2, 1, 4) and mask.dtype == torch.bool
    assert mask[:, 0].tolist() == [[True, True, True, False], [True, False, False, False]]
    assert torch.equal(padding_mask(ids.int(), pad_id=8)[:, 0], ids != 8)


@pytest.mark.parametrize(
    "ids,pad_id,error,words",
    [
        (torch.tensor([1, 2, 0]), 0, ValueError, "ids must have 2 dimensions"),
        (torch.tensor([[1.0, 0.0]]), 0, TypeError, "ids must have dtype int64 or int32"),
        ([[1, 0]], 0, TypeError, "ids must be a torch.Tensor"),
        (torch.tensor([[1, 0]]), 0.0, TypeError, "pad_id must be an int"),
    ],
)
def test_padding_mask_rejects_bad_inputs(ids, pad_id, error, words):
    with pytest.raises(error, match=words):
        padding_mask(ids, pad_id)


def test_combine_masks_broadcasts_padding_and_causal():
    ids = torch.tensor([[3, 4, 5], [6, 7, 0]])
    combined = combine_masks(padding_mask(ids, 0), causal_mask(3))  # (2, 1, 3) & (3, 3)
    assert combined.shape == (2, 3, 3)
    assert torch.equal(combined[0], causal_mask(3))
    assert combined[1].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert combine_masks(None, None) is None
    assert torch.equal(combine_masks(None, causal_mask(2)), causal_mask(2))


def test_combine_masks_rejects_bad_masks():
    with pytest.raises(TypeError, match=r"masks\[1\] must have dtype bool"):
        combine_masks(causal_mask(3), torch.ones(3, 3))
    with pytest.raises(ValueError, match="do not broadcast"):
        combine_masks(causal_mask(3), causal_mask(4))


def test_conversions_round_trip_and_reject_bad_input():
    mask = combine_masks(padding_mask(torch.tensor([[1, 2, 0]]), 0), causal_mask(3))
    assert torch.equal(from_torch_blocked(to_torch_blocked(mask)), mask)
    assert to_torch_blocked(None) is None and from_torch_blocked(None) is None
    assert to_additive(None) is None
    with pytest.raises(TypeError, match="mask must have dtype bool"):
        to_torch_blocked(torch.ones(2, 2))
    with pytest.raises(ValueError, match="additive biases"):
        from_torch_blocked(torch.tensor([[0.0, -1.0]]))
    with pytest.raises(TypeError, match="mask must be bool or float"):
        from_torch_blocked(torch.tensor([[0, 1]]))
    with pytest.raises(TypeError, match="dtype must be a floating-point dtype"):
        to_additive(mask, dtype=torch.int64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_pytorch_convention_gives_our_result(dtype):
    """One row per convention of the lesson's table, each checked against our attention."""
    gen = torch.Generator().manual_seed(0)
    batch, seq, d_model = 2, 5, 8
    x = torch.randn(batch, seq, d_model, generator=gen, dtype=dtype)
    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 0, 0]])
    pad, causal = padding_mask(ids, 0), causal_mask(seq)
    ours_mask = combine_masks(pad, causal)  # (batch, seq, seq)
    ours, _ = scaled_dot_product_attention(x, x, x, ours_mask)
    tol = TOL[dtype]

    # F.scaled_dot_product_attention: bool True = may attend (ours, unchanged)
    sdpa = F.scaled_dot_product_attention(x, x, x, attn_mask=ours_mask)
    assert torch.allclose(sdpa, ours, atol=tol)
    # ... and a float mask is added to the scores
    sdpa_float = F.scaled_dot_product_attention(x, x, x, attn_mask=to_additive(ours_mask, dtype))
    assert torch.allclose(sdpa_float, ours, atol=tol)

    # nn.MultiheadAttention: attn_mask and key_padding_mask are True = blocked
    mha = nn.MultiheadAttention(d_model, 2, batch_first=True, dtype=dtype).eval()
    mine = MultiHeadAttention.from_torch(mha).eval()
    theirs, _ = mha(
        x, x, x, attn_mask=to_torch_blocked(causal), key_padding_mask=to_torch_blocked(pad[:, 0])
    )
    expected, _ = mine(x, x, x, mask=ours_mask)
    assert torch.allclose(theirs, expected, atol=tol)
    # ... and the float causal mask of nn.Transformer
    theirs_float, _ = mha(
        x,
        x,
        x,
        attn_mask=nn.Transformer.generate_square_subsequent_mask(seq, dtype=dtype),
        key_padding_mask=to_additive(pad[:, 0], dtype),
    )
    assert torch.allclose(theirs_float, expected, atol=tol)


def test_fully_masked_rows_are_zero_and_gradients_finite():
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 4, generator=gen, requires_grad=True)
    k = torch.randn(2, 3, 4, generator=gen, requires_grad=True)
    v = torch.randn(2, 3, 4, generator=gen, requires_grad=True)
    mask = padding_mask(torch.tensor([[1, 2, 0], [0, 0, 0]]), 0)  # second sequence: all padding
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(out[1], torch.zeros(3, 4)) and torch.equal(weights[1], torch.zeros(3, 3))
    assert torch.allclose(weights[0].sum(-1), torch.ones(3))
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    # the plain recipe, for contrast: NaN
    scores = (q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf"))
    assert torch.softmax(scores, -1)[1].isnan().all()


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_causal_multihead_attention_ignores_the_future(need_weights, dtype):
    """Changing token t changes no output before t, and does change the output at t and after."""
    torch.manual_seed(0)
    seq, d_model, changed = 7, 16, 4
    attention = MultiHeadAttention(d_model, num_heads=4).to(dtype).eval()
    x = torch.randn(2, seq, d_model, dtype=dtype)
    x_changed = x.clone()
    x_changed[:, changed] = torch.randn(2, d_model, dtype=dtype)
    mask = causal_mask(seq)
    with torch.no_grad():
        before, _ = attention(x, x, x, mask=mask, need_weights=need_weights)
        after, _ = attention(x_changed, x_changed, x_changed, mask=mask, need_weights=need_weights)
    assert torch.allclose(before[:, :changed], after[:, :changed], atol=TOL[dtype], rtol=0)
    later_change = (before[:, changed:] - after[:, changed:]).abs().amax(-1)  # (batch, seq-t)
    assert (later_change > 1e-3).all()

    # Without the mask the earlier outputs DO change, so the test above can fail.
    with torch.no_grad():
        free_before, _ = attention(x, x, x)
        free_after, _ = attention(x_changed, x_changed, x_changed)
    assert not torch.allclose(free_before[:, :changed], free_after[:, :changed], atol=1e-3)


def test_masked_attention_gradient_reaches_only_allowed_keys():
    seq = 5
    q = torch.randn(1, seq, 4)
    k = torch.randn(1, seq, 4)
    v = torch.randn(1, seq, 4, requires_grad=True)
    out, _ = scaled_dot_product_attention(q, k, v, causal_mask(seq))
    out[0, 1].sum().backward()  # query 1 may see keys 0 and 1 only
    touched = v.grad[0].abs().sum(-1) > 0
    assert touched.tolist() == [True, True, False, False, False]


def test_dependency_matrix_reads_an_output_of_one_number_per_position():
    # before: f returning (batch, seq), e.g. a per-position score, raised "IndexError:
    # Dimension out of range (expected to be in range of [-2, 1], but got 2)"
    from course_lib.masking import dependency_matrix

    x = torch.randn(2, 4, 3)
    prefix_sums = dependency_matrix(lambda t: t.sum(-1).cumsum(-1), x)  # (batch, seq)
    assert torch.equal(prefix_sums, torch.ones(4, 4, dtype=torch.bool).tril())
    assert torch.equal(dependency_matrix(lambda t: t.cumsum(1), x), prefix_sums)
