"""Transformer blocks (lesson 07): feed-forward, encoder and decoder layers, stacks.

LayerNorm and the residual wrapping live in `course_lib.norms` (lesson 07 too), so that lesson
06's cross-attention sub-layer uses the same ones; they are imported here under the same names.

Every sub-layer is wrapped in a residual connection and a LayerNorm, in one of two orders:

    post-norm (original, norm_first=False):  x = LayerNorm(x + Sublayer(x))
    pre-norm  (modern,   norm_first=True):   x = x + Sublayer(LayerNorm(x))

    EncoderLayer: self-attention (lesson 03), then FeedForward                (2 sub-layers)
    DecoderLayer: masked self-attention, lesson 06's CrossAttentionSublayer, FeedForward (3)
    EncoderDecoder: Encoder (N encoder layers + final norm) and Decoder (N decoder layers +
                    final norm), the embedding-free core of `torch.nn.Transformer`.

Inputs are (batch, seq, d_model). Masks are boolean, **True = may attend**, with the broadcasting
rules of `course_lib.multihead.MultiHeadAttention`: an (n_q, n_k) causal mask, a (batch, 1, n_k)
padding mask or a (batch, n_q, n_k) mask. The decoder's self-attention mask is `tgt_mask`, its
cross-attention mask `memory_mask`, as in PyTorch. `from_torch` loads the weights of PyTorch's
layers through a small map of state-dict names (`course_lib/from_torch.py`: theirs are flat,
`linear1`, `multihead_attn`, `norm2`; ours are the pieces they belong to,
`feed_forward.linear1`, `cross_attn.attn`, `cross_attn.norm`), so both give the same outputs.

To look at attention weights (they are not computed by default, the fused kernel is faster),
call `record_attention(model)`: after each forward, every `EncoderLayer` keeps
`.attention` and every `DecoderLayer` keeps `.attention` (self) and `.cross_attention`,
each (batch, num_heads, n_q, n_k).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from .cross_attention import CrossAttentionSublayer
from .from_torch import (
    DECODER_NAMES,
    ENCODER_NAMES,
    layer_from_torch,
    rename_torch_keys,
    transformer_from_torch,
)
from .kv_cache import LayerCache
from .multihead import MultiHeadAttention
from .norms import LayerNorm, layer_norm, residual
from .validation import (
    at_the_door,
    check_attention_mask,
    check_choice,
    check_decoder_inputs,
    check_dropout,
    check_features,
    check_flag,
    check_positive_int,
    check_same_batch,
    check_sequence,
    check_source,
    door,
)

__all__ = [
    "layer_norm",
    "LayerNorm",
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "EncoderDecoder",
    "record_attention",
    "count_parameters",
]


def relu_squared(x: Tensor) -> Tensor:
    """max(0, x)**2, the feed-forward activation of Primer (So et al. 2021)."""
    return F.relu(x).square()


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU with the tanh approximation, GPT-2's activation (Hugging Face's "gelu_new")."""
    return F.gelu(x, approximate="tanh")


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "relu2": relu_squared,
    "gelu_tanh": gelu_tanh,
}


# --------------------------------------------------------------------------------------------
# Position-wise feed-forward
# --------------------------------------------------------------------------------------------


class FeedForward(nn.Module):
    """The position-wise feed-forward network: linear2(dropout(activation(linear1(x)))).

    x (..., d_model) -> (..., d_model). It acts on every position separately with the same
    weights; d_ff is usually 4 * d_model.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        bias: bool = True,
    ):
        super().__init__()
        check_positive_int(d_model, "d_model")
        check_positive_int(d_ff, "d_ff")
        check_flag(bias, "bias")
        self.d_model, self.d_ff = d_model, d_ff
        self.activation = check_choice(activation, "activation", tuple(_ACTIVATIONS))
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.dropout = nn.Dropout(check_dropout(dropout))
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)

    @door
    def forward(self, x: Tensor) -> Tensor:
        if at_the_door():
            check_features(x, "x", self.d_model, "this feed-forward", weights=self.linear1.weight)
        hidden = _ACTIVATIONS[self.activation](self.linear1(x))  # (..., d_ff)
        return self.linear2(self.dropout(hidden))  # (..., d_model)


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


class _ResidualLayer(nn.Module):
    """What encoder and decoder layers share: the residual wrapping and self-attention.

    `load_state_dict` also accepts PyTorch's flat names (`linear1.weight`, `multihead_attn.
    in_proj_weight`, ...): a state dict of nn.TransformerEncoderLayer / DecoderLayer, or of a
    layer a learner named that way, loads as it is (`_load_from_state_dict` renames the keys
    first, as PyTorch's own modules do for their older checkpoints).
    """

    _TORCH_NAMES: dict[str, str] = {}

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        bias: bool = True,
        layer_norm_eps: float = 1e-5,
        rope: bool = False,
    ):
        super().__init__()
        dropout = check_dropout(dropout)
        self.d_model, self.num_heads, self.d_ff = d_model, num_heads, d_ff
        self.norm_first = check_flag(norm_first, "norm_first")
        self.self_attn = MultiHeadAttention(
            d_model, num_heads, dropout=dropout, bias=bias, rope=rope
        )
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation, bias)
        self.norm1 = LayerNorm(d_model, layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self._build(dropout, bias, layer_norm_eps)  # the layer's other sub-layers
        self.record_attention = False
        self.attention: Tensor | None = None

    def _build(self, dropout: float, bias: bool, layer_norm_eps: float) -> None:
        raise NotImplementedError

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        rename_torch_keys(state_dict, prefix, self._TORCH_NAMES)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _self_attention(
        self,
        h: Tensor,
        mask: Tensor | None,
        is_causal: bool = False,
        cache: LayerCache | None = None,
    ) -> Tensor:
        out, weights = self.self_attn(
            h, h, h, mask=mask, need_weights=self.record_attention, is_causal=is_causal, cache=cache
        )
        # kept only while recording is on (a hook that asks for the weights does not switch it on)
        self.attention = weights.detach() if self.record_attention and weights is not None else None
        return out


class EncoderLayer(_ResidualLayer):
    """Self-attention and feed-forward, each with a residual connection and a LayerNorm.

    forward(x (batch, seq, d_model), mask=None) -> (batch, seq, d_model); `mask` is boolean,
    True = may attend, e.g. a (batch, 1, seq) padding mask. norm_first=False is the original
    post-norm layer, norm_first=True the pre-norm one. Same parameters and outputs as
    nn.TransformerEncoderLayer(batch_first=True) (`from_torch` loads one).
    is_causal=True and `cache` make it a GPT block (lesson 09): causal self-attention, with the
    keys and values of earlier tokens in a `LayerCache` when generating.
    """

    def _build(self, dropout: float, bias: bool, layer_norm_eps: float) -> None:
        self.norm2 = LayerNorm(self.d_model, layer_norm_eps, bias=bias)
        self.dropout2 = nn.Dropout(dropout)

    _TORCH_NAMES = ENCODER_NAMES

    @door
    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        cache: LayerCache | None = None,
    ) -> Tensor:
        if at_the_door():
            check_sequence(x, "x", self.d_model, weights=next(self.parameters()))
            check_flag(is_causal, "is_causal")
            if mask is not None:
                check_attention_mask(mask, "mask", len(x), self.num_heads, x.shape[1], x.shape[1])
        attend = lambda h: self._self_attention(h, mask, is_causal, cache)
        x = residual(x, attend, self.norm1, self.dropout1, self.norm_first)  # (b, seq, d)
        return residual(x, self.feed_forward, self.norm2, self.dropout2, self.norm_first)

    @classmethod
    def from_torch(cls, module: nn.TransformerEncoderLayer) -> EncoderLayer:
        """Ours, with the weights of an nn.TransformerEncoderLayer(batch_first=True)."""
        return layer_from_torch(cls, module, nn.TransformerEncoderLayer)


class DecoderLayer(_ResidualLayer):
    """Masked self-attention, cross-attention to the encoder's output, feed-forward.

    forward(x (batch, n_tgt, d_model), memory (batch, n_src, d_model), tgt_mask=None,
    memory_mask=None) -> (batch, n_tgt, d_model). `tgt_mask` is usually the (n_tgt, n_tgt)
    causal mask (combined with a target padding mask), `memory_mask` the (batch, 1, n_src)
    source padding mask. The middle sub-layer is lesson 06's `CrossAttentionSublayer`
    (`cross_attn`, with its own norm and dropout). Same parameters and outputs as
    nn.TransformerDecoderLayer(batch_first=True) (`from_torch` loads one).
    """

    def _build(self, dropout: float, bias: bool, layer_norm_eps: float) -> None:
        self.cross_attn = CrossAttentionSublayer(
            self.d_model, self.num_heads, self.norm_first, dropout, bias, layer_norm_eps
        )
        self.norm3 = LayerNorm(self.d_model, layer_norm_eps, bias=bias)  # norm2: cross_attn.norm
        self.dropout3 = nn.Dropout(dropout)

    _TORCH_NAMES = DECODER_NAMES

    @property
    def cross_attention(self) -> Tensor | None:
        """The cross-attention weights of the last forward (with record_attention)."""
        return self.cross_attn.attention

    @door
    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        if at_the_door():
            check_decoder_inputs(
                x,
                "x",
                memory,
                tgt_mask,
                memory_mask,
                self.d_model,
                self.num_heads,
                weights=next(self.parameters()),
            )
        attend = lambda h: self._self_attention(h, tgt_mask)
        x = residual(x, attend, self.norm1, self.dropout1, self.norm_first)  # (b, n_tgt, d)
        x = self.cross_attn(x, memory, memory_mask)  # its own residual and norm (lesson 06)
        return residual(x, self.feed_forward, self.norm3, self.dropout3, self.norm_first)

    @classmethod
    def from_torch(cls, module: nn.TransformerDecoderLayer) -> DecoderLayer:
        """Ours, with the weights of an nn.TransformerDecoderLayer(batch_first=True)."""
        return layer_from_torch(cls, module, nn.TransformerDecoderLayer)


@door
def record_attention(model: nn.Module, enabled: bool = True) -> nn.Module:
    """Make every encoder/decoder layer in `model` keep its attention weights after forward.

    Afterwards `layer.attention` (self-attention) and, for decoder layers,
    `layer.cross_attention` hold (batch, num_heads, n_q, n_k) weights. Recording uses the
    slower unfused attention; call with enabled=False to switch it off. Returns `model`.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    check_flag(enabled, "enabled")
    for layer in model.modules():
        if isinstance(layer, (EncoderLayer, DecoderLayer, CrossAttentionSublayer)):
            layer.record_attention = enabled
            if not enabled:
                layer.attention = None
    return model


# --------------------------------------------------------------------------------------------
# Stacks
# --------------------------------------------------------------------------------------------


class _Stack(nn.Module):
    """What Encoder and Decoder share: `num_layers` copies of a layer, then an optional norm."""

    _kind: type = nn.Module  # the layer it stacks, for the error message

    def __init__(
        self,
        layer: nn.Module | Callable[[], nn.Module],
        num_layers: int,
        norm: nn.Module | None = None,
    ):
        super().__init__()
        self.layers = self._make_layers(layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def _make_layers(
        self, layer: nn.Module | Callable[[], nn.Module], num_layers: int
    ) -> nn.ModuleList:
        check_positive_int(num_layers, "num_layers")
        if isinstance(layer, nn.Module):  # as PyTorch does: independent deep copies
            layers = [copy.deepcopy(layer) for _ in range(num_layers)]
        elif callable(layer):  # a factory: each layer freshly initialised
            layers = [layer() for _ in range(num_layers)]
        else:
            raise TypeError(
                f"layer must be an {self._kind.__name__} or a function returning one, "
                f"got {type(layer).__name__}"
            )
        for built in layers:
            if not isinstance(built, nn.Module):
                raise TypeError(
                    f"the layer factory must return an nn.Module, got {type(built).__name__}"
                )
        return nn.ModuleList(layers)


class Encoder(_Stack):
    """`num_layers` encoder layers applied in turn, then an optional final LayerNorm.

    `layer` is an EncoderLayer (deep-copied num_layers times, as nn.TransformerEncoder does) or
    a function returning a new one. forward(x (batch, seq, d_model), mask=None) -> same shape.
    """

    _kind = EncoderLayer

    @door
    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        first = self.layers[0]
        if at_the_door() and isinstance(first, EncoderLayer):  # once, not in every layer
            check_sequence(x, "x", first.d_model, weights=next(first.parameters()))
            if mask is not None:
                n = x.shape[1]
                check_attention_mask(mask, "mask", len(x), first.num_heads, n, n)
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)


class Decoder(_Stack):
    """`num_layers` decoder layers applied in turn, then an optional final LayerNorm.

    forward(x (batch, n_tgt, d_model), memory (batch, n_src, d_model), tgt_mask=None,
    memory_mask=None) -> (batch, n_tgt, d_model). Every layer attends to the same memory.
    """

    _kind = DecoderLayer

    @door
    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        first = self.layers[0]
        if at_the_door() and isinstance(first, DecoderLayer):  # once, not in every layer
            check_decoder_inputs(
                x,
                "x",
                memory,
                tgt_mask,
                memory_mask,
                first.d_model,
                first.num_heads,
                weights=next(first.parameters()),
            )
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return x if self.norm is None else self.norm(x)


class EncoderDecoder(nn.Module):
    """The encoder-decoder core of the original Transformer, without embeddings or output layer.

    forward(src (batch, n_src, d_model), tgt (batch, n_tgt, d_model), src_mask=None,
    tgt_mask=None, memory_mask=None) -> (batch, n_tgt, d_model), where `src_mask` masks the
    encoder's self-attention (e.g. the (batch, 1, n_src) source padding mask), `tgt_mask` the
    decoder's self-attention (e.g. the (n_tgt, n_tgt) causal mask) and `memory_mask` its
    cross-attention (usually the source padding mask again). Same structure, parameters and
    outputs as nn.Transformer(batch_first=True), final encoder and decoder norms included.
    For inference, `encode` once and `decode` step by step.
    """

    def __init__(
        self,
        d_model: int = 512,
        num_heads: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        d_ff: int = 2048,
        dropout: float = 0.1,
        norm_first: bool = False,
        activation: str = "relu",
        bias: bool = True,
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        check_positive_int(num_encoder_layers, "num_encoder_layers")
        check_positive_int(num_decoder_layers, "num_decoder_layers")
        self.d_model, self.num_heads = d_model, num_heads
        options = dict(
            dropout=dropout,
            norm_first=norm_first,
            activation=activation,
            bias=bias,
            layer_norm_eps=layer_norm_eps,
        )
        self.encoder = Encoder(
            lambda: EncoderLayer(d_model, num_heads, d_ff, **options),
            num_encoder_layers,
            LayerNorm(d_model, layer_norm_eps, bias=bias),
        )
        self.decoder = Decoder(
            lambda: DecoderLayer(d_model, num_heads, d_ff, **options),
            num_decoder_layers,
            LayerNorm(d_model, layer_norm_eps, bias=bias),
        )
        for p in self.parameters():  # as nn.Transformer does: Xavier-uniform for every matrix
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    @door
    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """(batch, n_src, d_model) -> memory (batch, n_src, d_model)."""
        if at_the_door():
            check_source(src, src_mask, self.d_model, self.num_heads, next(self.parameters()))
        return self.encoder(src, src_mask)

    @door
    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        """(batch, n_tgt, d_model) and memory (batch, n_src, d_model) -> (batch, n_tgt, d_model)."""
        if at_the_door():
            check_decoder_inputs(
                tgt,
                "tgt",
                memory,
                tgt_mask,
                memory_mask,
                self.d_model,
                self.num_heads,
                weights=next(self.parameters()),
            )
        return self.decoder(tgt, memory, tgt_mask, memory_mask)

    @door
    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        if at_the_door():
            weights = next(self.parameters())
            check_source(src, src_mask, self.d_model, self.num_heads, weights)
            check_sequence(tgt, "tgt", self.d_model, "n_tgt")
            check_same_batch(src, "src", tgt, "tgt")  # named as the learner passed them
            check_decoder_inputs(
                tgt,
                "tgt",
                src,
                tgt_mask,
                memory_mask,
                self.d_model,
                self.num_heads,
                "src",
                weights,
            )
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, tgt_mask, memory_mask)

    @classmethod
    def from_torch(cls, module: nn.Transformer) -> EncoderDecoder:
        """Ours, with the weights of an nn.Transformer(batch_first=True): identical outputs."""
        return transformer_from_torch(cls, module)


def count_parameters(module: nn.Module) -> int:
    """The number of trainable numbers in `module`."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
