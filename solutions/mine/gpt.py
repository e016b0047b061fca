"""Your own code from the exercises: the cells marked `# save in mine/gpt.py`.

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


# >>> cell: pieces
# save in mine/gpt.py
split_heads = mine("ex03.split_heads")
merge_heads = mine("ex03.merge_heads")
MultiHeadAttention = mine("ex03.MultiHeadAttention")
apply_rope = mine("ex04.apply_rope")
causal_mask = mine("ex05.causal_mask")
masked_attention = mine("ex05.masked_attention")
LayerNorm = mine("ex07.LayerNorm")
FeedForward = mine("ex07.FeedForward")
cached_attention_step = mine("ex09.cached_attention_step")
# <<< cell: pieces


# >>> cell: GPT
# save in mine/gpt.py
class CausalSelfAttention(MultiHeadAttention):
    """Your multi-head attention, causal, with optional rotary positions and a KV cache.

    forward(x (batch, n, d_model), cache=None or (k_cache, v_cache), start=0)
    -> (output (batch, n, d_model), the new cache or None).
    """

    def __init__(self, d_model, num_heads, bias=False, rope=False):
        super().__init__(d_model, num_heads, bias=bias)
        ### BEGIN SOLUTION
        self.heads, self.rope = num_heads, rope
        ### END SOLUTION

    def forward(self, x, cache=None, start=0):
        ### BEGIN SOLUTION
        n = x.shape[1]
        q = split_heads(self.q_proj(x), self.heads)  # (batch, heads, n, d_head)
        k = split_heads(self.k_proj(x), self.heads)
        v = split_heads(self.v_proj(x), self.heads)
        if self.rope:
            positions = torch.arange(start, start + n, device=x.device)  # (n,)
            q, k = apply_rope(q, positions), apply_rope(k, positions)
        if cache is None:
            heads, _ = masked_attention(q, k, v, causal_mask(n).to(x.device))
        else:
            k_cache, v_cache = cache
            outputs = []
            for t in range(n):  # one new token at a time, each seeing the cache and itself
                out, k_cache, v_cache = cached_attention_step(
                    q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], k_cache, v_cache
                )
                outputs.append(out)  # (batch, heads, 1, d_head)
            heads, cache = torch.cat(outputs, dim=2), (k_cache, v_cache)
        return self.out_proj(merge_heads(heads)), cache  # (batch, n, d_model)
        ### END SOLUTION


class Block(nn.Module):
    """A pre-norm GPT block: forward(x, cache=None, start=0) -> (x, cache)."""

    def __init__(self, d_model, num_heads, d_ff, bias, activation, rope, eps):
        super().__init__()
        ### BEGIN SOLUTION
        self.self_attn = CausalSelfAttention(d_model, num_heads, bias, rope)
        self.feed_forward = FeedForward(d_model, d_ff, activation=activation, bias=bias)
        self.norm1 = LayerNorm(d_model, eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps, bias=bias)
        ### END SOLUTION

    def forward(self, x, cache=None, start=0):
        ### BEGIN SOLUTION
        attended, cache = self.self_attn(self.norm1(x), cache, start)
        x = x + attended  # (batch, n, d_model)
        return x + self.feed_forward(self.norm2(x)), cache
        ### END SOLUTION


class GPT(nn.Module):
    """ids (batch, seq <= block_size) -> logits (batch, seq, vocab_size), built from your pieces,
    with course_lib.gpt.GPT's parameter names; forward_cached for generation with a KV cache.
    """

    def __init__(
        self,
        vocab_size,
        block_size,
        d_model,
        num_heads,
        num_layers,
        d_ff=None,
        bias=False,
        activation="gelu",
        positions="learned",
        layer_norm_eps=1e-5,
        tie_weights=True,
    ):
        super().__init__()
        ### BEGIN SOLUTION
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        if positions == "learned":
            self.position_embedding = nn.Embedding(block_size, d_model)
        self.layers = nn.ModuleList(
            Block(
                d_model,
                num_heads,
                d_ff or 4 * d_model,
                bias,
                activation,
                positions == "rope",
                layer_norm_eps,
            )
            for _ in range(num_layers)
        )
        self.norm = LayerNorm(d_model, layer_norm_eps, bias=bias)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_weights:
            self.lm_head.weight = self.token_embedding.weight  # one matrix reads and writes
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if p.dim() == 2:
                residual = name.endswith(("out_proj.weight", "linear2.weight"))
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * num_layers) if residual else 0.02)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
        ### END SOLUTION

    def embed(self, ids, start):
        """Token embeddings, plus the learned positions start .. start + n - 1 if any."""
        ### BEGIN SOLUTION
        x = self.token_embedding(ids)  # (batch, n, d_model)
        if hasattr(self, "position_embedding"):
            n = ids.shape[1]
            x = x + self.position_embedding(torch.arange(start, start + n, device=ids.device))
        return x
        ### END SOLUTION

    def forward(self, ids):
        ### BEGIN SOLUTION
        x = self.embed(ids, 0)
        for layer in self.layers:
            x, _ = layer(x)  # no cache: the whole sequence, causal
        return self.lm_head(self.norm(x))  # (batch, seq, vocab_size)
        ### END SOLUTION

    def forward_cached(self, ids, cache, start):
        ### BEGIN SOLUTION
        x = self.embed(ids, start)
        if cache is None:  # the first call: an empty cache per layer
            heads = self.layers[0].self_attn.heads
            empty = x.new_zeros(ids.shape[0], heads, 0, x.shape[-1] // heads)
            cache = [(empty, empty)] * len(self.layers)
        new_cache = []
        for layer, layer_cache in zip(self.layers, cache, strict=True):
            x, layer_cache = layer(x, layer_cache, start)
            new_cache.append(layer_cache)
        return self.lm_head(self.norm(x)), new_cache
        ### END SOLUTION
# <<< cell: GPT
