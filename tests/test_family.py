"""course_lib.family: BERT's masking, image patches, the encoder-only and ViT models."""

from __future__ import annotations

import pytest
import torch

from course_lib.blocks import Encoder, EncoderLayer
from course_lib.family import IGNORE_INDEX, MaskedLM, VisionTransformer, mlm_mask, patchify
from course_lib.positional import LearnedPositionalEmbedding


def test_mlm_proportions_over_many_draws():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 50, (200, 500), generator=gen)
    ids[:, 400:] = 0  # padding
    inputs, labels = mlm_mask(ids, mask_id=99, vocab_size=50, pad_id=0, generator=gen)
    real = ids != 0
    chosen = labels != IGNORE_INDEX
    assert not chosen[~real].any() and torch.equal(inputs[~real], ids[~real])
    assert chosen.sum() / real.sum() == pytest.approx(0.15, abs=0.003)
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])
    picked = inputs[chosen]
    masked = (picked == 99).float().mean()
    kept = (picked == ids[chosen]).float().mean()
    assert masked == pytest.approx(0.8, abs=0.01)
    # 10 % unchanged, plus the random draws that happen to hit the original token (1 in 50)
    assert kept == pytest.approx(0.1 + 0.1 / 50, abs=0.01)
    assert 1 - masked - kept == pytest.approx(0.1 * 49 / 50, abs=0.01)
    assert inputs.max() == 99 and picked[picked != 99].max() < 50


def test_mlm_is_repeatable_with_a_generator_and_respects_mask_prob():
    ids = torch.randint(0, 10, (64, 64), generator=torch.Generator().manual_seed(1))
    a = mlm_mask(ids, 10, 10, generator=torch.Generator().manual_seed(5))
    b = mlm_mask(ids, 10, 10, generator=torch.Generator().manual_seed(5))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    _, labels = mlm_mask(ids, 10, 10, mask_prob=1.0)
    assert (labels != IGNORE_INDEX).all()


def test_patchify_matches_a_loop_in_row_major_order():
    images = torch.randn(2, 3, 8, 12)
    patches = patchify(images, 4)
    assert patches.shape == (2, 6, 48)
    index = 0
    for row in range(2):
        for col in range(3):
            expected = images[:, :, row * 4 : (row + 1) * 4, col * 4 : (col + 1) * 4].reshape(2, -1)
            assert torch.equal(patches[:, index], expected)
            index += 1
    unfolded = torch.nn.functional.unfold(images, 4, stride=4).transpose(1, 2)
    assert torch.equal(patches, unfolded)


def test_models_shapes():
    model = MaskedLM(vocab_size=30, max_len=16, d_model=32, num_heads=2, num_layers=1)
    assert model(torch.randint(0, 30, (3, 16))).shape == (3, 16, 30)
    vit = VisionTransformer(
        image_size=8, patch_size=4, num_classes=5, channels=1, d_model=16, num_heads=2, num_layers=1
    )
    assert vit(torch.randn(2, 1, 8, 8)).shape == (2, 5)


def test_the_family_is_built_from_the_lessons_pieces():
    """BERT and ViT contain lesson 04's learned positions and lesson 07's encoder, no copies."""
    bert = MaskedLM(vocab_size=30, max_len=16, d_model=32, num_heads=2, num_layers=2)
    vit = VisionTransformer(8, 4, 5, channels=1, d_model=16, num_heads=2, num_layers=1)
    for model, positions in ((bert, 16), (vit, 1 + 4)):
        assert isinstance(model.position_embedding, LearnedPositionalEmbedding)
        assert model.position_embedding.max_len == positions
        assert isinstance(model.encoder, Encoder)
        assert all(isinstance(layer, EncoderLayer) for layer in model.encoder.layers)
    # tokens start at the positions' scale (BERT's N(0, 0.02²)), so order is not drowned out
    token_std = bert.token_embedding.weight.std().item()
    assert token_std == pytest.approx(
        bert.position_embedding.embedding.weight.std().item(), rel=0.2
    )
    # the table is added: zeroing it changes the output, and without it order is invisible
    ids = torch.randint(0, 30, (1, 16), generator=torch.Generator().manual_seed(0))
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = bert(ids)
        bert.position_embedding.embedding.weight.zero_()
        after = bert(ids)
        assert not torch.allclose(before, after)
        torch.testing.assert_close(bert(ids[:, perm]), after[:, perm])  # now only equivariant


def test_bert_sees_both_sides_and_gpt_style_would_not():
    torch.manual_seed(0)
    model = MaskedLM(vocab_size=10, max_len=8, d_model=16, num_heads=2, num_layers=1).eval()
    ids = torch.randint(0, 10, (1, 8))
    changed = ids.clone()
    changed[0, 7] = (ids[0, 7] + 1) % 10
    assert not torch.allclose(model(ids)[0, 0], model(changed)[0, 0])  # the future matters


@pytest.mark.parametrize(
    "call,words",
    [
        (lambda: mlm_mask(torch.zeros(3, 4), 1, 5), "dtype"),
        (lambda: mlm_mask(torch.zeros(3, 4, dtype=torch.long), 1, 5, mask_prob=0.0), "mask_prob"),
        (lambda: mlm_mask(torch.zeros(3, 4, dtype=torch.long), 1, 0), "vocab_size"),
        (lambda: patchify(torch.randn(2, 3, 8), 4), "images"),
        (lambda: patchify(torch.randn(2, 3, 8, 10), 4), "multiples"),
        (lambda: patchify(torch.randn(2, 3, 8, 8), 0), "patch_size"),
        (lambda: VisionTransformer(10, 4, 2), "multiple"),
        (lambda: VisionTransformer(8, 4, 2, channels=1)(torch.randn(2, 3, 8, 8)), "images"),
        (lambda: MaskedLM(10, 8, d_model=16, num_heads=2)(torch.tensor([[1, 10]])), "vocab_size"),
        (  # numpy images are float64: "mat1 and mat2 must have the same dtype" before
            lambda: VisionTransformer(8, 4, 2)(torch.rand(2, 3, 8, 8, dtype=torch.float64)),
            "images has dtype float64 but the weights of this ViT are float32",
        ),
    ],
)
def test_input_checks(call, words):
    with pytest.raises((ValueError, TypeError), match=words):
        call()


def test_span_corrupt_drops_15_percent_in_spans_and_targets_restore_them():
    from course_lib.family import span_corrupt

    tokens = list(range(100))
    sentinels = [-1, -2, -3, -4, -5, -6, -7]
    inputs, targets = span_corrupt(tokens, sentinels, generator=torch.Generator().manual_seed(0))
    # 15 dropped tokens in round(15 / 3) = 5 spans: 5 sentinels in the input, 6 in the target
    assert [t for t in inputs if t < 0] == sentinels[:5]
    assert [t for t in targets if t < 0] == sentinels[:6] and targets[-1] == -6
    assert len([t for t in targets if t >= 0]) == 15 and len([t for t in inputs if t >= 0]) == 85
    # putting each span back at its sentinel gives the sequence again
    spans, current = {}, None
    for t in targets:
        if t < 0:
            current = t
            spans[current] = []
        else:
            spans[current].append(t)
    restored = [x for t in inputs for x in (spans[t] if t < 0 else [t])]
    assert restored == tokens
    assert all(spans[s] for s in sentinels[:5])  # every span holds at least one token


def test_span_corrupt_mean_span_length_and_seeds():
    from course_lib.family import span_corrupt

    lengths = []
    for seed in range(200):
        _, targets = span_corrupt(
            list(range(60)), list(range(-1, -20, -1)), generator=torch.Generator().manual_seed(seed)
        )
        run = 0
        for t in targets:
            if t < 0:
                lengths.append(run) if run else None
                run = 0
            else:
                run += 1
    assert sum(lengths) / len(lengths) == pytest.approx(3.0)  # 9 tokens in 3 spans, exactly
    assert len(set(lengths)) > 3  # but the spans' lengths vary
    a = span_corrupt(
        list(range(60)), list(range(-1, -9, -1)), generator=torch.Generator().manual_seed(1)
    )
    b = span_corrupt(
        list(range(60)), list(range(-1, -9, -1)), generator=torch.Generator().manual_seed(1)
    )
    assert a == b
    with pytest.raises(ValueError, match="sentinels"):
        span_corrupt(list(range(100)), [-1, -2])
    with pytest.raises(ValueError, match="noise_density"):
        span_corrupt(list(range(10)), [-1, -2], noise_density=1.5)
