"""The Transformer family (lesson 10): the same blocks, three shapes, and images as tokens.

    encoder-only  (BERT)  every token sees every token; trained to fill in masked tokens
                          (`mlm_mask` corrupts the input, `MaskedLM` predicts the originals)
    decoder-only  (GPT)   causal self-attention, next-token prediction: `course_lib.gpt.GPT`
    encoder-decoder (T5)  text in, text out: `course_lib.translator.Seq2SeqTransformer`;
                          pre-trained to restore dropped spans (`span_corrupt`: 15 % of the
                          tokens, spans of mean length 3, each replaced by a sentinel), then
                          trained on tasks named by a prefix in the input
    ViT                   an image cut into patches (`patchify`), each patch a token, an
                          encoder and a classifier on an extra [CLS] token: `VisionTransformer`

`MaskedLM` and `VisionTransformer` are lesson 07's `Encoder` of pre-norm `EncoderLayer`s with an
embedding and lesson 04's `LearnedPositionalEmbedding` in front and a linear layer behind,
nothing more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch
from torch import Tensor, nn

from .blocks import Encoder, EncoderLayer, LayerNorm
from .positional import LearnedPositionalEmbedding
from .validation import (
    at_the_door,
    check_attention_mask,
    check_features,
    check_ids,
    check_positive_int,
    check_tensor,
    door,
    is_number,
)

__all__ = [
    "IGNORE_INDEX",
    "mlm_mask",
    "span_corrupt",
    "patchify",
    "MaskedLM",
    "VisionTransformer",
]

T = TypeVar("T")

IGNORE_INDEX = -100  # the label of a position the loss skips (F.cross_entropy's default)


def mlm_mask(
    ids: Tensor,
    mask_id: int,
    vocab_size: int,
    mask_prob: float = 0.15,
    pad_id: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """BERT's corruption for masked-language modelling: ids (...) -> (inputs, labels), same shape.

    Each non-padding position is chosen with probability `mask_prob` (15 %). Of the chosen
    positions, 80 % become `mask_id`, 10 % a random id drawn uniformly from [0, vocab_size),
    and 10 % keep their token. `labels` holds the original id at the chosen positions and
    IGNORE_INDEX (-100) everywhere else, so the loss is taken on the chosen positions only.
    Padding (== pad_id) is never chosen. Draws come from `generator`, for repeatable masks.
    """
    check_tensor(
        ids, "ids", min_ndim=1, shape_hint="(...) of token ids", dtype=(torch.int64, torch.int32)
    )
    check_positive_int(vocab_size, "vocab_size")
    if not is_number(mask_prob) or not 0.0 < mask_prob <= 1.0:
        raise ValueError(f"mask_prob must be a probability in (0, 1], got {mask_prob!r}")
    chosen = torch.rand(ids.shape, generator=generator, device=ids.device) < mask_prob
    if pad_id is not None:
        chosen &= ids != pad_id
    labels = ids.masked_fill(~chosen, IGNORE_INDEX)
    action = torch.rand(ids.shape, generator=generator, device=ids.device)
    random_ids = torch.randint(
        0, vocab_size, ids.shape, generator=generator, device=ids.device, dtype=ids.dtype
    )
    inputs = ids.masked_fill(chosen & (action < 0.8), mask_id)  # 80 %: <mask>
    to_random = chosen & (action >= 0.8) & (action < 0.9)  # 10 %: a random token
    inputs = torch.where(to_random, random_ids, inputs)  # the last 10 %: unchanged
    return inputs, labels


def span_corrupt(
    tokens: Sequence[T],
    sentinels: Sequence[T],
    noise_density: float = 0.15,
    mean_span_length: float = 3.0,
    generator: torch.Generator | None = None,
) -> tuple[list[T], list[T]]:
    """T5's span corruption of one sequence: tokens -> (inputs, targets), two lists.

    round(len * noise_density) tokens (at least 1) are dropped, in
    round(noise / mean_span_length) spans (at least 1) of random lengths, separated by kept
    runs of random lengths: kept, dropped, kept, ..., dropped, as in T5's
    `random_spans_noise_mask` (Raffel et al. 2020, section 3.1.4), so the last span ends the
    sequence. Span i is replaced in the input by sentinels[i]; the
    target is each sentinel followed by the span it stands for, then one more sentinel:
        "Thank you for inviting me to your party last week."
        -> inputs  "Thank you <X> me to your party <Y> week."
           targets "<X> for inviting <Y> last <Z>"
    `sentinels` must hold at least spans + 1 tokens that never occur in `tokens`.
    """
    n = len(tokens)
    if n < 2:
        raise ValueError(f"tokens must hold at least 2 tokens, got {n}")
    if not is_number(noise_density) or not 0.0 < noise_density < 1.0:
        raise ValueError(f"noise_density must be in (0, 1), got {noise_density!r}")
    if not is_number(mean_span_length) or not mean_span_length >= 1.0:
        raise ValueError(f"mean_span_length must be a number >= 1, got {mean_span_length!r}")
    num_noise = min(max(1, round(n * noise_density)), n - 1)
    num_spans = min(max(1, round(num_noise / mean_span_length)), n - num_noise)
    if len(sentinels) < num_spans + 1:
        raise ValueError(
            f"sentinels must hold at least {num_spans + 1} tokens (one per span and one to "
            f"end the target), got {len(sentinels)}"
        )

    def split(total: int) -> list[int]:
        """`total` items cut into num_spans runs of at least 1, cut points uniformly drawn."""
        cuts = torch.randperm(total - 1, generator=generator)[: num_spans - 1] + 1
        edges = [0, *sorted(cuts.tolist()), total]
        return [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]

    noise_lengths, kept_lengths = split(num_noise), split(n - num_noise)
    inputs: list[T] = []
    targets: list[T] = []
    position = 0
    for span, (kept, noise) in enumerate(zip(kept_lengths, noise_lengths, strict=True)):
        inputs.extend(tokens[position : position + kept])
        position += kept
        inputs.append(sentinels[span])
        targets.append(sentinels[span])
        targets.extend(tokens[position : position + noise])
        position += noise
    targets.append(sentinels[num_spans])
    return inputs, targets


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """images (batch, channels, H, W) -> patches (batch, num_patches, patch_dim).

    The image is cut into non-overlapping patch_size x patch_size squares, read row by row
    (left to right, then top to bottom), num_patches = (H / p) * (W / p). Each patch is
    flattened as (channels, row, column), like a Conv2d kernel, patch_dim = channels * p * p.
    H and W must be multiples of patch_size.
    """
    check_tensor(images, "images", ndim=4, shape_hint="(batch, channels, H, W)")
    check_positive_int(patch_size, "patch_size")
    batch, channels, height, width = images.shape
    if height % patch_size or width % patch_size:
        raise ValueError(
            f"images of size {height} x {width} cannot be cut into "
            f"{patch_size} x {patch_size} patches; H and W must be multiples of "
            "patch_size"
        )
    rows, cols = height // patch_size, width // patch_size
    x = images.reshape(batch, channels, rows, patch_size, cols, patch_size)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (batch, rows, cols, channels, p, p)
    return x.reshape(batch, rows * cols, channels * patch_size * patch_size)


def _pre_norm_encoder(
    d_model: int, num_heads: int, num_layers: int, d_ff: int | None, dropout: float
) -> Encoder:
    """Lesson 07's Encoder: pre-norm GELU layers (no causal mask), then a final LayerNorm."""
    return Encoder(
        lambda: EncoderLayer(
            d_model,
            num_heads,
            d_ff or 4 * d_model,
            dropout=dropout,
            norm_first=True,
            activation="gelu",
        ),
        num_layers,
        LayerNorm(d_model),
    )


class MaskedLM(nn.Module):
    """An encoder-only (BERT-style) model: ids (batch, seq) -> logits (batch, seq, vocab_size).

    Token embedding + learned positions (both initialised N(0, 0.02²), as in BERT), pre-norm
    encoder layers with NO causal mask (each position sees both sides), a final LayerNorm and a
    linear layer to the vocabulary. Trained on `mlm_mask`'d inputs, the logits at a masked
    position guess the hidden token.
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        d_ff: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        check_positive_int(vocab_size, "vocab_size")
        check_positive_int(max_len, "max_len")
        self.vocab_size, self.max_len = vocab_size, max_len
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        # BERT's init, N(0, 0.02²), the scale of the position table: an encoder sees order only
        # through the positions, and under N(0, 1) token vectors they would start drowned out
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        self.position_embedding = LearnedPositionalEmbedding(max_len, d_model)
        self.encoder = _pre_norm_encoder(d_model, num_heads, num_layers, d_ff, dropout)
        self.lm_head = nn.Linear(d_model, vocab_size)

    @door
    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        if at_the_door():  # once here; the encoder and its layers then skip their checks
            check_ids(ids, "ids", vocab_size=self.vocab_size)
            if ids.shape[1] > self.max_len:
                raise ValueError(f"ids has {ids.shape[1]} tokens but max_len={self.max_len}")
            if mask is not None:
                heads, n = self.encoder.layers[0].num_heads, ids.shape[1]
                check_attention_mask(mask, "mask", len(ids), heads, n, n)
        x = self.position_embedding(self.token_embedding(ids))  # + positions: (batch, seq, d)
        return self.lm_head(self.encoder(x, mask))  # bidirectional: (batch, seq, vocab_size)


class VisionTransformer(nn.Module):
    """A tiny ViT: images (batch, channels, H, W) -> class logits (batch, num_classes).

    patchify -> a linear map of each patch to d_model (the patch embedding) -> a learned [CLS]
    token in front -> learned positions -> pre-norm encoder layers -> LayerNorm -> a linear
    classifier on the [CLS] token's output. To look at attention, call
    `course_lib.blocks.record_attention(model)`; token 0 is [CLS], tokens 1.. the patches.
    """

    def __init__(
        self,
        image_size: int,
        patch_size: int,
        num_classes: int,
        channels: int = 3,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        d_ff: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        for value, name in (
            (image_size, "image_size"),
            (patch_size, "patch_size"),
            (num_classes, "num_classes"),
            (channels, "channels"),
        ):
            check_positive_int(value, name)
        if image_size % patch_size:
            raise ValueError(
                f"image_size={image_size} is not a multiple of patch_size={patch_size}"
            )
        self.image_size, self.patch_size, self.channels = image_size, patch_size, channels
        self.num_patches = (image_size // patch_size) ** 2
        self.patch_embedding = nn.Linear(channels * patch_size**2, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.position_embedding = LearnedPositionalEmbedding(self.num_patches + 1, d_model)
        self.encoder = _pre_norm_encoder(d_model, num_heads, num_layers, d_ff, dropout)
        self.head = nn.Linear(d_model, num_classes)

    @door
    def forward(self, images: Tensor) -> Tensor:
        # once here; patchify, the encoder and its layers skip their checks
        checking = at_the_door()
        if checking:
            check_tensor(images, "images", ndim=4, shape_hint="(batch, channels, H, W)")
            expected = (self.channels, self.image_size, self.image_size)
            if tuple(images.shape[1:]) != expected:
                raise ValueError(
                    f"images must be (batch, {', '.join(map(str, expected))}), got "
                    f"{tuple(images.shape)}"
                )
        patches = patchify(images, self.patch_size)  # (batch, patches, channels * patch²)
        if checking:  # floating, with the weights' dtype and device (numpy gives float64)
            weights = self.patch_embedding.weight
            check_features(patches, "images", weights.shape[1], "this ViT", weights=weights)
        tokens = self.patch_embedding(patches)  # (batch, patches, d_model)
        cls = self.cls_token.expand(images.shape[0], -1, -1)  # (batch, 1, d_model)
        x = self.position_embedding(torch.cat([cls, tokens], dim=1))  # (b, 1 + patches, d)
        return self.head(self.encoder(x)[:, 0])  # (batch, num_classes) from [CLS]
