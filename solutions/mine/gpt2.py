"""Your own code from the exercises: the cells marked `# save in mine/gpt2.py`.

Edit those cells in their notebook, not this file: running a marked cell rewrites its part
below (between its ">>> cell" and "<<< cell" lines) and keeps the others. Later exercises use
these pieces through `mine("exNN.name")`, which checks them first.
"""
# ruff: noqa
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.mine import mine


# >>> cell: gpt2_to_mine
# save in mine/gpt2.py
def gpt2_to_mine(hf_state):
    """Hugging Face's GPT-2 state dict -> the state dict of your GPT (your names and layouts)."""
    ### BEGIN SOLUTION
    outside = {
        "wte.weight": "token_embedding.weight",
        "wpe.weight": "position_embedding.weight",
        "ln_f.weight": "norm.weight",
        "ln_f.bias": "norm.bias",
    }
    inside = {
        "ln_1": "norm1",
        "ln_2": "norm2",
        "attn.c_proj": "self_attn.out_proj",
        "mlp.c_fc": "feed_forward.linear1",
        "mlp.c_proj": "feed_forward.linear2",
    }
    ours = {}
    for key, value in hf_state.items():
        key = key.removeprefix("transformer.")
        if key in outside:
            ours[outside[key]] = value
            continue
        if not key.startswith("h."):
            continue  # lm_head.weight: the output layer is tied to the token embedding (below)
        _, layer, rest = key.split(".", 2)  # "h", "3", "attn.c_attn.weight"
        name, kind = rest.rsplit(".", 1)  # "attn.c_attn", "weight"
        if name == "attn":
            continue  # attn.bias and attn.masked_bias: the causal mask, a buffer
        value = value.t() if value.dim() == 2 else value  # Conv1D (in, out) -> Linear (out, in)
        if name == "attn.c_attn":  # q | k | v side by side
            for proj, part in zip("qkv", value.chunk(3, dim=0), strict=True):  # 3 x (d, ...)
                ours[f"layers.{layer}.self_attn.{proj}_proj.{kind}"] = part
            continue
        ours[f"layers.{layer}.{inside[name]}.{kind}"] = value
    ours["lm_head.weight"] = ours["token_embedding.weight"]
    return ours
    ### END SOLUTION
# <<< cell: gpt2_to_mine
