"""course_lib.blocks: LayerNorm, feed-forward, layers, stacks, the nn.Transformer match."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.blocks import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderDecoder,
    EncoderLayer,
    FeedForward,
    LayerNorm,
    count_parameters,
    layer_norm,
    record_attention,
)
from course_lib.masking import causal_mask, dependency_matrix, to_torch_blocked

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
D_MODEL, HEADS, D_FF = 16, 4, 32


def _perturb(module: nn.Module, gen: torch.Generator) -> nn.Module:
    """Random weights everywhere (LayerNorm gammas and betas too), so norm placement matters."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return module


def _inputs(dtype, batch=3, n_src=7, n_tgt=5):
    gen = torch.Generator().manual_seed(1)
    src = torch.randn(batch, n_src, D_MODEL, generator=gen, dtype=dtype)
    tgt = torch.randn(batch, n_tgt, D_MODEL, generator=gen, dtype=dtype)
    lengths = torch.tensor([n_src, 4, 2])[:batch]
    src_pad = (torch.arange(n_src)[None, :] < lengths[:, None]).unsqueeze(1)  # (batch, 1, n_src)
    return src, tgt, src_pad, causal_mask(n_tgt)


# ---- layer_norm / LayerNorm ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(8,), (3, 8), (2, 5, 8), (2, 3, 4, 6)])
def test_layer_norm_matches_torch(dtype, shape):
    gen = torch.Generator().manual_seed(0)
    x = 3 * torch.randn(*shape, generator=gen, dtype=dtype) + 2
    gamma = torch.randn(shape[-1], generator=gen, dtype=dtype)
    beta = torch.randn(shape[-1], generator=gen, dtype=dtype)
    for eps in (1e-5, 0.1):
        ours = layer_norm(x, gamma, beta, eps)
        theirs = F.layer_norm(x, (shape[-1],), gamma, beta, eps)
        assert ours.dtype == dtype
        torch.testing.assert_close(ours, theirs, atol=TOL[dtype], rtol=0)


def test_layer_norm_per_token_statistics():
    x = torch.randn(4, 6, 10, dtype=torch.float64) * 5 + 3
    out = layer_norm(x, torch.ones(10, dtype=torch.float64), torch.zeros(10, dtype=torch.float64))
    torch.testing.assert_close(out.mean(-1), torch.zeros(4, 6, dtype=torch.float64))
    torch.testing.assert_close(
        out.var(-1, unbiased=False), torch.ones(4, 6, dtype=torch.float64), atol=1e-5, rtol=0
    )
    # A token's output does not depend on the other tokens.
    x2 = x.clone()
    x2[:, 1:] = 100.0
    out2 = layer_norm(x2, torch.ones(10, dtype=torch.float64), torch.zeros(10, dtype=torch.float64))
    assert torch.equal(out2[:, 0], out[:, 0])


def test_layernorm_module_matches_nn_and_has_grads():
    ours, theirs = LayerNorm(12), nn.LayerNorm(12)
    _perturb(theirs, torch.Generator().manual_seed(0))
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 3, 12, requires_grad=True)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=0)
    ours(x).pow(2).sum().backward()
    assert ours.weight.grad is not None and ours.bias.grad is not None
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_layernorm_module_is_the_from_scratch_layer_norm_values_and_gradients():
    # The module runs F.layer_norm for speed; it must compute what layer_norm spells out.
    module = LayerNorm(16, bias=True).double()
    _perturb(module, torch.Generator().manual_seed(1))
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    fused = module(x)
    by_hand = layer_norm(x2, module.weight, module.bias, module.eps)
    torch.testing.assert_close(fused, by_hand, atol=1e-12, rtol=0)
    upstream = torch.randn_like(fused)
    grads_fused = torch.autograd.grad(fused, [x, module.weight, module.bias], upstream)
    grads_hand = torch.autograd.grad(by_hand, [x2, module.weight, module.bias], upstream)
    for a, b in zip(grads_fused, grads_hand, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    no_bias = LayerNorm(16, bias=False).double()
    torch.testing.assert_close(no_bias(x), layer_norm(x, no_bias.weight, None), atol=1e-12, rtol=0)


def test_layernorm_module_bad_inputs():
    with pytest.raises(ValueError, match="x has 8 features .* d_model=16"):
        LayerNorm(16)(torch.randn(2, 8))
    with pytest.raises(TypeError, match="x must be a floating"):
        LayerNorm(4)(torch.ones(2, 4, dtype=torch.long))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(x=[1.0, 2.0]), TypeError, "x must be a torch.Tensor"),
        (dict(x=torch.ones(2, 4, dtype=torch.long)), TypeError, "x must be a floating"),
        (dict(gamma=torch.ones(3)), ValueError, "gamma has 3 entries"),
        (dict(beta=torch.ones(5)), ValueError, "beta has 5 entries"),
        (dict(gamma=torch.ones(2, 4)), ValueError, "gamma must have 1 dimensions"),
        (dict(eps=-1.0), ValueError, "eps must be"),
    ],
)
def test_layer_norm_bad_inputs(kwargs, error, match):
    args = dict(x=torch.randn(2, 4), gamma=torch.ones(4), beta=torch.zeros(4), eps=1e-5)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        layer_norm(args["x"], args["gamma"], args["beta"], args["eps"])


# ---- FeedForward -----------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_is_position_wise(activation):
    ff = FeedForward(D_MODEL, D_FF, activation=activation)
    x = torch.randn(2, 5, D_MODEL)
    whole = ff(x)
    one_by_one = torch.stack([ff(x[:, i]) for i in range(5)], dim=1)
    torch.testing.assert_close(whole, one_by_one, atol=1e-6, rtol=0)
    act = F.relu if activation == "relu" else F.gelu
    expected = F.linear(
        act(F.linear(x, ff.linear1.weight, ff.linear1.bias)), ff.linear2.weight, ff.linear2.bias
    )
    torch.testing.assert_close(whole, expected, atol=1e-6, rtol=0)
    perm = torch.randperm(5)
    torch.testing.assert_close(ff(x[:, perm]), whole[:, perm], atol=1e-6, rtol=0)


def test_feed_forward_bad_inputs():
    with pytest.raises(ValueError, match="d_ff must be a positive int"):
        FeedForward(8, 0)
    with pytest.raises(ValueError, match="activation must be 'relu' or 'gelu'"):
        FeedForward(8, 16, activation="tanh")
    with pytest.raises(ValueError, match="dropout must be"):
        FeedForward(8, 16, dropout=1.5)
    with pytest.raises(ValueError, match="x has 7 features but this feed-forward has d_model=8"):
        FeedForward(8, 16)(torch.randn(2, 7))


# ---- from_torch equalities -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_from_torch(dtype, norm_first, activation):
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(
        D_MODEL,
        HEADS,
        D_FF,
        dropout=0.1,
        batch_first=True,
        norm_first=norm_first,
        activation=activation,
        dtype=dtype,
    )
    _perturb(theirs, torch.Generator().manual_seed(2)).eval()
    ours = EncoderLayer.from_torch(theirs).eval()
    assert ours.norm_first == norm_first and count_parameters(ours) == count_parameters(theirs)
    src, _, src_pad, _ = _inputs(dtype)
    with torch.no_grad():
        want = theirs(src, src_key_padding_mask=to_torch_blocked(src_pad).squeeze(1))
        got = ours(src, src_pad)
        torch.testing.assert_close(got, want, atol=TOL[dtype], rtol=0)
        n = src.shape[1]  # a causal mask too (a decoder-only block)
        want = theirs(src, src_mask=to_torch_blocked(causal_mask(n)))
        torch.testing.assert_close(ours(src, causal_mask(n)), want, atol=TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_layer_from_torch(dtype, norm_first, activation):
    torch.manual_seed(0)
    theirs = nn.TransformerDecoderLayer(
        D_MODEL,
        HEADS,
        D_FF,
        batch_first=True,
        norm_first=norm_first,
        activation=activation,
        dtype=dtype,
    )
    _perturb(theirs, torch.Generator().manual_seed(3)).eval()
    ours = DecoderLayer.from_torch(theirs).eval()
    assert count_parameters(ours) == count_parameters(theirs)
    src, tgt, src_pad, causal = _inputs(dtype)
    with torch.no_grad():
        want = theirs(
            tgt,
            src,
            tgt_mask=to_torch_blocked(causal),
            memory_key_padding_mask=to_torch_blocked(src_pad).squeeze(1),
        )
        got = ours(tgt, src, causal, src_pad)
    torch.testing.assert_close(got, want, atol=TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_decoder_from_torch(dtype, norm_first):
    torch.manual_seed(0)
    theirs = nn.Transformer(
        D_MODEL, HEADS, 2, 3, D_FF, batch_first=True, norm_first=norm_first, dtype=dtype
    )
    _perturb(theirs, torch.Generator().manual_seed(4)).eval()
    ours = EncoderDecoder.from_torch(theirs).eval()
    assert count_parameters(ours) == count_parameters(theirs)
    assert len(ours.encoder.layers) == 2 and len(ours.decoder.layers) == 3
    src, tgt, src_pad, causal = _inputs(dtype)
    blocked_pad = to_torch_blocked(src_pad).squeeze(1)  # (batch, n_src), True = padding
    with torch.no_grad():
        want = theirs(
            src,
            tgt,
            tgt_mask=to_torch_blocked(causal),
            src_key_padding_mask=blocked_pad,
            memory_key_padding_mask=blocked_pad,
        )
        got = ours(src, tgt, src_mask=src_pad, tgt_mask=causal, memory_mask=src_pad)
        torch.testing.assert_close(got, want, atol=TOL[dtype], rtol=0)
        # encode + decode is the same computation as forward
        memory = ours.encode(src, src_pad)
        torch.testing.assert_close(
            ours.decode(tgt, memory, causal, src_pad), got, atol=TOL[dtype], rtol=0
        )
        # PyTorch's eval fast path returns zeros at padded source positions; the real ones match
        their_memory = theirs.encoder(src, src_key_padding_mask=blocked_pad)
        real = src_pad.squeeze(1)
        torch.testing.assert_close(memory[real], their_memory[real], atol=TOL[dtype], rtol=0)


def test_default_sizes_have_pytorch_parameter_count():
    ours = EncoderDecoder()
    theirs = nn.Transformer(batch_first=True)
    assert count_parameters(ours) == count_parameters(theirs) == 44_140_544
    d, d_ff = 512, 2048
    per_layer = 4 * (d * d + d) + 2 * d * d_ff + d_ff + d + 4 * d
    assert count_parameters(ours.encoder.layers[0]) == per_layer


def test_from_torch_rejects_batch_first_false_and_other_modules():
    with pytest.raises(ValueError, match="batch_first=False"):
        EncoderLayer.from_torch(nn.TransformerEncoderLayer(8, 2, 16))
    with pytest.raises(ValueError, match="batch_first=False"):
        DecoderLayer.from_torch(nn.TransformerDecoderLayer(8, 2, 16))
    with pytest.raises(ValueError, match="batch_first=False"):
        EncoderDecoder.from_torch(nn.Transformer(8, 2, 1, 1, 16))
    with pytest.raises(TypeError, match="module must be torch.nn.TransformerEncoderLayer"):
        EncoderLayer.from_torch(nn.TransformerDecoderLayer(8, 2, 16, batch_first=True))
    with pytest.raises(ValueError, match="only relu and gelu"):
        EncoderLayer.from_torch(
            nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, activation=torch.tanh)
        )


# ---- behaviour -------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_is_causal(norm_first):
    """Every target position reads itself and the positions before it, never a later one
    (lesson 05's dependency_matrix over all positions); without the mask, every position."""
    torch.manual_seed(0)
    model = EncoderDecoder(D_MODEL, HEADS, 2, 2, D_FF, dropout=0.0, norm_first=norm_first).eval()
    src, tgt, src_pad, causal = _inputs(torch.float64)
    model = model.double()
    reads = dependency_matrix(lambda t: model(src, t, src_pad, causal, src_pad), tgt)
    assert torch.equal(reads, causal_mask(tgt.shape[1]))
    leaks = dependency_matrix(lambda t: model(src, t, src_pad, None, src_pad), tgt)
    assert leaks.all()  # the test can fail: without the causal mask every position reads all


def test_source_padding_is_ignored():
    torch.manual_seed(0)
    model = EncoderDecoder(D_MODEL, HEADS, 1, 1, D_FF, dropout=0.0).eval()
    src, tgt, src_pad, causal = _inputs(torch.float32)
    out = model(src, tgt, src_pad, causal, src_pad)
    noisy = src.clone()
    noisy[~src_pad.squeeze(1)] = 50.0  # overwrite padded source positions
    torch.testing.assert_close(model(noisy, tgt, src_pad, causal, src_pad), out, atol=1e-5, rtol=0)


def test_record_attention_and_fused_path_agree():
    torch.manual_seed(0)
    model = EncoderDecoder(D_MODEL, HEADS, 1, 2, D_FF, dropout=0.0).eval()
    src, tgt, src_pad, causal = _inputs(torch.float32)
    fast = model(src, tgt, src_pad, causal, src_pad)
    assert model.decoder.layers[0].cross_attention is None
    record_attention(model)
    slow = model(src, tgt, src_pad, causal, src_pad)
    torch.testing.assert_close(slow, fast, atol=1e-5, rtol=0)
    cross = model.decoder.layers[-1].cross_attention
    assert cross.shape == (3, HEADS, tgt.shape[1], src.shape[1])
    torch.testing.assert_close(cross.sum(-1), torch.ones(3, HEADS, tgt.shape[1]))
    assert (cross[2, :, :, 2:] == 0).all()  # third sentence has 2 real tokens
    self_weights = model.decoder.layers[0].attention
    assert (self_weights.triu(1) == 0).all()
    assert model.encoder.layers[0].attention.shape == (3, HEADS, 7, 7)
    record_attention(model, False)
    model(src, tgt, src_pad, causal, src_pad)
    assert model.decoder.layers[-1].cross_attention is None


def test_gradients_flow_and_dropout_trains():
    torch.manual_seed(0)
    model = EncoderDecoder(D_MODEL, HEADS, 2, 2, D_FF, dropout=0.1, norm_first=True).train()
    src, tgt, src_pad, causal = _inputs(torch.float32)
    out = model(src, tgt, src_pad, causal, src_pad)
    out.pow(2).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert not torch.equal(out, model(src, tgt, src_pad, causal, src_pad))  # dropout is active


def test_stacks_accept_a_layer_or_a_factory():
    layer = EncoderLayer(D_MODEL, HEADS, D_FF)
    copies = Encoder(layer, 3)
    ff = layer.feed_forward
    assert all(torch.equal(m.feed_forward.linear1.weight, ff.linear1.weight) for m in copies.layers)
    assert copies.layers[0].feed_forward.linear1.weight is not layer.feed_forward.linear1.weight
    fresh = Decoder(lambda: DecoderLayer(D_MODEL, HEADS, D_FF), 2, LayerNorm(D_MODEL))
    first, second = (layer.feed_forward.linear1.weight for layer in fresh.layers)
    assert not torch.equal(first, second)
    x, mem = torch.randn(2, 4, D_MODEL), torch.randn(2, 6, D_MODEL)
    assert copies(x).shape == (2, 4, D_MODEL) and fresh(x, mem).shape == (2, 4, D_MODEL)
    with pytest.raises(ValueError, match="num_layers must be a positive int"):
        Encoder(layer, 0)
    with pytest.raises(TypeError, match="layer must be an EncoderLayer"):
        Encoder(3, 2)


def test_layer_bad_inputs():
    enc = EncoderLayer(D_MODEL, HEADS, D_FF)
    dec = DecoderLayer(D_MODEL, HEADS, D_FF)
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        enc(torch.randn(4, D_MODEL))
    with pytest.raises(ValueError, match="x has 8 features but this layer has d_model=16"):
        enc(torch.randn(2, 4, 8))
    with pytest.raises(TypeError, match="mask must have dtype bool"):
        enc(torch.randn(2, 4, D_MODEL), torch.ones(4, 4))
    with pytest.raises(ValueError, match="mask of shape"):
        enc(torch.randn(2, 4, D_MODEL), torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="memory has 8 features"):
        dec(torch.randn(2, 4, D_MODEL), torch.randn(2, 6, 8))
    with pytest.raises(ValueError, match="x has 8 features but this layer has d_model=16"):
        dec(torch.randn(2, 4, 8), torch.randn(2, 6, 8))  # both the wrong width, not just memory
    with pytest.raises(ValueError, match="x has batch=2 but memory has batch=3"):
        dec(torch.randn(2, 4, D_MODEL), torch.randn(3, 6, D_MODEL))
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        EncoderLayer(10, 3, 20)
    model = EncoderDecoder(D_MODEL, HEADS, 1, 1, D_FF)
    with pytest.raises(ValueError, match="src has batch=2 but tgt has batch=3"):
        model(torch.randn(2, 4, D_MODEL), torch.randn(3, 4, D_MODEL))
    with pytest.raises(ValueError, match="tgt has 8 features"):
        model.decode(torch.randn(2, 4, 8), torch.randn(2, 4, D_MODEL))
    with pytest.raises(ValueError, match="num_encoder_layers must be a positive int"):
        EncoderDecoder(D_MODEL, HEADS, 0)
