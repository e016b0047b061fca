"""Complete models built from the course's blocks (lesson 08).

`Seq2SeqTransformer` is the original Transformer end to end, for token ids in and logits out:

    src ids (batch, n_src) -> embedding * sqrt(d_model) + sinusoidal positions -> encoder -> memory
    tgt ids (batch, n_tgt) -> embedding * sqrt(d_model) + sinusoidal positions
                           -> decoder (causal self-attention, cross-attention to memory)
                           -> output projection -> logits (batch, n_tgt, vocab)

Source and target share one vocabulary, so they share one embedding table. `encode` runs once
per source; `decode` then runs for every step of generation (see `course_lib.decoding`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .blocks import EncoderDecoder, count_parameters
from .masking import causal_mask, padding_mask
from .positional import SinusoidalPositionalEncoding
from .validation import check_positive_int, check_tensor

__all__ = ["Seq2SeqTransformer", "TRANSLATOR_CONFIG"]

# Lesson 08's date translator, sized for a 2-core laptop CPU (benchmarks/train_translator.py
# trains exactly this). Sizes of the model, then of the training run.
TRANSLATOR_CONFIG = dict(
    d_model=64,
    num_heads=4,
    num_encoder_layers=2,
    num_decoder_layers=2,
    d_ff=256,
    dropout=0.0,
    batch_size=64,
    bucket=8,
    steps=700,
    warmup=100,
    factor=0.7,
    cooldown=0.3,
    smoothing=0.1,
    clip=1.0,
)


class Seq2SeqTransformer(nn.Module):
    """Token ids -> logits: embeddings, positions, `EncoderDecoder`, output projection.

    forward(src (batch, n_src), tgt_in (batch, n_tgt)) -> logits (batch, n_tgt, vocab_size),
    where tgt_in is the decoder input (<bos> + target[:-1], see `train.shift_right`) and
    logits[:, t] predicts target token t. Padded source positions (== pad_id) are masked out of
    both the encoder's self-attention and the decoder's cross-attention; the decoder's
    self-attention is causal (target pads sit after <eos>, where the causal mask already keeps
    every real token from seeing them).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 128,
        num_heads: int = 4,
        num_encoder_layers: int = 2,
        num_decoder_layers: int = 2,
        d_ff: int = 512,
        dropout: float = 0.0,
        pad_id: int = 0,
        max_len: int = 256,
        norm_first: bool = False,
    ):
        super().__init__()
        check_positive_int(vocab_size, "vocab_size")
        if isinstance(pad_id, bool) or not isinstance(pad_id, int) or not 0 <= pad_id < vocab_size:
            raise ValueError(
                f"pad_id must be an int in [0, vocab_size={vocab_size}), got {pad_id!r}"
            )
        self.vocab_size, self.d_model, self.pad_id = vocab_size, d_model, pad_id
        self.core = EncoderDecoder(
            d_model,
            num_heads,
            num_encoder_layers,
            num_decoder_layers,
            d_ff,
            dropout=dropout,
            norm_first=norm_first,
        )
        self.embedding = nn.Embedding(vocab_size, d_model)
        # std d_model^-0.5, so that after the sqrt(d_model) scale the embeddings have std 1,
        # the size of the sinusoidal positions they are added to.
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        self.positions = SinusoidalPositionalEncoding(d_model, max_len, dropout)
        self.output = nn.Linear(d_model, vocab_size)

    def _check_ids(self, ids: object, name: str, seq: str) -> Tensor:
        check_tensor(
            ids,
            name,
            ndim=2,
            shape_hint=f"(batch, {seq}) of token ids",
            dtype=(torch.int64, torch.int32),
        )
        if ids.min() < 0 or ids.max() >= self.vocab_size:
            raise ValueError(f"{name} holds ids outside [0, vocab_size={self.vocab_size})")
        return ids

    def embed(self, ids: Tensor) -> Tensor:
        """(batch, seq) ids -> (batch, seq, d_model): scaled embeddings plus positions."""
        return self.positions(self.embedding(ids) * math.sqrt(self.d_model))

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (batch, n_src) -> (memory (batch, n_src, d_model), src_mask (batch, 1, n_src))."""
        self._check_ids(src, "src", "n_src")
        src_mask = padding_mask(src, self.pad_id)  # (batch, 1, n_src), True = real character
        return self.core.encode(self.embed(src), src_mask), src_mask

    def decode(self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """tgt_in (batch, n_tgt) and memory -> logits (batch, n_tgt, vocab_size)."""
        self._check_ids(tgt_in, "tgt_in", "n_tgt")
        n_tgt = tgt_in.shape[1]
        tgt_mask = causal_mask(n_tgt, device=tgt_in.device)  # (n_tgt, n_tgt)
        hidden = self.core.decode(self.embed(tgt_in), memory, tgt_mask, src_mask)
        return self.output(hidden)  # (batch, n_tgt, vocab_size)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        self._check_ids(src, "src", "n_src")
        self._check_ids(tgt_in, "tgt_in", "n_tgt")
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"src has batch={src.shape[0]} but tgt_in has batch="
                f"{tgt_in.shape[0]}; they must be the same sentence pairs"
            )
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)

    def num_parameters(self) -> int:
        return count_parameters(self)
