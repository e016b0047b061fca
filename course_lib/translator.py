"""Complete models built from the course's blocks (lesson 08).

`Seq2SeqTransformer` is the original Transformer end to end, for token ids in and logits out:

    src ids (batch, n_src) -> embedding * sqrt(d_model) + sinusoidal positions -> encoder -> memory
    tgt ids (batch, n_tgt) -> embedding * sqrt(d_model) + sinusoidal positions
                           -> decoder (causal self-attention, cross-attention to memory)
                           -> output projection -> logits (batch, n_tgt, vocab)

Source and target share one vocabulary, so they share one embedding table. `encode` runs once
per source (memory, as `EncoderDecoder.encode`); `decode` then runs for every step of
generation (see `course_lib.decoding`). Lesson 08's sizes and training run are
`course_lib.recipes.TRANSLATOR_RECIPE`.
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from .blocks import EncoderDecoder, count_parameters
from .masking import causal_mask, padding_mask
from .positional import SinusoidalPositionalEncoding
from .validation import (
    at_the_door,
    check_attention_mask,
    check_ids,
    check_positive_int,
    check_same_batch,
    check_sequence,
    door,
    is_int,
)

__all__ = ["Seq2SeqTransformer"]


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
        if not is_int(pad_id) or not 0 <= pad_id < vocab_size:
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

    def embed(self, ids: Tensor) -> Tensor:
        """(batch, seq) ids -> (batch, seq, d_model): scaled embeddings plus positions."""
        return self.positions(self.embedding(ids) * math.sqrt(self.d_model))

    def source_mask(self, src: Tensor) -> Tensor:
        """src (batch, n_src) -> (batch, 1, n_src), True = a real character (not padding)."""
        return padding_mask(src, self.pad_id)

    def _check_ids(self, ids: Tensor, name: str, seq: str) -> None:
        """Token ids of this vocabulary, no longer than the positional encoding reaches."""
        check_ids(ids, name, seq, self.vocab_size)
        max_len = self.positions.max_len
        if ids.shape[1] > max_len:
            raise ValueError(
                f"{name} has {ids.shape[1]} tokens but this model's max_len={max_len}: it has no "
                f"positional encoding beyond position {max_len - 1}; build it with a larger "
                "max_len or use shorter sequences"
            )

    def _check_src_mask(self, src_mask: Tensor | None, batch: int, n_q: int, n_src: int) -> None:
        if src_mask is not None:
            check_attention_mask(src_mask, "src_mask", batch, self.core.num_heads, n_q, n_src)

    @door
    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src (batch, n_src) -> memory (batch, n_src, d_model), as `EncoderDecoder.encode`;
        src_mask defaults to `source_mask(src)`."""
        if at_the_door():  # once here: the core, its layers and the positions skip their checks
            self._check_ids(src, "src", "n_src")
            self._check_src_mask(src_mask, len(src), src.shape[1], src.shape[1])
        src_mask = self.source_mask(src) if src_mask is None else src_mask
        return self.core.encode(self.embed(src), src_mask)

    @door
    def decode(self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """tgt_in (batch, n_tgt) and memory -> logits (batch, n_tgt, vocab_size)."""
        if at_the_door():
            self._check_ids(tgt_in, "tgt_in", "n_tgt")
            check_sequence(
                memory, "memory", self.d_model, "n_src", "this model", self.output.weight
            )
            check_same_batch(tgt_in, "tgt_in", memory, "memory")
            self._check_src_mask(src_mask, len(tgt_in), tgt_in.shape[1], memory.shape[1])
        n_tgt = tgt_in.shape[1]
        tgt_mask = causal_mask(n_tgt, device=tgt_in.device)  # (n_tgt, n_tgt)
        hidden = self.core.decode(self.embed(tgt_in), memory, tgt_mask, src_mask)
        return self.output(hidden)  # (batch, n_tgt, vocab_size)

    @door
    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        if at_the_door():
            self._check_ids(src, "src", "n_src")
            self._check_ids(tgt_in, "tgt_in", "n_tgt")
            if tgt_in.shape[0] != src.shape[0]:
                raise ValueError(
                    f"src has batch={src.shape[0]} but tgt_in has batch="
                    f"{tgt_in.shape[0]}; they must be the same sentence pairs"
                )
        src_mask = self.source_mask(src)  # (batch, 1, n_src)
        return self.decode(tgt_in, self.encode(src, src_mask), src_mask)

    def num_parameters(self) -> int:
        return count_parameters(self)
