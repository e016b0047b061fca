"""PyTorch's Transformer modules loaded into ours (lessons 03, 06, 07): same weights and outputs.

The layers keep one short `from_torch` classmethod each and call in here, so `multihead.py`
and `blocks.py` hold the layers themselves. Two differences in naming are all there is:

- `nn.MultiheadAttention` stacks the three input projections in one `in_proj_weight`
  (3 d_model, d_model): rows 0..d-1 are W_Q, then W_K, then W_V. Ours are three `nn.Linear`s,
  `q_proj`, `k_proj`, `v_proj` (`torch_attention_state` splits the stack).
- `nn.TransformerEncoderLayer` / `DecoderLayer` name their pieces flat (`linear1`,
  `multihead_attn`, `norm2`); ours are named for the module they belong to
  (`feed_forward.linear1`, `cross_attn.attn`, `cross_attn.norm`): `ENCODER_NAMES`,
  `DECODER_NAMES`, applied by `rename_torch_keys` when a state dict is loaded.

tests/test_blocks.py and tests/test_multihead.py check that every loaded module gives
PyTorch's outputs.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "torch_attention_state",
    "rename_torch_keys",
    "attention_from_torch",
    "layer_from_torch",
    "transformer_from_torch",
]

# PyTorch's flat names -> the pieces they belong to here
ENCODER_NAMES = {"linear1": "feed_forward.linear1", "linear2": "feed_forward.linear2"}
DECODER_NAMES = {**ENCODER_NAMES, "multihead_attn": "cross_attn.attn", "norm2": "cross_attn.norm"}

_BATCH_FIRST = (
    "(seq, batch, d_model) inputs; course_lib works on (batch, seq, d_model): "
    "build it with batch_first=True"
)


def torch_attention_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A state dict with nn.MultiheadAttention's names -> ours.

    PyTorch stacks the three input projections in one (3 d_model, d_model) matrix,
    `in_proj_weight` (and `in_proj_bias`): rows 0..d-1 are W_Q, then W_K, then W_V. Every
    `...in_proj_weight` key becomes `...q_proj.weight`, `...k_proj.weight`, `...v_proj.weight`;
    other keys (out_proj, and anything outside the attention) are kept as they are.
    """
    ours = {}
    for key, value in state.items():
        prefix, _, name = key.rpartition(".")
        prefix = prefix + "." if prefix else ""
        if name in ("in_proj_weight", "in_proj_bias"):
            kind = name.removeprefix("in_proj_")  # "weight" or "bias"
            for proj, part in zip(("q_proj", "k_proj", "v_proj"), value.chunk(3), strict=True):
                ours[f"{prefix}{proj}.{kind}"] = part
        else:
            ours[key] = value
    return ours


def rename_torch_keys(state: dict[str, Tensor], prefix: str, names: dict[str, str]) -> None:
    """In place: prefix + "linear1.weight" -> prefix + "feed_forward.linear1.weight", etc."""
    for key in [k for k in state if k.startswith(prefix)]:
        head, dot, rest = key[len(prefix) :].partition(".")
        if head in names and dot:
            state[f"{prefix}{names[head]}.{rest}"] = state.pop(key)


def attention_from_torch(cls: type, module: nn.Module) -> nn.Module:
    """`cls` (MultiHeadAttention) with the weights of a torch.nn.MultiheadAttention."""
    if not isinstance(module, nn.MultiheadAttention):
        raise TypeError(f"module must be nn.MultiheadAttention, got {type(module).__name__}")
    if not module._qkv_same_embed_dim:
        raise ValueError("only nn.MultiheadAttention with kdim = vdim = embed_dim is supported")
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("add_bias_kv and add_zero_attn have no counterpart here")
    bias = module.in_proj_bias is not None
    ours = cls(module.embed_dim, module.num_heads, dropout=module.dropout, bias=bias)
    ours = ours.to(module.in_proj_weight.device, module.in_proj_weight.dtype)
    ours.load_state_dict(module.state_dict())  # its _load_from_state_dict splits in_proj
    return ours


def _activation(module: nn.Module) -> str:
    """'relu' or 'gelu' for the activation stored in a PyTorch Transformer layer."""
    act = module.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    raise ValueError(f"only relu and gelu activations can be loaded, got {act!r}")


def _layer_options(layer: nn.Module) -> dict:
    """The keyword arguments of our layers that a PyTorch layer's settings translate to."""
    return dict(
        dropout=layer.dropout.p,
        norm_first=layer.norm_first,
        activation=_activation(layer),
        bias=layer.linear1.bias is not None,
        layer_norm_eps=layer.norm1.eps,
    )


def layer_from_torch(cls: type, module: nn.Module, expected: type) -> nn.Module:
    """`cls` (EncoderLayer, DecoderLayer) with the weights of a PyTorch layer of type `expected`."""
    if not isinstance(module, expected):
        raise TypeError(f"module must be torch.nn.{expected.__name__}, got {type(module).__name__}")
    if not module.self_attn.batch_first:
        raise ValueError(
            f"module is an nn.{expected.__name__} with batch_first=False, which takes "
            + _BATCH_FIRST
        )
    attn, weight = module.self_attn, module.linear1.weight
    ours = cls(
        attn.embed_dim, attn.num_heads, module.linear1.out_features, **_layer_options(module)
    )
    ours = ours.to(weight.device, weight.dtype)
    ours.load_state_dict(module.state_dict())  # each layer renames PyTorch's flat names
    return ours


def transformer_from_torch(cls: type, module: nn.Module) -> nn.Module:
    """`cls` (EncoderDecoder) with the weights of a torch.nn.Transformer."""
    if not isinstance(module, nn.Transformer):
        raise TypeError(f"module must be torch.nn.Transformer, got {type(module).__name__}")
    if not module.batch_first:
        raise ValueError(
            f"module is an nn.Transformer with batch_first=False, which takes {_BATCH_FIRST}"
        )
    enc, dec = module.encoder, module.decoder
    if not isinstance(enc, nn.TransformerEncoder) or not isinstance(dec, nn.TransformerDecoder):
        raise ValueError("only nn.Transformer with its own encoder and decoder can be loaded")
    if enc.norm is None or dec.norm is None:
        raise ValueError("the nn.Transformer must have final encoder and decoder norms")
    first = enc.layers[0]
    sizes = (module.d_model, module.nhead, len(enc.layers), len(dec.layers))
    ours = cls(*sizes, first.linear1.out_features, **_layer_options(first))
    ours = ours.to(first.linear1.weight.device, first.linear1.weight.dtype)
    ours.load_state_dict(module.state_dict())  # each layer renames PyTorch's flat names
    return ours
