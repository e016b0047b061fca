"""GPT-2's weights in the course's GPT (lesson 09): OpenAI's 124M model is our `GPT` with
GPT-2's switches on, and its state dict is ours under other names.

What GPT-2 has that the lesson's GPT does not, all `GPTConfig` options (`gpt2_config`):
biases in every linear layer and LayerNorm (`bias=True`), GELU with the tanh approximation
(`activation="gelu_tanh"`), 1,024 learned positions, a vocabulary of 50,257 BPE tokens
(`course_lib.bpe.BPETokenizer.gpt2()`). The rest is the same: learned positions added to the
token embeddings, pre-norm blocks, a final LayerNorm, an output layer tied to the embedding,
LayerNorm eps 1e-5.

Hugging Face's state dict (the file `pytorch_model.bin` of openai-community/gpt2) names and
stores the same numbers differently (`gpt2_to_course` maps them):

    theirs                                   ours
    wte.weight                               token_embedding.weight (and lm_head.weight: tied)
    wpe.weight                               position_embedding.embedding.weight
    h.{i}.ln_1, h.{i}.ln_2                   layers.{i}.norm1, layers.{i}.norm2
    h.{i}.attn.c_attn (d, 3d): q | k | v     layers.{i}.self_attn.q_proj, k_proj, v_proj
    h.{i}.attn.c_proj (d, d)                 layers.{i}.self_attn.out_proj
    h.{i}.mlp.c_fc (d, 4d), c_proj (4d, d)   layers.{i}.feed_forward.linear1, linear2
    ln_f                                     norm

GPT-2's linear layers are `Conv1D` modules that compute x @ W + b, so W is stored
(in_features, out_features), the transpose of an `nn.Linear` weight; `c_attn` holds the three
projections side by side (columns 0..d-1 are W_Q, then W_K, then W_V). The `attn.bias`
entries are not weights but each layer's causal mask, saved as a buffer; they are dropped.

Nothing here downloads: the weights (about 548 MB) are fetched only by the lesson's own cell,
when a learner runs it. tests/test_gpt2.py checks the map against Hugging Face's GPT2LMHeadModel
(a small random one, built offline): the same logits and the same greedy tokens.
"""

from __future__ import annotations

import re
from os import PathLike

import torch
from torch import Tensor

from .gpt import GPT, GPTConfig
from .validation import check_positive_int

__all__ = ["GPT2_SIZES", "gpt2_config", "gpt2_to_course", "gpt_from_gpt2", "load_gpt2"]

# the smallest GPT-2 (124M parameters), the one the lesson loads
GPT2_SIZES = dict(vocab_size=50257, block_size=1024, d_model=768, num_heads=12, num_layers=12)

# Hugging Face's name inside one block -> ours, and whether the matrix is stored transposed
_BLOCK_NAMES = {
    "ln_1": ("norm1", False),
    "ln_2": ("norm2", False),
    "attn.c_proj": ("self_attn.out_proj", True),
    "mlp.c_fc": ("feed_forward.linear1", True),
    "mlp.c_proj": ("feed_forward.linear2", True),
}
_BLOCK_KEY = re.compile(r"h\.(\d+)\.(.+)\.(weight|bias)")
_MASK_KEY = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)")


def gpt2_config(**sizes: int) -> GPTConfig:
    """The GPTConfig of GPT-2: the 124M model's sizes (GPT2_SIZES), any of them overridden,
    with GPT-2's switches (biases, tanh GELU, learned positions, tied output layer)."""
    return GPTConfig(
        **{**GPT2_SIZES, **sizes},
        bias=True,
        tie_weights=True,
        positions="learned",
        activation="gelu_tanh",
        layer_norm_eps=1e-5,
        dropout=0.0,
    )


def gpt2_to_course(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
    """Hugging Face's GPT-2 state dict -> the state dict of our GPT (module docstring's map).

    Accepts the keys with or without the "transformer." prefix (GPT2LMHeadModel's and the
    original file's), drops the causal-mask buffers (`attn.bias`, `attn.masked_bias`) and
    checks that an `lm_head.weight`, if present, is the token embedding (ours is tied).
    """
    if not isinstance(state_dict, dict):
        raise TypeError(f"state_dict must be a dict of tensors, got {type(state_dict).__name__}")
    theirs = {key.removeprefix("transformer."): value for key, value in state_dict.items()}
    if "wte.weight" not in theirs:
        raise ValueError(
            "state_dict has no 'wte.weight' (or 'transformer.wte.weight'): it is not a GPT-2 "
            f"state dict as Hugging Face stores it; its first keys are {list(state_dict)[:4]}"
        )
    ours: dict[str, Tensor] = {}
    unknown = []
    for key, value in theirs.items():
        if key in ("wte.weight", "lm_head.weight"):
            continue
        if key == "wpe.weight":
            ours["position_embedding.embedding.weight"] = value
        elif key.startswith("ln_f."):
            ours["norm." + key.removeprefix("ln_f.")] = value
        elif _MASK_KEY.fullmatch(key):
            continue  # the causal mask, a buffer: our attention builds its own
        elif match := _BLOCK_KEY.fullmatch(key):
            layer, name, kind = match.groups()
            prefix = f"layers.{layer}."
            if name == "attn.c_attn":  # q | k | v side by side: (d, 3d) or (3d,)
                parts = value.t() if kind == "weight" else value  # (3d, d) or (3d,)
                for proj, part in zip(("q", "k", "v"), parts.chunk(3), strict=True):
                    ours[f"{prefix}self_attn.{proj}_proj.{kind}"] = part
            elif name in _BLOCK_NAMES:
                our_name, transposed = _BLOCK_NAMES[name]
                ours[f"{prefix}{our_name}.{kind}"] = (
                    value.t() if transposed and kind == "weight" else value
                )
            else:
                unknown.append(key)
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(f"state_dict has keys that GPT-2 does not have: {unknown[:5]}")
    ours["token_embedding.weight"] = theirs["wte.weight"]
    ours["lm_head.weight"] = theirs["wte.weight"]  # tied: one matrix under two names
    head = theirs.get("lm_head.weight")
    if head is not None and not torch.equal(head, theirs["wte.weight"]):
        raise ValueError(
            "state_dict's lm_head.weight differs from wte.weight; GPT-2 ties them, and so "
            "does the GPT built here"
        )
    return {key: value.contiguous() for key, value in ours.items()}


def gpt_from_gpt2(
    cls: type[GPT], state_dict: dict[str, Tensor], num_heads: int | None = None
) -> GPT:
    """`cls` (GPT) with the weights of a GPT-2 state dict, in eval mode (what
    `GPT.from_gpt2` returns). Its sizes come from the shapes: vocabulary and width from
    wte, context from wpe, depth from the highest h.{i}; num_heads defaults to width / 64."""
    ours = gpt2_to_course(state_dict)
    vocab_size, d_model = ours["token_embedding.weight"].shape
    block_size = ours["position_embedding.embedding.weight"].shape[0]
    num_layers = 1 + max(int(key.split(".")[1]) for key in ours if key.startswith("layers."))
    if num_heads is None:
        num_heads = max(1, d_model // 64)  # every GPT-2 has heads of 64 features
    check_positive_int(num_heads, "num_heads")
    config = gpt2_config(
        vocab_size=vocab_size,
        block_size=block_size,
        d_model=d_model,
        num_heads=num_heads,
        num_layers=num_layers,
    )
    dtype = ours["token_embedding.weight"].dtype
    model = cls(config).to(dtype)
    model.load_state_dict(ours)  # strict: every weight of ours is filled, nothing is left over
    return model.eval()


def load_gpt2(path: str | PathLike, num_heads: int | None = None) -> GPT:
    """Our GPT with GPT-2's weights, from a `pytorch_model.bin` already on disk (Hugging
    Face's file; the lesson's cell downloads it when asked). Read with weights_only=True:
    tensors only, no code runs from the file."""
    state_dict = torch.load(path, map_location="cpu", weights_only=True)
    return gpt_from_gpt2(GPT, state_dict, num_heads)
