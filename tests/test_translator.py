"""course_lib.translator.Seq2SeqTransformer: ids in, logits out, masks where they belong."""

import math

import pytest
import torch

from course_lib.blocks import record_attention
from course_lib.positional import sinusoidal_positional_encoding
from course_lib.train import label_smoothing_loss, shift_right
from course_lib.translator import Seq2SeqTransformer


def small_model(**kwargs):
    torch.manual_seed(0)
    options = dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, d_ff=32)
    return Seq2SeqTransformer(12, **{**options, **kwargs}).eval()


def test_shapes_and_parameter_count():
    model = small_model()
    src = torch.randint(3, 12, (3, 7))
    tgt_in = torch.randint(3, 12, (3, 5))
    assert model(src, tgt_in).shape == (3, 5, 12)
    src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)
    assert memory.shape == (3, 7, 16) and src_mask.shape == (3, 1, 7)
    assert torch.equal(model.encode(src), memory)  # the mask defaults to source_mask(src)
    assert model.num_parameters() == sum(p.numel() for p in model.parameters())


def test_embeddings_are_scaled_and_positions_added():
    model = small_model()
    ids = torch.tensor([[4, 5, 6]])
    expected = model.embedding(ids) * math.sqrt(16) + sinusoidal_positional_encoding(3, 16).float()
    assert torch.allclose(model.embed(ids), expected, atol=1e-6)
    scaled_std = (model.embedding.weight * 4).std().item()
    assert 0.7 < scaled_std < 1.3  # about the size of the positions


def test_decoder_is_causal():
    model = small_model()
    src = torch.randint(3, 12, (2, 6))
    tgt_in = torch.randint(3, 12, (2, 5))
    changed = tgt_in.clone()
    changed[:, 3:] = 7
    a, b = model(src, tgt_in), model(src, changed)
    assert torch.allclose(a[:, :3], b[:, :3], atol=1e-6)
    assert not torch.allclose(a[:, 3:], b[:, 3:], atol=1e-4)


def test_source_padding_changes_nothing():
    model = small_model()
    src = torch.randint(3, 12, (1, 5))
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    tgt_in = torch.randint(3, 12, (1, 4))
    assert torch.allclose(model(src, tgt_in), model(padded, tgt_in), atol=1e-5)
    record_attention(model)
    model(padded, tgt_in)
    cross = model.core.decoder.layers[0].cross_attention  # (1, heads, 4, 8)
    assert cross.shape == (1, 2, 4, 8)
    assert cross[..., 5:].abs().max() == 0  # nobody attends to the pads


def test_gradients_reach_every_parameter():
    model = small_model().train()
    src = torch.randint(3, 12, (4, 6))
    tgt = torch.randint(3, 12, (4, 5))
    loss = label_smoothing_loss(model(src, shift_right(tgt, 1)), tgt, 0.1, 0)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_a_tiny_model_learns_to_copy():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(
        8, d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=64
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        src = torch.randint(3, 8, (32, 4))
        tgt = torch.cat([src, torch.full((32, 1), 2)], dim=1)
        loss = label_smoothing_loss(model(src, shift_right(tgt, 1)), tgt, 0.0, 0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


def test_bad_input_is_rejected():
    model = small_model()
    with pytest.raises(ValueError, match="src"):
        model(torch.randint(0, 12, (2, 3, 4)), torch.randint(0, 12, (2, 3)))
    with pytest.raises(TypeError, match="tgt_in"):
        model(torch.randint(0, 12, (2, 3)), torch.rand(2, 3))
    with pytest.raises(ValueError, match="outside"):
        model(torch.randint(0, 12, (2, 3)), torch.full((2, 3), 12))
    with pytest.raises(ValueError, match="batch"):
        model(torch.randint(0, 12, (2, 3)), torch.randint(0, 12, (3, 3)))
    with pytest.raises(ValueError, match="pad_id"):
        Seq2SeqTransformer(10, pad_id=10)
    with pytest.raises(ValueError, match="vocab_size"):
        Seq2SeqTransformer(0)


def test_encode_and_decode_check_memory_masks_and_length_at_their_door():
    # Seq2SeqTransformer.encode/decode are the door: the EncoderDecoder, its layers and the
    # positions inside skip their checks, so these once failed deep inside torch ("mat1 and
    # mat2 shapes cannot be multiplied", "bitwise_or_cpu not implemented for 'Float'", "The
    # size of tensor a (11) must match the size of tensor b (10)")
    model = small_model(max_len=10)
    src, tgt_in = torch.randint(1, 12, (2, 6)), torch.randint(1, 12, (2, 5))
    memory = model.encode(src)
    with pytest.raises(ValueError, match=r"memory has 8 features but this model has d_model=16"):
        model.decode(tgt_in, torch.randn(2, 6, 8))
    with pytest.raises(ValueError, match=r"memory must have 3 dimensions"):
        model.decode(tgt_in, memory[0])
    with pytest.raises(ValueError, match=r"tgt_in has batch=2 but memory has batch=3"):
        model.decode(tgt_in, torch.randn(3, 6, 16))
    with pytest.raises(TypeError, match=r"src_mask must have dtype bool"):
        model.decode(tgt_in, memory, torch.ones(2, 1, 6))
    with pytest.raises(ValueError, match=r"src_mask of shape \(2, 1, 5\) does not broadcast"):
        model.encode(src, torch.ones(2, 1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"src has 11 tokens but this model's max_len=10"):
        model(torch.randint(1, 12, (2, 11)), tgt_in)
    with pytest.raises(ValueError, match=r"tgt_in has 11 tokens but this model's max_len=10"):
        model.decode(torch.randint(1, 12, (2, 11)), memory)
    # the right inputs still pass: a padding mask, batch 1, a mask that broadcasts
    mask = model.source_mask(src)
    assert model.decode(tgt_in, model.encode(src, mask), mask).shape == (2, 5, 12)
    assert model.decode(tgt_in[:1], memory[:1], mask[:1]).shape == (1, 5, 12)
    assert model(src[:, :10], tgt_in).shape == (2, 5, 12)
